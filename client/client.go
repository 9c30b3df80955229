// Package client is the Go client of sandboxd's WebSocket API, for agent
// frameworks and evaluation harnesses: Dial a server, create (or attach to)
// sessions, call their tools with a callback for streamed output, move files
// in and out, and close them.
//
// With Options.Reconnect, a lost connection is re-dialled with backoff; the
// sessions are re-attached from the last output chunk seen, and requests
// still waiting are sent again with the same ids, which the server treats as
// retries (a call does not run twice). Without it, a lost connection fails
// the waiting requests with ErrConnectionLost.
package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandboxd/sandboxd/wsproto"
)

// ErrConnectionLost: the connection to the server ended (and Reconnect is
// off, or reconnecting gave up).
var ErrConnectionLost = errors.New("connection to sandboxd lost")

// ErrClosed: the client was closed.
var ErrClosed = errors.New("client is closed")

// Error is an error response of the server; errors.As it to read the code.
type Error = wsproto.Error

// Options configure a Client.
type Options struct {
	// Reconnect re-dials a lost connection and resumes (see the package
	// doc). ReconnectTimeout bounds the attempts (default one minute).
	Reconnect        bool
	ReconnectTimeout time.Duration
	// Dialer and Header customise the handshake (TLS settings, a proxy).
	Dialer *websocket.Dialer
	Header http.Header
	// Logger receives reconnect notices; nil discards.
	Logger *slog.Logger
	// MaxMessageBytes bounds an incoming message (default 64 MiB).
	MaxMessageBytes int64
	// ChunkSize is the size of the pieces Upload and Download move in one
	// message (default ChunkSize).
	ChunkSize int
}

// Client is a connection to a sandboxd server. It is safe for concurrent use.
type Client struct {
	url, token string
	opts       Options
	idPrefix   string
	nextID     atomic.Uint64

	mu       sync.Mutex
	ws       *websocket.Conn
	pending  map[string]*pending
	sessions map[string]*Session
	ptys     map[string]*PTY // by pty_id (pty.go)
	closed   bool
	closing  chan struct{} // closed by Close: stops reconnecting
	err      error         // why the client stopped (nil while it works)
	done     chan struct{} // closed when the client stops for good
	writeMu  sync.Mutex    // gorilla allows one writer
	wg       sync.WaitGroup
}

type pending struct {
	msg []byte // the request as sent, for a retry after a reconnect
	ch  chan wsproto.Message
	// hook, if set, sees the response on the read loop before the caller
	// does: before any later message is read (pty.open registers its PTY
	// so that no output finds it missing).
	hook func(wsproto.Message)
}

// Dial connects to url (ws://host:port/v1/ws) with a bearer token (the
// operator token, or a session token).
func Dial(ctx context.Context, url, token string, opts Options) (*Client, error) {
	if opts.Dialer == nil {
		opts.Dialer = &websocket.Dialer{HandshakeTimeout: 10 * time.Second, Proxy: http.ProxyFromEnvironment}
	}
	if opts.ReconnectTimeout <= 0 {
		opts.ReconnectTimeout = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = 64 << 20
	}
	if opts.ChunkSize <= 0 {
		opts.ChunkSize = ChunkSize
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	c := &Client{
		url: url, token: token, opts: opts,
		// Ids are idempotency keys within a session on the server: they
		// must not repeat across connections, so a random prefix.
		idPrefix: hex.EncodeToString(b),
		pending:  map[string]*pending{},
		sessions: map[string]*Session{},
		done:     make(chan struct{}),
		closing:  make(chan struct{}),
	}
	ws, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	c.ws = ws
	c.wg.Add(1)
	go c.readLoop(ws)
	return c, nil
}

func (c *Client) dial(ctx context.Context) (*websocket.Conn, error) {
	h := c.opts.Header.Clone()
	if h == nil {
		h = http.Header{}
	}
	h.Set("Authorization", "Bearer "+c.token)
	h.Set("Sec-WebSocket-Protocol", wsproto.Subprotocol)
	ws, resp, err := c.opts.Dialer.DialContext(ctx, c.url, h)
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("connecting to %s: HTTP %d%s: %w", c.url, resp.StatusCode, statusHint(resp.StatusCode), err)
		}
		var hint string
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			hint = " (is `sandboxd serve` running there?)"
		case errors.Is(err, websocket.ErrBadHandshake), !strings.HasPrefix(c.url, "ws://") && !strings.HasPrefix(c.url, "wss://"):
			hint = " (the server URL looks like ws://HOST:PORT" + wsproto.Path + ")"
		}
		return nil, fmt.Errorf("connecting to %s: %w%s", c.url, err, hint)
	}
	ws.SetReadLimit(c.opts.MaxMessageBytes)
	return ws, nil
}

// statusHint says what a refused handshake's status means for the caller.
func statusHint(code int) string {
	switch code {
	case http.StatusUnauthorized:
		return " (the token was refused: check SANDBOXD_TOKEN or --token-file, or SANDBOXD_SESSION_TOKEN for a session)"
	case http.StatusForbidden:
		return " (the request's Origin or Host is not allowed: see serve --allow-origin and --allow-host)"
	case http.StatusNotFound:
		return " (no WebSocket API at this path: the server URL looks like ws://HOST:PORT" + wsproto.Path + ")"
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		return " (the server is busy or shutting down: retry later)"
	}
	return ""
}

// Close closes the connection. Sessions stay open on the server (close them
// first if they should end).
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	close(c.closing)
	ws := c.ws
	c.mu.Unlock()
	c.writeMu.Lock()
	_ = ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, ""), time.Now().Add(time.Second))
	c.writeMu.Unlock()
	_ = ws.Close()
	c.wg.Wait()
	return nil
}

// Done is closed when the client stops for good (Close, or a lost connection
// that was not, or could not be, re-established); Err says why.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is why the client stopped; nil while it works.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) readLoop(ws *websocket.Conn) {
	defer c.wg.Done()
	for {
		var m wsproto.Message
		_, b, err := ws.ReadMessage()
		if err == nil {
			err = json.Unmarshal(b, &m)
		}
		if err != nil {
			c.lost(ws, err)
			return
		}
		if m.Method != "" {
			c.notify(m)
			continue
		}
		c.mu.Lock()
		p := c.pending[string(m.ID)]
		delete(c.pending, string(m.ID))
		c.mu.Unlock()
		if p != nil {
			if p.hook != nil {
				p.hook(m)
			}
			p.ch <- m
		}
	}
}

// lost handles the end of connection ws: reconnect, or fail everything.
func (c *Client) lost(ws *websocket.Conn, cause error) {
	_ = ws.Close()
	c.mu.Lock()
	if c.ws != ws { // an old connection
		c.mu.Unlock()
		return
	}
	reconnect := c.opts.Reconnect && !c.closed
	c.mu.Unlock()
	// The server closed the PTYs of that connection: they do not resume.
	c.endPTYs(fmt.Sprintf("%v: %v", ErrConnectionLost, cause))
	if reconnect {
		c.opts.Logger.Warn("sandboxd connection lost; reconnecting", "err", cause)
		nws, err := c.reconnect()
		if err == nil {
			c.wg.Add(1)
			go c.readLoop(nws)
			c.resume(nws)
			return
		}
		cause = err
	}
	c.fail(fmt.Errorf("%w: %v", ErrConnectionLost, cause))
}

func (c *Client) fail(err error) {
	c.mu.Lock()
	if c.closed && c.err == nil {
		err = ErrClosed
	}
	if c.err == nil {
		c.err = err
		close(c.done)
	}
	c.closed = true
	pend := c.pending
	c.pending = map[string]*pending{}
	sessions := c.sessions
	c.mu.Unlock()
	for id, p := range pend {
		p.ch <- wsproto.Message{ID: json.RawMessage(id), Error: &wsproto.Error{Code: -1, Message: err.Error()}}
	}
	for _, s := range sessions {
		s.end("client stopped: " + err.Error())
	}
	c.endPTYs("client stopped: " + err.Error())
}

func (c *Client) reconnect() (*websocket.Conn, error) {
	deadline := time.Now().Add(c.opts.ReconnectTimeout)
	wait := 100 * time.Millisecond
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		go func() { // Close aborts a dial in progress
			select {
			case <-c.closing:
				cancel()
			case <-ctx.Done():
			}
		}()
		ws, err := c.dial(ctx)
		cancel()
		if err == nil {
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				ws.Close()
				return nil, ErrClosed
			}
			c.ws = ws
			c.mu.Unlock()
			return ws, nil
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("reconnecting for %v: %w", c.opts.ReconnectTimeout, err)
		}
		select {
		case <-time.After(wait):
		case <-c.closing:
			return nil, ErrClosed
		}
		wait = min(wait*2, 5*time.Second)
	}
}

// resume re-attaches every session from its last seen chunk, then resends
// the requests still waiting (the server dedups them by id).
func (c *Client) resume(ws *websocket.Conn) {
	c.mu.Lock()
	sessions := make([]*Session, 0, len(c.sessions))
	for _, s := range c.sessions {
		sessions = append(sessions, s)
	}
	c.mu.Unlock()
	for _, s := range sessions {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := s.attach(ctx)
		cancel()
		if err != nil {
			c.opts.Logger.Warn("re-attaching session failed", "session", s.ID, "err", err)
		}
	}
	c.mu.Lock()
	msgs := make([][]byte, 0, len(c.pending))
	for _, p := range c.pending {
		msgs = append(msgs, p.msg)
	}
	c.mu.Unlock()
	for _, m := range msgs {
		if err := c.write(ws, m); err != nil {
			return // the read loop notices and reconnects again
		}
	}
	c.opts.Logger.Info("sandboxd connection resumed", "sessions", len(sessions), "retried", len(msgs))
}

func (c *Client) write(ws *websocket.Conn, msg []byte) error {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = ws.SetWriteDeadline(time.Now().Add(30 * time.Second))
	return ws.WriteMessage(websocket.TextMessage, msg)
}

// call sends a request and waits for its response, decoding the result into
// out (may be nil).
func (c *Client) call(ctx context.Context, method string, params, out any) error {
	_, err := c.callID(ctx, c.newID(), method, params, out)
	return err
}

// newIdempotencyKey returns a fresh random create key (a secret).
func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (c *Client) newID() string {
	return c.idPrefix + "-" + strconv.FormatUint(c.nextID.Add(1), 10)
}

func (c *Client) callID(ctx context.Context, id, method string, params, out any) (json.RawMessage, error) {
	return c.callHook(ctx, id, method, params, out, nil)
}

// callHook is callID with a hook that sees the response on the read loop.
func (c *Client) callHook(ctx context.Context, id, method string, params, out any, hook func(wsproto.Message)) (json.RawMessage, error) {
	p, rawID, err := c.send(id, method, params, hook)
	if err != nil {
		return nil, err
	}
	select {
	case m := <-p.ch:
		return decodeResponse(method, m, out)
	case <-ctx.Done():
		c.forget(rawID)
		return nil, ctx.Err()
	}
}

// send sends a request; its response arrives on the returned pending's ch
// (hook, if set, sees it first on the read loop).
func (c *Client) send(id, method string, params any, hook func(wsproto.Message)) (*pending, json.RawMessage, error) {
	rawID, _ := json.Marshal(id)
	msg, err := json.Marshal(&wsproto.Request{JSONRPC: wsproto.Version, ID: rawID, Method: method, Params: mustJSON(params)})
	if err != nil {
		return nil, nil, err
	}
	p := &pending{msg: msg, ch: make(chan wsproto.Message, 1), hook: hook}
	c.mu.Lock()
	if c.closed {
		err := c.err
		c.mu.Unlock()
		return nil, nil, errOr(err, ErrClosed)
	}
	c.pending[string(rawID)] = p
	ws := c.ws
	c.mu.Unlock()
	if err := c.write(ws, msg); err != nil && !c.opts.Reconnect {
		c.forget(rawID)
		return nil, nil, fmt.Errorf("%w: %v", ErrConnectionLost, err)
	} // with Reconnect, the resend after reconnecting delivers it
	return p, rawID, nil
}

// decodeResponse turns a response into its result (decoded into out, if
// not nil) or its error.
func decodeResponse(method string, m wsproto.Message, out any) (json.RawMessage, error) {
	if m.Error != nil {
		if m.Error.Code == -1 {
			return nil, errors.New(m.Error.Message)
		}
		return nil, m.Error
	}
	if out != nil {
		if err := json.Unmarshal(m.Result, out); err != nil {
			return nil, fmt.Errorf("%s: decoding the result: %w", method, err)
		}
	}
	return m.Result, nil
}

func (c *Client) forget(id json.RawMessage) {
	c.mu.Lock()
	delete(c.pending, string(id))
	c.mu.Unlock()
}

func mustJSON(v any) json.RawMessage {
	if v == nil {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // params are our own structs
	}
	return b
}

func errOr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// notify routes a notification to its session or PTY.
func (c *Client) notify(m wsproto.Message) {
	switch m.Method {
	case wsproto.NotifyPTYOutput, wsproto.NotifyPTYExit:
		c.ptyNotify(m)
	case wsproto.NotifyStreamOutput:
		var o wsproto.StreamOutput
		if json.Unmarshal(m.Params, &o) != nil {
			return
		}
		if s := c.session(o.SessionID); s != nil {
			s.output(o)
		}
	case wsproto.NotifyStreamGap:
		var g wsproto.StreamGap
		if json.Unmarshal(m.Params, &g) != nil {
			return
		}
		if s := c.session(g.SessionID); s != nil {
			s.gapNotice(g)
		}
	case wsproto.NotifySessionClosed:
		var p wsproto.SessionClosed
		if json.Unmarshal(m.Params, &p) != nil {
			return
		}
		if s := c.session(p.SessionID); s != nil {
			s.end(p.Reason)
			c.mu.Lock()
			delete(c.sessions, p.SessionID)
			c.mu.Unlock()
		}
	}
}

func (c *Client) session(id string) *Session {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sessions[id]
}

// CreateOptions are the options of a new session (see wsproto.CreateParams).
type CreateOptions = wsproto.CreateParams

// CreateSession starts a session. Unless opts has one, an idempotency key is
// added, so that a create retried after a reconnect does not start a second
// sandbox. It is 128 random bits, not derived from request ids (which every
// client attached to a session sees as call_id): a retry with the key
// returns the session's token.
//
// Cancelling ctx gives the create up: CreateSession returns ctx.Err() at
// once, and the session the server still makes is closed as soon as its
// answer arrives (waiting at most AbandonedCreateWait), so it does not
// hold one of the server's slots until its idle timeout.
func (c *Client) CreateSession(ctx context.Context, opts CreateOptions) (*Session, error) {
	if opts.IdempotencyKey == "" {
		opts.IdempotencyKey = newIdempotencyKey()
	}
	p, rawID, err := c.send(c.newID(), wsproto.MethodSessionCreate, opts, nil)
	if err != nil {
		return nil, err
	}
	var r wsproto.CreateResult
	select {
	case m := <-p.ch:
		if _, err := decodeResponse(wsproto.MethodSessionCreate, m, &r); err != nil {
			return nil, err
		}
	case <-ctx.Done():
		go c.closeAbandoned(p, rawID)
		return nil, ctx.Err()
	}
	s := newSession(c, r.SessionID, r.SessionToken)
	s.Tools, s.lastSeq = r.Tools, r.NextSeq-1
	c.register(s)
	return s, nil
}

// AbandonedCreateWait bounds how long a client waits, after CreateSession's
// ctx ended, for the answer of the create it gave up, to close the session
// (the server bounds a create at 3 minutes).
const AbandonedCreateWait = 4 * time.Minute

// closeAbandoned waits for the answer of a create whose caller gave up and
// closes the session it made.
func (c *Client) closeAbandoned(p *pending, rawID json.RawMessage) {
	t := time.NewTimer(AbandonedCreateWait)
	defer t.Stop()
	var r wsproto.CreateResult
	select {
	case m := <-p.ch:
		if _, err := decodeResponse(wsproto.MethodSessionCreate, m, &r); err != nil {
			return // no session was made (or the client stopped)
		}
	case <-t.C:
		c.forget(rawID)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.call(ctx, wsproto.MethodSessionClose, wsproto.SessionRef{SessionID: r.SessionID, SessionToken: r.SessionToken}, nil)
	if err != nil {
		c.opts.Logger.Warn("closing the session of an abandoned create", "session", r.SessionID, "err", err)
	}
}

// Attach attaches to an existing session with its token. Output after
// lastSeq that the server still holds is replayed: use AttachOutput to
// receive it (it arrives before Attach could return a Session to set
// OnOutput on).
func (c *Client) Attach(ctx context.Context, id, token string, lastSeq uint64) (*Session, error) {
	return c.AttachOutput(ctx, id, token, lastSeq, nil)
}

// AttachOutput is Attach with the session's OnOutput set from the start,
// so the replayed output after lastSeq reaches onOutput too.
func (c *Client) AttachOutput(ctx context.Context, id, token string, lastSeq uint64, onOutput func(wsproto.StreamOutput)) (*Session, error) {
	s := newSession(c, id, token)
	s.lastSeq = lastSeq
	s.OnOutput = onOutput
	c.register(s) // before the call: replayed output follows the response
	r, err := s.attach(ctx)
	if err != nil {
		c.mu.Lock()
		delete(c.sessions, id)
		c.mu.Unlock()
		return nil, err
	}
	s.Tools = r.Tools
	return s, nil
}

func (c *Client) register(s *Session) {
	c.mu.Lock()
	c.sessions[s.ID] = s
	c.mu.Unlock()
}

// ListSessions lists the sessions the token may see.
func (c *Client) ListSessions(ctx context.Context) ([]wsproto.SessionInfo, error) {
	var r wsproto.ListResult
	err := c.call(ctx, wsproto.MethodSessionList, nil, &r)
	return r.Sessions, err
}
