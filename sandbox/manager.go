package sandbox

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of ManagerOptions.
const (
	DefaultMaxConcurrentStarts = 4
	DefaultStartTimeout        = 60 * time.Second
	DefaultShutdownGrace       = 2 * time.Second
	DefaultRemoveTimeout       = 30 * time.Second
	DefaultReapInterval        = 5 * time.Second
	DefaultProbeTimeout        = 10 * time.Second
	DefaultHealthTimeout       = 20 * time.Second
	DefaultEngineOutage        = time.Minute
	// DefaultMaxStartWait bounds a create's wait for a start slot; past
	// it the create fails with ErrBusy (decision 0041).
	DefaultMaxStartWait = 2 * time.Minute
	// DefaultSeedAllowance is what each editable path adds to a start's
	// deadline: seeding copies the path out of the image (decision 0041).
	DefaultSeedAllowance = time.Minute
	// DefaultKeepStarted is how long a sandbox whose creator stopped
	// waiting (its deadline passed while it started) is kept, once ready,
	// for a retry of the same create (decision 0041).
	DefaultKeepStarted = 2 * time.Minute
	// handOutPing bounds the liveness check of a pooled sandbox at hand-out.
	handOutPing = 2 * time.Second
)

// ManagerOptions configure a Manager. The zero value is usable.
type ManagerOptions struct {
	// Defaults fill the fields a Create leaves zero (before the built-in
	// defaults): typically the image.
	Defaults SessionOptions
	// Pools keep started sandboxes ready to hand out.
	Pools []PoolOptions
	// Networks are the engine networks, by exact name, that a session may
	// join besides the modes (SessionOptions.Network): the operator's
	// list, each passing CheckNetworkName. Any other name is refused
	// (CheckNetworkAllowed). sandboxd neither makes nor firewalls them:
	// a session on one reaches whatever the network reaches.
	Networks []string
	// MaxConcurrentStarts bounds sandboxes being created at once (by
	// Create and by pool refills together); it protects the engine. A
	// Create waiting for a slot goes before waiting refills.
	MaxConcurrentStarts int
	// StartTimeout bounds one start once it has a slot: create, start,
	// agent answering; each editable path adds SeedAllowance
	// (startDeadline). The wait for the slot is not part of it.
	StartTimeout time.Duration
	// SeedAllowance is what each of SessionOptions.EditablePaths adds to
	// StartTimeout: seeding copies the path out of the image first.
	SeedAllowance time.Duration
	// MaxStartWait bounds how long a Create waits for a start slot; a
	// Create still waiting then fails with a *BusyError saying when to
	// retry. The caller's context bounds the wait too (its deadline is
	// ErrBusy as well). Pool refills wait as long as it takes.
	MaxStartWait time.Duration
	// KeepStarted is how long a sandbox whose Create stopped waiting for
	// it (the caller's deadline passed during the start, which goes on)
	// is kept ready for a retry of the same create before it is removed.
	KeepStarted time.Duration
	// ShutdownGrace is how long Close lets the agent end its tools before
	// the container is removed by force.
	ShutdownGrace time.Duration
	// RemoveTimeout bounds the removal of one session's resources.
	RemoveTimeout time.Duration
	// ReapInterval is how often idle sessions are looked for.
	ReapInterval time.Duration
	// ProbeTimeout bounds reaching an existing agent (adoption, reconnect).
	ProbeTimeout time.Duration
	// HealthTimeout: every ReapInterval each ready session's agent is
	// pinged, and one that does not answer within HealthTimeout fails the
	// session (its calls fail with the reason). A stopped agent (SIGSTOP,
	// a debugger attached from inside) would otherwise hang every call.
	HealthTimeout time.Duration
	// EngineOutage is how long a session whose agent stream broke waits
	// for an engine that does not answer (restarting, its socket gone)
	// before it fails; its calls fail fast meanwhile, and it reconnects
	// through agent-proxy once the engine is back.
	EngineOutage time.Duration
	// Logger receives structured logs (component=sandbox); nil is
	// slog.Default().
	Logger *slog.Logger
	// Skills resolves SessionOptions.Skills to folders to mount; nil: a
	// session that selects skills is refused.
	Skills SkillSource
	// Secrets looks up the value of a secret a sidecar declares
	// (MCPServer.Secrets) by name; nil: a sidecar with secrets is
	// refused. Values are passed to the sidecar's environment only: never
	// labelled, logged or returned.
	Secrets func(name string) (string, bool)
	// Dial wraps agent streams in clients; nil is DialAgent. For tests.
	Dial DialFunc
	// SnapshotRetention is how long a snapshot is kept when its request
	// names no retention: 0 is DefaultSnapshotRetention, negative never
	// (decision 0052).
	SnapshotRetention time.Duration

	// warmUp is the call a pool makes on each sandbox it started before
	// pooling it; nil is defaultWarmUp (tests set their own).
	warmUp *warmCall
}

// PoolOptions ask for sandboxes with Options to be kept started. Create
// hands one out when its resolved options equal these resolved ones and it
// is for the pool's Profile (CreateOptions.Profile), or the pool is Shared.
type PoolOptions struct {
	Options SessionOptions
	// Profile is the name of the profile the pool serves ("": creates
	// that name none).
	Profile string
	// Shared lets the pool hand its sandboxes to a create of any profile
	// (or none) whose resolved options equal the pool's: the operator's
	// explicit choice (`pool: {shared: true}`), since a profile's sessions
	// would otherwise take sandboxes another profile's pool was sized for.
	Shared bool
	// Size is how many the pool keeps at least (its min); a fixed pool of
	// Size when Max is not above it.
	Size int
	// Max, when above Size, lets the pool grow with demand up to Max and
	// shrink back to Size once idle (the policy: pool in pool.go).
	Max int
	// Idle is how long a sandbox above the pool's current target waits
	// ready before it is retired; 0 is DefaultPoolIdle.
	Idle time.Duration
}

func (o *ManagerOptions) setDefaults() error {
	var p problems
	o.MaxConcurrentStarts = cmp.Or(o.MaxConcurrentStarts, DefaultMaxConcurrentStarts)
	o.StartTimeout = cmp.Or(o.StartTimeout, DefaultStartTimeout)
	o.SeedAllowance = cmp.Or(o.SeedAllowance, DefaultSeedAllowance)
	o.MaxStartWait = cmp.Or(o.MaxStartWait, DefaultMaxStartWait)
	o.KeepStarted = cmp.Or(o.KeepStarted, DefaultKeepStarted)
	o.ShutdownGrace = cmp.Or(o.ShutdownGrace, DefaultShutdownGrace)
	o.RemoveTimeout = cmp.Or(o.RemoveTimeout, DefaultRemoveTimeout)
	o.ReapInterval = cmp.Or(o.ReapInterval, DefaultReapInterval)
	o.ProbeTimeout = cmp.Or(o.ProbeTimeout, DefaultProbeTimeout)
	o.HealthTimeout = cmp.Or(o.HealthTimeout, DefaultHealthTimeout)
	o.EngineOutage = cmp.Or(o.EngineOutage, DefaultEngineOutage)
	o.Logger = cmp.Or(o.Logger, slog.Default())
	if o.Dial == nil {
		o.Dial = DialAgent
	}
	o.warmUp = cmp.Or(o.warmUp, defaultWarmUp)
	o.SnapshotRetention = cmp.Or(o.SnapshotRetention, DefaultSnapshotRetention)
	for name, d := range map[string]time.Duration{
		"start_timeout": o.StartTimeout, "shutdown_grace": o.ShutdownGrace, "remove_timeout": o.RemoveTimeout,
		"reap_interval": o.ReapInterval, "probe_timeout": o.ProbeTimeout, "health_timeout": o.HealthTimeout,
		"engine_outage": o.EngineOutage, "seed_allowance": o.SeedAllowance, "max_start_wait": o.MaxStartWait,
		"keep_started": o.KeepStarted,
	} {
		if d < 0 {
			p.add(name, "%v is negative", d)
		}
	}
	if o.MaxConcurrentStarts < 0 {
		p.add("max_concurrent_starts", "%d is negative", o.MaxConcurrentStarts)
	}
	for i, n := range o.Networks {
		if err := CheckNetworkName(n); err != nil {
			p.add(fmt.Sprintf("networks[%d]", i), "%v", err)
		}
	}
	if _, err := o.resolve(SessionOptions{}); err != nil {
		var oe *OptionsError
		if errors.As(err, &oe) {
			for _, pr := range oe.Problems {
				p.add("defaults", "%s", pr)
			}
		}
	}
	for i, po := range o.Pools {
		if po.Size < 0 {
			p.add(fmt.Sprintf("pools[%d].size", i), "%d is negative", po.Size)
		}
		if po.Max != 0 && po.Max < po.Size {
			p.add(fmt.Sprintf("pools[%d].max", i), "%d is below the size (min) %d", po.Max, po.Size)
		}
		if po.Idle < 0 {
			p.add(fmt.Sprintf("pools[%d].idle", i), "%v is negative", po.Idle)
		}
		if _, err := o.resolve(po.Options); err != nil {
			p.add(fmt.Sprintf("pools[%d].options", i), "%v", err)
		}
	}
	return p.err()
}

// resolve resolves a session's options over the defaults and checks its
// network against the operator's list.
func (o *ManagerOptions) resolve(so SessionOptions) (SessionOptions, error) {
	r, err := so.Resolve(o.Defaults)
	if err != nil {
		return SessionOptions{}, err
	}
	if err := r.CheckNetworkAllowed(o.Networks); err != nil {
		return SessionOptions{}, err
	}
	return r, nil
}

// Manager owns the sessions of one runtime.
type Manager struct {
	rt    Runtime
	opts  ManagerOptions
	log   *slog.Logger
	slots *startSlots

	// ctx ends at Shutdown: it stops the reaper, pool refills, watchers
	// and starts in progress.
	ctx    context.Context
	cancel context.CancelFunc
	bg     sync.WaitGroup

	sidecarTools sidecarToolCache // learned MCP servers' tools (sidecars.go)
	claims       *claimer         // claims of handed-out pooled sandboxes (claims.go)
	mu           sync.Mutex
	sessions     map[string]*Session // handed out (or adopted), not yet forgotten
	pools        map[string]*pool    // by pool id (poolID)
	kept         map[string][]*kept  // starts kept for a retry, by pool id (kept.go)
	shutdown     bool
	// startCost is a moving average of a start's time once it had a slot
	// (nanoseconds): what a busy create's retry time is estimated from.
	startCost atomic.Int64
	// snaps are the snapshots in the making (snapshot.go).
	snaps snapshots
}

// NewManager validates opts, reclaims what a previous daemon left in the
// runtime (adopting live sessions, removing the rest), and starts the
// reaper and the warm pools.
func NewManager(ctx context.Context, rt Runtime, opts ManagerOptions) (*Manager, error) {
	if rt == nil {
		return nil, errors.New("sandbox: NewManager needs a Runtime")
	}
	if err := opts.setDefaults(); err != nil {
		return nil, fmt.Errorf("sandbox: manager options: %w", err)
	}
	m := &Manager{
		rt:       rt,
		opts:     opts,
		log:      opts.Logger.With("component", "sandbox"),
		slots:    newStartSlots(opts.MaxConcurrentStarts),
		sessions: map[string]*Session{},
		pools:    map[string]*pool{},
		kept:     map[string][]*kept{},
		claims:   newClaimer(),
	}
	m.startCost.Store(int64(initialStartCost))
	m.ctx, m.cancel = context.WithCancel(context.Background())
	for _, po := range opts.Pools {
		o, _ := po.Options.Resolve(opts.Defaults) // validated above
		id := poolID(po.Profile, po.Shared, o.Key())
		if p, dup := m.pools[id]; dup {
			lo, hi := po.bounds()
			p.min += lo
			p.max += hi
			continue
		}
		m.pools[id] = newPool(m, id, o, po)
	}
	if err := m.reclaim(ctx); err != nil {
		m.cancel()
		return nil, fmt.Errorf("sandbox: reclaiming resources of a previous run: %w", err)
	}
	m.reclaimSnapshots(ctx)
	m.goBackground(m.reaper)
	m.goBackground(m.sweepSnapshots)
	m.goBackground(m.runClaims)
	for _, p := range m.pools {
		m.goBackground(p.run)
	}
	return m, nil
}

// Resolve applies the manager's defaults to o and validates it.
func (m *Manager) Resolve(o SessionOptions) (SessionOptions, error) {
	r, err := m.opts.resolve(o)
	if err != nil {
		return SessionOptions{}, err
	}
	if _, err := m.skillMounts(r); err != nil {
		return SessionOptions{}, err
	}
	return r, nil
}

// CreateOptions are how one Create serves its session beyond the session's
// options: they shape no sandbox, so they take no part in the warm-pool key
// and are not recorded in the sandbox's labels.
type CreateOptions struct {
	// IdleTimeout, when not zero, replaces the resolved options' idle
	// timeout for this daemon's life (NoIdleTimeout: never). It is for an
	// API that owns its sessions' end itself (MCP: the MCP session, or
	// --mcp-idle-timeout of a sandbox opened by handle), whose sessions are
	// never adopted after a restart: a restarted daemon would read the
	// options' own idle timeout back from the labels. Set before the
	// session is listed, so the reaper never sees the options' one.
	IdleTimeout time.Duration
	// Profile names the profile the create is for ("": none): a warm pool
	// hands out only to its own profile's creates unless it is shared
	// (PoolOptions), and a start kept for a retry only to the same
	// profile's.
	Profile string
}

// Create starts a session, or hands out a pooled one started with the same
// resolved options. It returns once the agent answers.
func (m *Manager) Create(ctx context.Context, o SessionOptions) (*Session, error) {
	return m.CreateWith(ctx, o, CreateOptions{})
}

// CreateWith is Create with the options of this create (see CreateOptions):
// a sandbox kept for a retry of this create (same profile and resolved
// options), else one of the profile's warm pool (or of a shared pool of the
// same options), else a cold start. A cold start first waits for a start
// slot (at most MaxStartWait), then runs to its own deadline
// (startDeadline); a create that cannot start soon enough fails with a
// *BusyError, and a start its caller's deadline cut short goes on and is
// kept for the retry (kept.go).
func (m *Manager) CreateWith(ctx context.Context, o SessionOptions, co CreateOptions) (*Session, error) {
	if co.IdleTimeout > 0 && co.IdleTimeout < MinIdleTimeout {
		return nil, fmt.Errorf("%w: idle timeout %v is below the minimum of %v", ErrInvalidOptions, co.IdleTimeout, MinIdleTimeout)
	}
	r, err := m.Resolve(o)
	if err != nil {
		return nil, err
	}
	if err := m.checkOpen(); err != nil {
		return nil, err
	}
	key := r.Key()
	own := poolID(co.Profile, false, key)
	p := m.poolFor(own, key)
	if p == nil && IsSnapshotImage(r.Image) {
		p = m.snapshotPool(key) // a warm pool of the snapshot (snapshot_pool.go)
	}
	// A kept start still under way is waited for only when no pooled
	// sandbox is ready (it then expires unused, as any kept start may).
	if s, ok, err := m.retake(ctx, own, co, p == nil || !p.hasReady()); ok {
		return s, err
	}
	if p != nil {
		p.claimed()
		for s := p.take(); s != nil; s = p.take() {
			// A quarter-millisecond ping guards against handing out a
			// sandbox that died a moment ago, before its watcher noticed.
			pctx, cancel := context.WithTimeout(ctx, handOutPing)
			err := s.Ping(pctx)
			cancel()
			if err != nil {
				s.log.Warn("warm sandbox did not answer; discarding it", "err", err)
				m.closeInBackground(s)
				continue
			}
			if err := m.handOut(s, co); err != nil {
				return nil, err
			}
			return s, nil
		}
		p.log.Debug("pool empty; starting a session cold")
	}
	s, err := m.start(ctx, r, "", co, own)
	if err != nil {
		return nil, err
	}
	s.log.Info("session ready", "image", r.Image, "took", time.Since(s.created).Round(time.Millisecond))
	return s, nil
}

// handOut registers a pooled session as a live one.
func (m *Manager) handOut(s *Session, co CreateOptions) error {
	s.mu.Lock()
	s.pooled = false
	s.mu.Unlock()
	s.setIdleTimeout(co.IdleTimeout)
	s.touch()
	m.mu.Lock()
	if m.shutdown { // Shutdown drained the pools while we held this one
		m.mu.Unlock()
		_ = s.Close(context.Background()) // teardown logs a failed removal
		return ErrManagerClosed
	}
	m.sessions[s.id] = s
	m.mu.Unlock()
	// The claim is off the hand-out path, and waits for hand-outs to pause
	// (claims.go).
	if !m.claims.add(s) {
		m.claim(s) // the worker has stopped (Shutdown): claim it here
	}
	s.log.Info("session handed out from pool")
	return nil
}

// Get returns a live session by id.
func (m *Manager) Get(id string) (*Session, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.sessions[id]; ok {
		return s, nil
	}
	return nil, fmt.Errorf("session %q: %w", id, ErrNotFound)
}

// List returns the live sessions, oldest first.
func (m *Manager) List() []*Session {
	m.mu.Lock()
	out := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		out = append(out, s)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].created.Before(out[j].created) })
	return out
}

// Close closes a session by id (see Session.Close).
func (m *Manager) Close(ctx context.Context, id string) error {
	s, err := m.Get(id)
	if err != nil {
		return err
	}
	return s.Close(ctx)
}

// Shutdown stops the manager: no more Creates, pools drained and removed,
// background work ended. Live sessions are closed, or with keepSessions
// left running (their connections dropped) for the next manager to adopt.
// It waits until all is done or ctx ends.
func (m *Manager) Shutdown(ctx context.Context, keepSessions bool) error {
	m.mu.Lock()
	already := m.shutdown
	m.shutdown = true
	sessions := make([]*Session, 0, len(m.sessions))
	for _, s := range m.sessions {
		sessions = append(sessions, s)
	}
	m.mu.Unlock()
	if already {
		return nil
	}
	m.cancel()
	toClose := m.dropKept()
	for _, p := range m.pools {
		toClose = append(toClose, p.drain()...)
	}
	toClose = append(toClose, m.stopSnapPools("")...)
	kept := 0
	for _, s := range sessions {
		if keepSessions && s.State() != StateStarting {
			s.detach()
			m.forget(s)
			kept++
			continue
		}
		toClose = append(toClose, s)
	}
	errs := make(chan error, len(toClose))
	for _, s := range toClose {
		go func() { errs <- s.Close(ctx) }()
	}
	var all []error
	for range toClose {
		all = append(all, <-errs)
	}
	waited := make(chan struct{})
	go func() { m.bg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		all = append(all, fmt.Errorf("sandbox: shutdown: background work still running: %w", ctx.Err()))
	}
	m.log.Info("manager shut down", "closed", len(toClose), "kept", kept)
	return errors.Join(all...)
}

func (m *Manager) checkOpen() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shutdown {
		return ErrManagerClosed
	}
	return nil
}

// forget drops a session from the live set.
func (m *Manager) forget(s *Session) {
	m.mu.Lock()
	if m.sessions[s.id] == s {
		delete(m.sessions, s.id)
	}
	m.forgetKeptLocked(s)
	m.mu.Unlock()
}

// goBackground runs f as tracked background work with the manager's
// context; after Shutdown it runs nothing and returns false. (Adding to the
// WaitGroup under mu, which Shutdown takes before it waits, keeps Add from
// racing Wait.)
func (m *Manager) goBackground(f func(ctx context.Context)) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shutdown {
		return false
	}
	m.bg.Add(1)
	go func() {
		defer m.bg.Done()
		f(m.ctx)
	}()
	return true
}
