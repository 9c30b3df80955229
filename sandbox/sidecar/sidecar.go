package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/sandboxd/sandboxd/tools"
)

// Timings of MCP sidecars.
const (
	// ReadyTimeout bounds a sidecar's start: container, initialize and the
	// first tools/list.
	ReadyTimeout = 30 * time.Second
	// MaxRestarts bounds the restarts of a sidecar that exited; the
	// backoff before each doubles from restartBackoff.
	MaxRestarts    = 3
	restartBackoff = time.Second
	// httpRetry is how often an HTTP sidecar is tried until it listens.
	httpRetry = 50 * time.Millisecond
	// failureSettle is how long a call that lost its connection waits for
	// the watcher to say why (the server exited, was cut off), so that it
	// returns that reason rather than a bare "connection ended".
	failureSettle = 3 * time.Second
)

// clientInfo names sandboxd to MCP servers.
var clientInfo = &mcp.Implementation{Name: "sandboxd", Version: "1"}

// sidecar is one MCP server of a set.
type sidecar struct {
	set *Set
	srv Server
	log *slog.Logger // bounded (package loglimit): the session's budget of hostile input

	requests *rate.Limiter // the server's requests to sandboxd (guard)
	relists  relister      // re-reads after list_changed

	mu       sync.Mutex
	cs       *mcp.ClientSession // nil while down
	conn     *Conn
	defs     []tools.Definition // exposed, from the last tools/list
	orig     map[string]string  // exposed name → the server's
	starting chan struct{}      // closed when the start in progress ends
	err      error              // why it is down (the last start's or exit's error)
	restarts int                // restarts after exits
	gen      int                // counts starts, so a stale exit is ignored
	down     chan struct{}      // closed when the running client session ends
	flooded  *Conn              // the conn cut off for flooding (guard)
}

func (c *sidecar) originalName(exposed string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.orig[exposed]
}

// list returns the sidecar's tools: the last list once it ran (while it is
// down its calls say why, and a listing never waits for a restart), else
// after starting it (lazy).
func (c *sidecar) list(ctx context.Context) ([]tools.Definition, error) {
	c.mu.Lock()
	if c.defs != nil { // it ran: its list, kept current by list_changed and restarts
		defs := c.defs
		c.mu.Unlock()
		return defs, nil
	}
	c.mu.Unlock()
	if _, err := c.session(ctx); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.defs, nil
}

// session returns the sidecar's client session, starting the sidecar if it
// never ran (lazy) or waiting for a start in progress. A sidecar that
// exited is not started here: its watcher restarts it with backoff, and
// until then this fails at once saying why.
func (c *sidecar) session(ctx context.Context) (*mcp.ClientSession, error) {
	for {
		c.mu.Lock()
		switch {
		case c.cs != nil:
			cs := c.cs
			c.mu.Unlock()
			return cs, nil
		case c.starting != nil:
			wait := c.starting
			c.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("mcp server %q is starting: %w", c.srv.Name, ctx.Err())
			}
		case c.err != nil || c.gen > 0:
			err := c.err
			c.mu.Unlock()
			return nil, err
		}
		c.starting = make(chan struct{})
		c.mu.Unlock()
		err := c.start(ctx)
		c.mu.Lock()
		close(c.starting)
		c.starting = nil
		if err != nil {
			c.err = err
		}
		c.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// start runs the sidecar's container, connects the client (initialize),
// reads its tools, and watches for its end. It runs with c.starting set.
func (c *sidecar) start(ctx context.Context) (err error) {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	stop := context.AfterFunc(c.set.life, cancel)
	defer stop()
	began := time.Now()
	conn, err := c.srv.Start(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil && conn.Close != nil {
			conn.Close()
		}
	}()
	cs, err := c.connect(ctx, conn)
	if err != nil && c.floodedOn(conn) {
		return fmt.Errorf("mcp server %q: %v", c.srv.Name, errFlood)
	}
	if err != nil {
		tail := ""
		if conn.Stderr != nil {
			tail = conn.Stderr()
		}
		if tail == "" {
			tail = "(nothing)"
		}
		return fmt.Errorf("mcp server %q did not answer within %v: %v; its stderr ends with: %s", c.srv.Name, ReadyTimeout, err, tail)
	}
	defs, orig, err := listTools(ctx, c.srv.Name, cs)
	if err != nil {
		_ = cs.Close()
		if c.floodedOn(conn) {
			return fmt.Errorf("mcp server %q: %v", c.srv.Name, errFlood)
		}
		return fmt.Errorf("mcp server %q: tools/list: %w", c.srv.Name, err)
	}
	c.mu.Lock()
	select {
	case <-c.set.done:
		c.mu.Unlock()
		_ = cs.Close()
		return fmt.Errorf("mcp server %q: %w", c.srv.Name, c.set.closed)
	default:
	}
	c.gen++
	gen := c.gen
	// A restart (or reconnect) whose server lists other tools than before
	// is a change the session's clients are told of.
	changed := c.defs != nil && !SameTools(c.defs, defs)
	c.cs, c.conn, c.defs, c.orig, c.err = cs, conn, defs, orig, nil
	c.down = make(chan struct{})
	down := c.down
	c.mu.Unlock()
	c.learned(defs)
	c.log.Info("mcp sidecar ready", "tools", len(defs), "took", time.Since(began).Round(time.Millisecond))
	go c.watch(cs, conn, gen, down)
	if changed {
		c.set.changed()
	}
	return nil
}

// connect makes the client session over the sidecar's transport: its
// attach stream (stdio), or its address on the session's sidecar network,
// retried until the server listens or its container exits.
func (c *sidecar) connect(ctx context.Context, conn *Conn) (*mcp.ClientSession, error) {
	client := mcp.NewClient(clientInfo, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { c.relist() },
	})
	client.AddReceivingMiddleware(c.guard(conn))
	if conn.Stream != nil {
		return client.Connect(ctx, &mcp.IOTransport{Reader: conn.Stream, Writer: conn.Stream, MaxLineLength: MaxMessage}, nil)
	}
	hc := &http.Client{Transport: untilExit{limitedBodies{&http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}}, conn.Exited}}
	for {
		var t mcp.Transport
		if c.srv.Transport == SSE {
			t = &mcp.SSEClientTransport{Endpoint: conn.URL, HTTPClient: hc, MaxEventSize: MaxMessage}
		} else {
			t = &mcp.StreamableClientTransport{Endpoint: conn.URL, HTTPClient: hc, MaxRetries: -1, MaxEventSize: MaxMessage}
		}
		// The SSE transport's event stream lives on the context of
		// Connect: it must outlive the start, and end only with the
		// connection (conn.Close) or the readiness deadline while
		// connecting.
		live, end := context.WithCancel(context.WithoutCancel(ctx))
		stop := context.AfterFunc(ctx, end)
		cs, err := client.Connect(live, t, nil)
		if stop() && err == nil {
			prev := conn.Close
			conn.Close = func() {
				end()
				if prev != nil {
					prev()
				}
			}
			return cs, nil
		}
		end()
		if err == nil {
			_ = cs.Close()
			return nil, ctx.Err()
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-conn.Exited:
			return nil, errExited
		case <-time.After(httpRetry):
		}
	}
}

// errExited says why an HTTP or SSE sidecar is down: Conn.Exited.
var errExited = errors.New("its container exited")

// untilExit is an http.RoundTripper that fails a sidecar's requests at
// once after its container exited, instead of dialling a dead address
// (about 3 s to "no route to host"): closing the client session sends a
// DELETE, which must not hold the restart.
type untilExit struct {
	base   http.RoundTripper
	exited <-chan struct{}
}

func (u untilExit) RoundTrip(req *http.Request) (*http.Response, error) {
	select {
	case <-u.exited:
		if req.Body != nil {
			_ = req.Body.Close() // a RoundTripper closes the body, even on error
		}
		return nil, errExited
	default:
	}
	return u.base.RoundTrip(req)
}

// relist re-reads the tools after notifications/tools/list_changed,
// coalesced (relister): a flood of notifications costs one re-read a
// second at most.
func (c *sidecar) relist() {
	c.mu.Lock()
	live := c.cs != nil
	c.mu.Unlock()
	if live {
		c.relists.request(c.reread)
	}
}

// reread is one re-read of the running client session's tools.
func (c *sidecar) reread() {
	c.mu.Lock()
	cs := c.cs
	c.mu.Unlock()
	if cs == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), ReadyTimeout)
	defer cancel()
	stop := context.AfterFunc(c.set.life, cancel)
	defer stop()
	defs, orig, err := listTools(ctx, c.srv.Name, cs)
	if err != nil {
		c.log.Warn("re-reading tools after list_changed", "err", err)
		return
	}
	c.mu.Lock()
	current := c.cs == cs
	changed := current && !SameTools(c.defs, defs)
	if current {
		c.defs, c.orig = defs, orig
	}
	c.mu.Unlock()
	if !current || !changed {
		return
	}
	c.learned(defs)
	c.log.Info("mcp sidecar tools changed", "tools", len(defs))
	c.set.changed()
}

// watch waits for the client session to end, or for the container of an
// HTTP or SSE sidecar to exit (Conn.Exited). Unless the session closes,
// the sidecar is down: calls fail at once saying so, and it is restarted
// after a backoff, at most MaxRestarts times.
func (c *sidecar) watch(cs *mcp.ClientSession, conn *Conn, gen int, down chan struct{}) {
	exited, werr := c.wait(cs, conn)
	c.mu.Lock()
	if c.gen != gen || c.cs != cs {
		close(down)
		c.mu.Unlock()
		return
	}
	tail := ""
	if conn.Stderr != nil { // conn is c.conn: gen and cs are current
		tail = conn.Stderr()
	}
	flooded := c.flooded == conn
	c.cs, c.conn, c.flooded = nil, nil, nil
	c.restarts++
	n := c.restarts
	why := "its connection ended"
	switch {
	case flooded:
		why = errFlood.Error()
	case exited:
		why = errExited.Error()
	case werr != nil:
		why += " (" + werr.Error() + ")"
	}
	if tail != "" {
		why += "; its stderr ends with: " + tail
	}
	if n > MaxRestarts {
		c.err = fmt.Errorf("mcp server %q is down: %s; it was restarted %d times already, which is the limit: its tools fail until the session is closed", c.srv.Name, why, MaxRestarts)
	} else {
		c.err = fmt.Errorf("mcp server %q is down: %s; sandboxd restarts it (restart %d of %d) and whatever state it held is lost", c.srv.Name, why, n, MaxRestarts)
	}
	c.starting = make(chan struct{}) // callers fail fast (see call), listings wait
	close(down)
	c.mu.Unlock()
	_ = cs.Close() // releases the client session's goroutines
	if conn != nil && conn.Close != nil {
		conn.Close()
	}
	select {
	case <-c.set.done:
		c.endStart(nil)
		return
	default:
	}
	c.log.Warn("mcp sidecar down", "err", c.err)
	if n > MaxRestarts {
		c.endStart(nil)
		return
	}
	delay := restartBackoff << (n - 1)
	select {
	case <-c.set.done:
		c.endStart(nil)
		return
	case <-c.set.life.Done():
		c.endStart(nil)
		return
	case <-time.After(delay):
	}
	err := c.start(context.Background())
	if err != nil {
		c.log.Warn("mcp sidecar restart failed", "err", err)
		c.endStart(fmt.Errorf("mcp server %q is down and its restart failed: %w", c.srv.Name, err))
		return
	}
	c.log.Warn("mcp sidecar restarted; its state was lost", "restart", n)
	c.endStart(nil)
}

// wait waits for the client session to end (its error), or for the
// container to exit (exited). Only a session over HTTP needs the latter:
// one over the container's stdio ends with it, and its errors keep their
// text.
func (c *sidecar) wait(cs *mcp.ClientSession, conn *Conn) (exited bool, werr error) {
	if c.srv.Transport == Stdio || conn.Exited == nil {
		return false, cs.Wait()
	}
	ended := make(chan error, 1)
	go func() { ended <- cs.Wait() }() // returns once watch (or Set.Close) closes cs
	select {
	case werr = <-ended:
		return false, werr
	case <-conn.Exited:
		return true, nil
	}
}

// learned tells Server.Learned the tools just read.
func (c *sidecar) learned(defs []tools.Definition) {
	if c.srv.Learned != nil {
		c.srv.Learned(defs)
	}
}

// endStart ends a restart begun in watch; err, if set, is why the sidecar
// stays down.
func (c *sidecar) endStart(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = err
	}
	if c.starting != nil {
		close(c.starting)
		c.starting = nil
	}
}

// call runs one tool of the sidecar; exposed is the session's name for it.
// A sidecar that is down, or dies during the call, gives at once an
// IsError observation saying so.
func (c *sidecar) call(ctx context.Context, exposed string, args json.RawMessage) (*tools.Observation, error) {
	c.mu.Lock()
	cs, orig, down, downCh := c.cs, c.orig[exposed], c.err, c.down
	neverRan := c.gen == 0
	c.mu.Unlock()
	if neverRan { // lazy, or starting
		var err error
		if cs, err = c.session(ctx); err != nil {
			return tools.Errorf("%v", err), nil
		}
		c.mu.Lock()
		orig, downCh = c.orig[exposed], c.down
		c.mu.Unlock()
	}
	if cs == nil {
		if down == nil {
			down = fmt.Errorf("mcp server %q is restarting", c.srv.Name)
		}
		return tools.Errorf("%v", down), nil
	}
	if orig == "" {
		return nil, fmt.Errorf("%w: %q (mcp server %q has no such tool)", tools.ErrUnknownTool, exposed, c.srv.Name)
	}
	var arguments any = args
	if len(args) == 0 {
		arguments = map[string]any{}
	}
	res, err := c.callTool(ctx, cs, downCh, &mcp.CallToolParams{Name: orig, Arguments: arguments})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return tools.Errorf("mcp server %q did not answer %s within %v, the deadline of a sidecar call", c.srv.Name, exposed, CallTimeout), nil
		}
		var rpc *jsonrpc.Error
		if errors.As(err, &rpc) && !lostRequest(err) {
			return tools.Errorf("mcp server %q: %v", c.srv.Name, err), nil
		}
		// The connection broke: say why once the watcher knows.
		t := time.NewTimer(failureSettle)
		defer t.Stop()
		select {
		case <-downCh:
		case <-t.C:
		}
		c.mu.Lock()
		down := c.err
		if c.cs != nil {
			down = nil
		}
		c.mu.Unlock()
		if down == nil {
			down = fmt.Errorf("mcp server %q: the call failed: %w", c.srv.Name, err)
		}
		return tools.Errorf("%v", down), nil
	}
	return boundResult(c.srv.Name, fromMCPResult(res)), nil
}

// lostRequest reports whether a call's error is an HTTP request's that got
// no answer, its connection broken as a dying server's is: the SDK
// wraps it in a JSON-RPC error ("rejected by transport"), which is not the
// server's answer.
func lostRequest(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue)
}

// errDown is callTool's error for a call whose sidecar went down: call
// returns why instead.
var errDown = errors.New("the mcp server went down")

// callTool is cs.CallTool within CallTimeout, returning at most
// cancelGrace after ctx ends whatever the transport does: a POST
// to an HTTP server that never answers held a cancelled call 16.7 s (M14).
// It returns errDown at once when the sidecar goes down (down closes): a
// POST in flight to a dead HTTP server would wait for its deadline. The
// abandoned call ends with the client session at the latest.
func (c *sidecar) callTool(ctx context.Context, cs *mcp.ClientSession, down <-chan struct{}, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	cctx, cancel := context.WithTimeout(ctx, CallTimeout)
	defer cancel()
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(cctx, params)
		done <- answer{res, err}
	}()
	select {
	case a := <-done:
		return a.res, a.err
	case <-down:
		select {
		case a := <-done: // answered as it went down
			return a.res, a.err
		default:
			return nil, errDown
		}
	case <-cctx.Done():
	}
	t := time.NewTimer(cancelGrace)
	defer t.Stop()
	select {
	case a := <-done:
		return a.res, a.err
	case <-t.C:
		return nil, cctx.Err()
	}
}
