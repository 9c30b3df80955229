// Package core is the dispatch core under sandboxd's APIs: the WebSocket
// (internal/wsapi) and MCP (internal/mcpapi) layers are thin translations onto
// it. It owns what the session manager does not: who may touch which session
// (operator token, per-session capability tokens), the numbered and replayable
// output stream of each session, idempotent retries, chunked file transfers,
// draining on shutdown and the call metrics.
package core

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/config"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/wsproto"
)

// Defaults of Options.
const (
	DefaultRingBytes    = 1 << 20 // per session: replayable output after a reconnect
	DefaultRingChunks   = 4096
	DefaultIdemEntries  = 256
	DefaultIdemBytes    = 8 << 20 // per session: stored results for retries
	DefaultIdemTTL      = 10 * time.Minute
	DefaultTransferIdle = 2 * time.Minute
	// DrainTransferIdle is the idle time of transfers once the server
	// drains: an abandoned one ends after it instead of DrainTimeout.
	DrainTransferIdle       = 2 * time.Second
	DefaultMaxTransfers     = 16 // per session, in progress at once
	DefaultDownloadChunk    = 4 << 20
	DefaultMaxDownloadChunk = 16 << 20
	DefaultCreateTimeout    = 3 * time.Minute
	// DefaultAbandonedCreateGrace is how long a session whose create's
	// client left before the answer waits for a retry with its
	// idempotency key before it is closed.
	DefaultAbandonedCreateGrace = time.Minute
)

// APIs that create sessions, kept on each session for listings.
const (
	APIWebSocket = "ws"
	APIMCP       = "mcp"
)

// Options configure a Core. Backend and OperatorToken are required.
type Options struct {
	Backend       Backend
	OperatorToken string
	Metrics       *metrics.Metrics // nil: a private set
	Logger        *slog.Logger     // nil: discard
	// Tokens persists session token digests so sessions kept over a
	// restart (--keep-sessions) stay reachable; nil keeps them in memory.
	Tokens *TokenStore
	// AllowedImages are path.Match patterns a client's image must match;
	// empty allows any image.
	AllowedImages []string
	// MaxSessions caps live sessions across all clients; 0 is no cap.
	MaxSessions int
	// Profiles are the server's session profiles by name (serve --config),
	// as written: a create names one and its own fields overlay it (their
	// image must match AllowedImages; the profile's is the operator's own
	// and need not). config.DefaultProfile, when defined, is the profile of
	// a create that names none.
	Profiles map[string]sandbox.SessionOptions
	// MCPDefault is the profile of an MCP create that names none when
	// Profiles has no default (serve --mcp-image); a WebSocket create then
	// has the manager's defaults alone.
	MCPDefault sandbox.SessionOptions
	// SnapshotRetention is a profile's snapshot_retention by name: the
	// retention of a snapshot of its sessions that names none (absent:
	// the manager's, serve --snapshot-retention).
	SnapshotRetention map[string]time.Duration

	RingBytes    int
	RingChunks   int
	IdemEntries  int
	IdemBytes    int64
	IdemTTL      time.Duration
	TransferIdle time.Duration
	// DrainTransferIdle replaces TransferIdle once the server drains
	// (default DrainTransferIdle).
	DrainTransferIdle time.Duration
	MaxTransfers      int // per session
	MaxDownloadChunk  int
	CreateTimeout     time.Duration
	// AbandonedCreateGrace: a session whose create's client stopped
	// waiting before the answer (it disconnected) is closed, at once
	// without an idempotency key (nobody can reach it), else after this
	// grace unless a retry with the key took it (default
	// DefaultAbandonedCreateGrace).
	AbandonedCreateGrace time.Duration
}

func (o *Options) setDefaults() error {
	if o.Backend == nil {
		return errors.New("core: Options.Backend is required")
	}
	if len(o.OperatorToken) < auth.MinTokenLength {
		return fmt.Errorf("core: operator token must be at least %d characters", auth.MinTokenLength)
	}
	for _, p := range o.AllowedImages {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("core: allowed image pattern %q: %w", p, err)
		}
	}
	for name := range o.Profiles {
		if !config.ProfileNameRe.MatchString(name) {
			return fmt.Errorf("core: %q is not a profile name", name)
		}
	}
	def(&o.RingBytes, DefaultRingBytes)
	def(&o.RingChunks, DefaultRingChunks)
	def(&o.IdemEntries, DefaultIdemEntries)
	def(&o.MaxDownloadChunk, DefaultMaxDownloadChunk)
	def(&o.MaxTransfers, DefaultMaxTransfers)
	def(&o.IdemBytes, DefaultIdemBytes)
	def(&o.IdemTTL, DefaultIdemTTL)
	def(&o.TransferIdle, DefaultTransferIdle)
	def(&o.DrainTransferIdle, DrainTransferIdle)
	def(&o.CreateTimeout, DefaultCreateTimeout)
	def(&o.AbandonedCreateGrace, DefaultAbandonedCreateGrace)
	if o.Metrics == nil {
		o.Metrics = metrics.New(nil)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Core is the dispatch core. Its methods are safe for concurrent use.
type Core struct {
	opts     Options
	log      *slog.Logger
	operator auth.Digest

	base   context.Context // parent of every call; cancelled by CancelCalls
	cancel context.CancelFunc

	mu       sync.Mutex
	sessions map[string]*Session
	byToken  map[auth.Digest]*Session
	creating int
	running  int           // calls in flight
	drained  chan struct{} // closed when running drops to 0 while draining
	draining bool
	keeping  bool // Shutdown keeps sessions: keep their token digests on disk
	closed   bool
	watchers sync.WaitGroup

	creates *idempotency // session.create by (token, idempotency key)
	ended   endedSet     // recently closed sessions: a repeated close succeeds
}

// New returns a Core and adopts the sessions the manager already has (kept
// by a previous daemon) whose token digests the store holds.
func New(opts Options) (*Core, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	base, cancel := context.WithCancel(context.Background())
	c := &Core{
		opts:     opts,
		log:      opts.Logger.With("component", "core"),
		operator: auth.DigestOf(opts.OperatorToken),
		base:     base,
		cancel:   cancel,
		sessions: map[string]*Session{},
		byToken:  map[auth.Digest]*Session{},
		creates:  newIdempotency(1024, 1<<20, opts.IdemTTL),
		ended:    endedSet{ttl: opts.IdemTTL, max: 4096},
	}
	c.creates.unclaimed = func(key string, result json.RawMessage) {
		var r struct{ ID string }
		if json.Unmarshal(result, &r) == nil {
			c.abandoned(key, r.ID)
		}
	}
	for _, s := range opts.Backend.List() {
		if c.adopt(s) == nil && opts.Tokens != nil {
			// No token on record: the previous daemon ended between the
			// sandbox's start and its answer to the client, so nobody can
			// ever reach it. Removed instead of holding a slot until idle.
			c.log.Info("removing a kept session with no token on record", "session", s.ID())
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				if err := s.Close(ctx); err != nil {
					c.log.Warn("removing a session with no token", "session", s.ID(), "err", err)
				}
			}()
		}
	}
	if opts.Tokens != nil {
		opts.Tokens.Prune(func(id string) bool { _, ok := opts.Backend.Get(id); return ok })
	}
	return c, nil
}

// Metrics returns the metrics the core records into.
func (c *Core) Metrics() *metrics.Metrics { return c.opts.Metrics }

// Logger returns the core's logger.
func (c *Core) Logger() *slog.Logger { return c.opts.Logger }

// Principal is who a request comes from.
type Principal struct {
	// Operator: the operator token; may create and list sessions.
	Operator bool
	// SessionID: a session token; may use that one session only.
	SessionID string
	digest    auth.Digest
}

// Authenticate resolves a bearer token. A wrong or missing token is
// Unauthenticated; which of the two is not said.
func (c *Core) Authenticate(token string) (Principal, error) {
	if token == "" {
		return Principal{}, apierr.New(apierr.Unauthenticated, "missing bearer token")
	}
	d := auth.DigestOf(token)
	if c.operator.Equal(d) {
		return Principal{Operator: true, digest: d}, nil
	}
	c.mu.Lock()
	s := c.byToken[d] // a map lookup of a digest: timing reveals nothing of the token
	id, reason, ended := c.ended.byTokenDigest(d, time.Now())
	c.mu.Unlock()
	if s != nil {
		return Principal{SessionID: s.id, digest: d}, nil
	}
	if ended {
		// Only the token's holder can learn this: the session it opened
		// has ended, and why (its container was killed, it idled out).
		return Principal{}, apierr.New(apierr.Unauthenticated, "session %s ended: %s; its token is no longer valid", id, reason)
	}
	return Principal{}, apierr.New(apierr.Unauthenticated, "invalid bearer token")
}

// notFound is the one answer for a session that does not exist and for one
// the caller may not see: they must be indistinguishable.
func notFound(id string) error {
	return apierr.New(apierr.NotFound, "no session %q", id)
}

// Authorize returns session id if p may use it: p authenticated with its
// token, or token (from the request) is its token. granted is the caller's
// earlier grant (it created or attached the session on this connection).
func (c *Core) Authorize(p Principal, id, token string, granted bool) (*Session, error) {
	s := c.lookup(id)
	if s == nil {
		return nil, notFound(id)
	}
	if granted || p.SessionID == id || (token != "" && s.token.Matches(token)) {
		return s, nil
	}
	return nil, notFound(id)
}

// Ended reports whether session id was closed recently (within the
// idempotency TTL) and p, or token, or the caller's earlier grant, could
// have used it: a repeated session.close then succeeds instead of saying
// "not found". Anyone else learns nothing (the same not-found as always).
func (c *Core) Ended(p Principal, id, token string, granted bool) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	d, ok := c.ended.get(id, time.Now())
	if !ok {
		return false
	}
	return p.Operator || granted || p.SessionID == id || (token != "" && d.Matches(token))
}

// lookup finds a session, adopting one the manager knows and the core does
// not yet (kept over a restart).
func (c *Core) lookup(id string) *Session {
	c.mu.Lock()
	s := c.sessions[id]
	c.mu.Unlock()
	if s != nil {
		return s
	}
	if sb, ok := c.opts.Backend.Get(id); ok {
		return c.adopt(sb)
	}
	return nil
}

// adopt registers a sandbox of the backend the core did not create in this run, if
// its token digest is on record. Without one nobody could ever reach it.
func (c *Core) adopt(sb Sandbox) *Session {
	if c.opts.Tokens == nil {
		return nil
	}
	d, ok := c.opts.Tokens.Load(sb.ID())
	if !ok {
		return nil
	}
	s, err := c.register(sb, d, APIWebSocket)
	if err != nil {
		return nil
	}
	c.log.Info("adopted session", "session", sb.ID())
	return s
}

// CreateResult is a new session and its capability token (returned once).
type CreateResult struct {
	Session *Session
	Token   string
}

// CreateRequest is what a session create asks for.
type CreateRequest struct {
	// Profile names the session's profile; "" is the default one (see
	// Options.Profiles).
	Profile string
	// Options are the client's own fields: they overlay the profile's
	// (sandbox.SessionOptions.Over), and their image must be allowed
	// (Options.AllowedImages).
	Options sandbox.SessionOptions
	// IdleTimeout, when set, is the API's own idle timeout for the session
	// (MCP's; NoIdleTimeout: never): not one of its options, so a warm pool
	// of the profile hands out to it (sandbox.CreateOptions).
	IdleTimeout time.Duration
	// IdempotencyKey makes a retry of the same create return the first
	// create's session.
	IdempotencyKey string
}

// Profile returns the options of a profile, as written in the config: ""
// is the default profile of api (Options.Profiles' default, else for MCP
// Options.MCPDefault, else none). An unknown name is an invalid-params
// error listing the defined profiles.
func (c *Core) Profile(api, name string) (sandbox.SessionOptions, error) {
	if o, ok := c.opts.Profiles[name]; ok {
		return o, nil
	}
	if name != "" {
		return sandbox.SessionOptions{}, apierr.New(apierr.InvalidParams, "%v", config.UnknownProfile(name, c.ProfileNames()))
	}
	if o, ok := c.opts.Profiles[config.DefaultProfile]; ok {
		return o, nil
	}
	if api == APIMCP {
		return c.opts.MCPDefault, nil
	}
	return sandbox.SessionOptions{}, nil
}

// HasProfile says whether a profile of that name is defined.
func (c *Core) HasProfile(name string) bool {
	_, ok := c.opts.Profiles[name]
	return ok
}

// ProfileNames are the defined profiles, sorted.
func (c *Core) ProfileNames() []string { return slices.Sorted(maps.Keys(c.opts.Profiles)) }

// Create starts a session for p (the operator): the request's options over
// its profile's. With an idempotency key, a retry of the same create (same
// principal, key, profile and options) returns the first create's session;
// the create then runs to completion even if the caller goes away, since a
// retry may come to collect it.
func (c *Core) Create(wait context.Context, p Principal, api string, req CreateRequest) (CreateResult, error) {
	if !p.Operator {
		return CreateResult{}, apierr.New(apierr.PermissionDenied, "a session token cannot create sessions; use the operator token")
	}
	profile, err := c.Profile(api, req.Profile)
	if err != nil {
		return CreateResult{}, err
	}
	if req.Options.User == sandbox.UserImage {
		// Root in the sandbox is the operator's to allow (decision 0028).
		return CreateResult{}, apierr.New(apierr.PermissionDenied,
			"user %q runs the session as the image's own user, root included: only a session profile of the server's config (serve --config) may set it; ask for that profile", sandbox.UserImage)
	}
	for _, m := range req.Options.MCPServers {
		if err := c.checkImage(m.Image); err != nil {
			return CreateResult{}, fmt.Errorf("mcp_servers %q: %w", m.Name, err)
		}
	}
	if err := c.checkImage(req.Options.Image); err != nil {
		return CreateResult{}, err
	}
	opts := req.Options.Over(profile)
	// The profile's name: its warm pool serves only its creates (unless
	// shared), and so does a start kept for a busy create's retry.
	name := req.Profile
	if name == "" && c.HasProfile(config.DefaultProfile) {
		name = config.DefaultProfile
	}
	co := sandbox.CreateOptions{IdleTimeout: req.IdleTimeout, Profile: name}
	idemKey := req.IdempotencyKey
	if len(idemKey) > wsproto.MaxIDBytes {
		return CreateResult{}, apierr.New(apierr.InvalidParams, "idempotency_key is longer than %d bytes", wsproto.MaxIDBytes)
	}
	if idemKey != "" && len(idemKey) < wsproto.MinIdempotencyKeyBytes {
		// A retry returns the session's token to whoever repeats the key.
		return CreateResult{}, apierr.New(apierr.InvalidParams,
			"idempotency_key must be at least %d characters of random: a retry with it returns the session's token", wsproto.MinIdempotencyKeyBytes)
	}
	if idemKey == "" {
		ctx, cancel := c.callContext(wait)
		defer cancel()
		r, err := c.create(ctx, api, opts, co)
		if err == nil && wait.Err() != nil {
			// The client left as the create finished: nobody can reach
			// the session without a key to retry with.
			c.abandoned("", r.Session.id)
			return CreateResult{}, wait.Err()
		}
		return r, err
	}
	optsJSON, _ := json.Marshal(struct {
		Profile string
		Options sandbox.SessionOptions
		Idle    time.Duration
	}{req.Profile, opts, req.IdleTimeout})
	key := hex.EncodeToString(p.digest[:8]) + "/" + idemKey
	raw, err := c.creates.do(wait, key, fingerprint(api, optsJSON), func() (json.RawMessage, error) {
		ctx, cancel := context.WithCancel(c.base)
		defer cancel()
		r, err := c.create(ctx, api, opts, co)
		if err != nil {
			return nil, err
		}
		return json.Marshal(struct{ ID, Token string }{r.Session.id, r.Token})
	})
	if errors.Is(err, errReused) {
		return CreateResult{}, apierr.New(apierr.Conflict, "this idempotency_key was already used for a create with other options: a retry repeats the create exactly, a new create needs a new key")
	}
	if err != nil {
		return CreateResult{}, err
	}
	var r struct{ ID, Token string }
	if err := json.Unmarshal(raw, &r); err != nil {
		return CreateResult{}, err
	}
	if wait.Err() != nil {
		// The result came, but its client has gone: a retry may still
		// take it.
		c.creates.unclaim(key)
		c.abandoned(key, r.ID)
		return CreateResult{}, wait.Err()
	}
	c.mu.Lock()
	s := c.sessions[r.ID]
	c.mu.Unlock()
	if s == nil {
		return CreateResult{}, apierr.New(apierr.NotFound, "the session created with this idempotency_key has ended")
	}
	return CreateResult{Session: s, Token: r.Token}, nil
}

// AbandonCreate is for an API layer whose client left between Create's
// return and the answer (idemKey as given to Create): the session is
// closed as if the client had left during the create.
func (c *Core) AbandonCreate(p Principal, s *Session, idemKey string) {
	if idemKey == "" {
		c.abandoned("", s.id)
		return
	}
	key := hex.EncodeToString(p.digest[:8]) + "/" + idemKey
	c.creates.unclaim(key)
	c.abandoned(key, s.id)
}

// abandoned closes a session whose create's client left before it got the
// answer, so that it does not hold a slot until its idle timeout: at once
// when there is no idempotency key (key ""), else after
// AbandonedCreateGrace unless a retry with the key took it meanwhile.
func (c *Core) abandoned(key, id string) {
	closeIt := func() {
		c.mu.Lock()
		s := c.sessions[id]
		c.mu.Unlock()
		if s == nil {
			return
		}
		c.log.Info("closing a session whose create was abandoned: its client left before the answer", "session", id)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := s.Close(ctx); err != nil {
			c.log.Warn("closing a session whose create was abandoned", "session", id, "err", err)
		}
	}
	if key == "" {
		go closeIt()
		return
	}
	time.AfterFunc(c.opts.AbandonedCreateGrace, func() {
		if !c.creates.claimed(key) {
			closeIt()
		}
	})
}

func (c *Core) checkImage(image string) error {
	if image == "" || len(c.opts.AllowedImages) == 0 {
		return nil
	}
	for _, p := range c.opts.AllowedImages {
		if ok, _ := path.Match(p, image); ok {
			return nil
		}
	}
	return apierr.New(apierr.PermissionDenied, "image %q is not allowed on this server (allowed: %v)", image, c.opts.AllowedImages)
}

// Admit says whether a new session could start now, with pending sessions
// that hold no sandbox yet (MCP sessions whose create is to come) counted as
// live: the error is the one a create would get.
func (c *Core) Admit(pending int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.admitLocked(pending)
}

func (c *Core) admitLocked(pending int) error {
	switch {
	case c.draining || c.closed:
		return apierr.New(apierr.Unavailable, "the server is shutting down")
	case c.opts.MaxSessions > 0 && len(c.sessions)+c.creating+pending >= c.opts.MaxSessions:
		return apierr.New(apierr.Busy, "the server runs its maximum of %d sessions; close one or retry later", c.opts.MaxSessions)
	}
	return nil
}

func (c *Core) create(ctx context.Context, api string, opts sandbox.SessionOptions, co sandbox.CreateOptions) (CreateResult, error) {
	c.mu.Lock()
	if err := c.admitLocked(0); err != nil {
		c.mu.Unlock()
		return CreateResult{}, err
	}
	c.creating++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.creating--
		c.mu.Unlock()
	}()

	ctx, cancel := context.WithTimeout(ctx, c.opts.CreateTimeout)
	defer cancel()
	start := time.Now()
	sb, err := c.opts.Backend.Create(ctx, opts, co)
	if err != nil {
		return CreateResult{}, err
	}
	token := auth.NewToken()
	s, err := c.register(sb, auth.DigestOf(token), api)
	if err == nil {
		c.mu.Lock()
		s.profile = co.Profile
		c.mu.Unlock()
	}
	if err != nil {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = sb.Close(closeCtx)
		return CreateResult{}, err
	}
	// An MCP session's sandbox lives only as long as its MCP session, which
	// ends with this daemon: no token on record, so the next daemon removes
	// it (see New) if this one could not (it was killed).
	if c.opts.Tokens != nil && api != APIMCP {
		if err := c.opts.Tokens.Save(s.id, s.token); err != nil {
			c.log.Warn("session token not persisted; the session will not survive a restart", "session", s.id, "err", err)
		}
	}
	c.log.Info("session created", "session", s.id, "api", api, "image", sb.Info().Image, "took", time.Since(start).Round(time.Millisecond))
	return CreateResult{Session: s, Token: token}, nil
}

// register adds a sandbox of the backend and watches for its end.
func (c *Core) register(sb Sandbox, token auth.Digest, api string) (*Session, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, apierr.New(apierr.Unavailable, "the server is shutting down")
	}
	if s, ok := c.sessions[sb.ID()]; ok {
		return s, nil
	}
	s := newSession(c, sb, token, api)
	c.sessions[s.id] = s
	c.byToken[token] = s
	c.watchers.Add(1)
	go func() {
		defer c.watchers.Done()
		<-sb.Done()
		c.forget(s)
	}()
	return s, nil
}

// forget drops a session that left service.
func (c *Core) forget(s *Session) {
	reason := s.sb.EndReason()
	if reason == "" {
		reason = "closed"
	}
	c.mu.Lock()
	delete(c.sessions, s.id)
	delete(c.byToken, s.token)
	keep := c.keeping
	if keep {
		reason = "the server is shutting down; the session is kept and can be attached after it restarts"
	}
	if !keep {
		c.ended.add(s.id, s.token, reason, time.Now())
	}
	c.mu.Unlock()
	close(s.forgotten)
	if c.opts.Tokens != nil && !keep {
		c.opts.Tokens.Delete(s.id)
	}
	s.stream.end(reason)
	s.xfers.abortAll()
	c.log.Info("session ended", "session", s.id, "reason", reason)
	if !keep {
		// A session that failed (its container was killed, its agent died)
		// is removed now, not when the idle reaper finds it: its owner
		// gets "closed" for a later session.close, so nobody else would.
		// For a close in progress this waits for it; Close is idempotent.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		if err := s.sb.Close(ctx); err != nil {
			c.log.Warn("removing an ended session", "session", s.id, "err", err)
		}
		cancel()
	}
}

// List returns the sessions p may see: all for the operator, its own for a
// session token.
func (c *Core) List(p Principal) []*Session {
	if !p.Operator {
		if s := c.lookup(p.SessionID); s != nil {
			return []*Session{s}
		}
		return nil
	}
	for _, sb := range c.opts.Backend.List() {
		c.lookup(sb.ID())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]*Session, 0, len(c.sessions))
	for _, s := range c.sessions {
		out = append(out, s)
	}
	return out
}

// callContext returns the context a call runs under: cancelled when parent
// is, or when the core cancels all calls at the end of a drain.
func (c *Core) callContext(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(c.base, cancel)
	return ctx, func() { stop(); cancel() }
}

// beginCall admits a call, unless the core is draining.
func (c *Core) beginCall() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.draining || c.closed {
		return apierr.New(apierr.Unavailable, "the server is shutting down")
	}
	c.running++
	return nil
}

func (c *Core) endCall() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running--
	if c.running == 0 && c.drained != nil {
		close(c.drained)
		c.drained = nil
	}
}

// Drain stops admitting calls and creates, and waits until the calls in
// flight finish or ctx ends. It returns ctx's error if calls remain.
func (c *Core) Drain(ctx context.Context) error {
	c.mu.Lock()
	c.draining = true
	for _, s := range c.sessions {
		s.xfers.shorten(c.opts.DrainTransferIdle)
	}
	if c.running == 0 {
		c.mu.Unlock()
		return nil
	}
	if c.drained == nil {
		c.drained = make(chan struct{})
	}
	ch := c.drained
	c.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Draining reports whether Drain was called.
func (c *Core) Draining() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.draining
}

// CancelCalls cancels every call, create and transfer still running.
func (c *Core) CancelCalls() { c.cancel() }

// Shutdown ends the core: calls are cancelled, then the manager shuts down
// (closing sessions, or with keepSessions leaving them for the next daemon),
// and the core waits for its session watchers.
func (c *Core) Shutdown(ctx context.Context, keepSessions bool) error {
	c.mu.Lock()
	c.draining = true
	c.keeping = keepSessions
	c.mu.Unlock()
	c.cancel()
	err := c.opts.Backend.Shutdown(ctx, keepSessions)
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	done := make(chan struct{})
	go func() { c.watchers.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		return errors.Join(err, fmt.Errorf("waiting for sessions to end: %w", ctx.Err()))
	}
	return err
}

// Operator is the operator's principal, for sessions the server creates on
// its own account (one per MCP session).
func (c *Core) Operator() Principal { return Principal{Operator: true, digest: c.operator} }

// endedSet remembers the token digests of recently closed sessions, bounded
// in count and age. Guarded by Core.mu.
type endedSet struct {
	ttl     time.Duration
	max     int
	byID    map[string]endedEntry
	byToken map[auth.Digest]string // id by token digest, for the reason a reconnect is refused
	order   []string               // oldest first
}

type endedEntry struct {
	token  auth.Digest
	at     time.Time
	reason string
}

func (e *endedSet) add(id string, token auth.Digest, reason string, now time.Time) {
	if e.byID == nil {
		e.byID, e.byToken = map[string]endedEntry{}, map[auth.Digest]string{}
	}
	e.expire(now)
	if _, ok := e.byID[id]; !ok {
		e.order = append(e.order, id)
	}
	e.byID[id] = endedEntry{token: token, at: now, reason: reason}
	e.byToken[token] = id
	for len(e.order) > e.max {
		e.drop(e.order[0])
		e.order = e.order[1:]
	}
}

// drop forgets id (its place in order is the caller's).
func (e *endedSet) drop(id string) {
	if en, ok := e.byID[id]; ok && e.byToken[en.token] == id {
		delete(e.byToken, en.token)
	}
	delete(e.byID, id)
}

// byTokenDigest returns the session that token d belonged to and why it
// ended, while it is remembered.
func (e *endedSet) byTokenDigest(d auth.Digest, now time.Time) (id, reason string, ok bool) {
	e.expire(now)
	id, ok = e.byToken[d]
	if !ok {
		return "", "", false
	}
	return id, e.byID[id].reason, true
}

func (e *endedSet) get(id string, now time.Time) (auth.Digest, bool) {
	e.expire(now)
	en, ok := e.byID[id]
	return en.token, ok
}

func (e *endedSet) expire(now time.Time) {
	for len(e.order) > 0 {
		en, ok := e.byID[e.order[0]]
		if ok && now.Sub(en.at) < e.ttl {
			return
		}
		e.drop(e.order[0])
		e.order = e.order[1:]
	}
}

// def sets *v to d when it is zero or negative: an option left unset.
func def[T int | int64 | time.Duration](v *T, d T) {
	if *v <= 0 {
		*v = d
	}
}
