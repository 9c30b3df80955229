package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/time/rate"

	"github.com/sandboxd/sandboxd/tools"
)

// Timings of MCP sidecars.
const (
	// SidecarReadyTimeout bounds a sidecar's start: container, initialize
	// and the first tools/list.
	SidecarReadyTimeout = 30 * time.Second
	// MaxSidecarRestarts bounds the restarts of a sidecar that exited; the
	// backoff before each doubles from sidecarBackoff.
	MaxSidecarRestarts = 3
	sidecarBackoff     = time.Second
	// sidecarHTTPRetry is how often an HTTP sidecar is tried until it
	// listens.
	sidecarHTTPRetry = 50 * time.Millisecond
)

// sidecarClient names sandboxd to MCP servers.
var sidecarClient = &mcp.Implementation{Name: "sandboxd", Version: "1"}

// sidecars are a session's MCP servers, one daemon-owned MCP client
// session each, shared by every caller of the session.
type sidecars struct {
	s   *Session
	rt  SidecarRuntime
	all []*sidecar // in declaration order
	by  map[string]*sidecar

	closeOnce sync.Once
	closed    chan struct{}

	watchMu   sync.Mutex
	watchNext int
	watchers  map[int]func() // WatchTools's
}

// sidecar is one MCP server of a session.
type sidecar struct {
	set *sidecars
	srv MCPServer
	log *slog.Logger // bounded (package loglimit): the session's budget of hostile input

	requests *rate.Limiter // the server's requests to sandboxd (guard)
	relists  relister      // re-reads after list_changed

	mu       sync.Mutex
	cs       *mcp.ClientSession // nil while down
	conn     *SidecarConn
	defs     []tools.Definition // exposed, from the last tools/list
	orig     map[string]string  // exposed name → the server's
	starting chan struct{}      // closed when the start in progress ends
	err      error              // why it is down (the last start's or exit's error)
	restarts int                // restarts after exits
	gen      int                // counts starts, so a stale exit is ignored
	down     chan struct{}      // closed when the running client session ends
	flooded  *mcp.ClientSession // the client session cut off for flooding (guard)
}

func newSidecars(s *Session, rt SidecarRuntime) *sidecars {
	set := &sidecars{s: s, rt: rt, by: map[string]*sidecar{}, closed: make(chan struct{})}
	for _, srv := range s.opts.MCPServers {
		c := &sidecar{set: set, srv: srv, log: s.agentLog.With("sidecar", srv.Name), requests: newRequestLimiter()}
		set.all = append(set.all, c)
		set.by[srv.Name] = c
	}
	return set
}

// startEager starts the eager sidecars at once and returns the first error.
func (set *sidecars) startEager(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		errs = make([]error, len(set.all))
	)
	for i, c := range set.all {
		if c.srv.Start != StartEager {
			continue
		}
		wg.Go(func() { _, errs[i] = c.session(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// watch calls fn whenever a sidecar's tools change; stop ends it.
func (set *sidecars) watch(fn func()) (stop func()) {
	set.watchMu.Lock()
	defer set.watchMu.Unlock()
	if set.watchers == nil {
		set.watchers = map[int]func(){}
	}
	id := set.watchNext
	set.watchNext++
	set.watchers[id] = fn
	return func() {
		set.watchMu.Lock()
		defer set.watchMu.Unlock()
		delete(set.watchers, id)
	}
}

// changed tells the watchers that a sidecar's tools changed.
func (set *sidecars) changed() {
	set.watchMu.Lock()
	fns := make([]func(), 0, len(set.watchers))
	for _, fn := range set.watchers {
		fns = append(fns, fn)
	}
	set.watchMu.Unlock()
	for _, fn := range fns {
		fn()
	}
}

// sameTools reports whether two lists of definitions are the same.
func sameTools(a, b []tools.Definition) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// needWorkspace reports whether a sidecar mounts the session's workspace.
func (set *sidecars) needWorkspace() bool {
	for _, c := range set.all {
		if c.srv.Workspace != "" {
			return true
		}
	}
	return false
}

// close ends every client session; the containers go with the session's
// Remove.
func (set *sidecars) close() {
	set.closeOnce.Do(func() {
		close(set.closed)
		for _, c := range set.all {
			c.mu.Lock()
			cs, conn := c.cs, c.conn
			c.cs, c.conn = nil, nil
			c.err = fmt.Errorf("mcp server %q: %w", c.srv.Name, ErrClosed)
			c.mu.Unlock()
			if cs != nil {
				_ = cs.Close()
			}
			if conn != nil && conn.Close != nil {
				conn.Close()
			}
		}
	})
}

// route returns the sidecar a tool name belongs to by its prefix.
func (set *sidecars) route(name string) (*sidecar, bool) {
	srv, _, ok := strings.Cut(name, SidecarToolSep)
	if !ok {
		return nil, false
	}
	c, ok := set.by[srv]
	return c, ok
}

// tools lists the sidecars' tools (starting lazy ones), checked against
// the sandbox's own tools: a clash names both owners.
func (set *sidecars) tools(ctx context.Context, own []tools.Definition) ([]tools.Definition, error) {
	owner := make(map[string]string, len(own))
	for _, d := range own {
		owner[d.Name] = "the sandbox's tool " + d.Name
	}
	out := own
	for _, c := range set.all {
		defs, err := c.list(ctx)
		if err != nil {
			return nil, err
		}
		for _, d := range defs {
			o := fmt.Sprintf("mcp server %q's tool %q", c.srv.Name, c.originalName(d.Name))
			if prev, ok := owner[d.Name]; ok {
				return nil, fmt.Errorf("tool name %q is taken twice: by %s and by %s", d.Name, prev, o)
			}
			owner[d.Name] = o
			out = append(out, d)
		}
	}
	return out, nil
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
	ctx, cancel := context.WithTimeout(ctx, SidecarReadyTimeout)
	defer cancel()
	stop := context.AfterFunc(c.set.s.m.ctx, cancel)
	defer stop()
	began := time.Now()
	s := c.set.s
	env, err := sidecarEnv(c.srv, s.m.opts.Secrets)
	if err != nil {
		return err
	}
	conn, err := c.set.rt.StartSidecar(ctx, SidecarSpec{
		SessionID: s.id,
		Server:    c.srv,
		Labels:    SessionLabels(s.id, s.opts, "", s.created),
		Env:       env,
	})
	if err != nil {
		return fmt.Errorf("mcp server %q: starting its container: %w", c.srv.Name, err)
	}
	defer func() {
		if err != nil && conn.Close != nil {
			conn.Close()
		}
	}()
	cs, err := c.connect(ctx, conn)
	if err != nil {
		tail := ""
		if conn.Stderr != nil {
			tail = conn.Stderr()
		}
		if tail == "" {
			tail = "(nothing)"
		}
		return fmt.Errorf("mcp server %q did not answer within %v: %v; its stderr ends with: %s", c.srv.Name, SidecarReadyTimeout, err, tail)
	}
	defs, orig, err := listSidecarTools(ctx, c.srv.Name, cs)
	if err != nil {
		_ = cs.Close()
		return fmt.Errorf("mcp server %q: tools/list: %w", c.srv.Name, err)
	}
	c.mu.Lock()
	select {
	case <-c.set.closed:
		c.mu.Unlock()
		_ = cs.Close()
		return fmt.Errorf("mcp server %q: %w", c.srv.Name, ErrClosed)
	default:
	}
	c.gen++
	gen := c.gen
	// A restart (or reconnect) whose server lists other tools than before
	// is a change the session's clients are told of.
	changed := c.defs != nil && !sameTools(c.defs, defs)
	c.cs, c.conn, c.defs, c.orig, c.err = cs, conn, defs, orig, nil
	c.down = make(chan struct{})
	down := c.down
	c.mu.Unlock()
	s.m.learnedTools(c.srv, defs)
	c.log.Info("mcp sidecar ready", "tools", len(defs), "took", time.Since(began).Round(time.Millisecond))
	go c.watch(cs, gen, down)
	if changed {
		c.set.changed()
	}
	return nil
}

// connect makes the client session over the sidecar's transport: its
// attach stream (stdio), or its address on the session's sidecar network,
// retried until the server listens.
func (c *sidecar) connect(ctx context.Context, conn *SidecarConn) (*mcp.ClientSession, error) {
	client := mcp.NewClient(sidecarClient, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { c.relist() },
	})
	client.AddReceivingMiddleware(c.guard)
	if c.srv.Transport == TransportStdio {
		return client.Connect(ctx, &mcp.IOTransport{Reader: conn.Stream, Writer: conn.Stream, MaxLineLength: SidecarMaxMessage}, nil)
	}
	hc := &http.Client{Transport: limitedBodies{&http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 64}}}
	for {
		var t mcp.Transport
		if c.srv.Transport == TransportSSE {
			t = &mcp.SSEClientTransport{Endpoint: conn.URL, HTTPClient: hc, MaxEventSize: SidecarMaxMessage}
		} else {
			t = &mcp.StreamableClientTransport{Endpoint: conn.URL, HTTPClient: hc, MaxRetries: -1, MaxEventSize: SidecarMaxMessage}
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
		case <-time.After(sidecarHTTPRetry):
		}
	}
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
	ctx, cancel := context.WithTimeout(context.Background(), SidecarReadyTimeout)
	defer cancel()
	stop := context.AfterFunc(c.set.s.m.ctx, cancel)
	defer stop()
	defs, orig, err := listSidecarTools(ctx, c.srv.Name, cs)
	if err != nil {
		c.log.Warn("re-reading tools after list_changed", "err", err)
		return
	}
	c.mu.Lock()
	current := c.cs == cs
	changed := current && !sameTools(c.defs, defs)
	if current {
		c.defs, c.orig = defs, orig
	}
	c.mu.Unlock()
	if !current || !changed {
		return
	}
	c.set.s.m.learnedTools(c.srv, defs)
	c.log.Info("mcp sidecar tools changed", "tools", len(defs))
	c.set.changed()
}

// watch waits for the client session to end. Unless the session closes,
// the sidecar is down: calls fail at once saying so, and it is restarted
// after a backoff, at most MaxSidecarRestarts times.
func (c *sidecar) watch(cs *mcp.ClientSession, gen int, down chan struct{}) {
	werr := cs.Wait()
	c.mu.Lock()
	if c.gen != gen || c.cs != cs {
		close(down)
		c.mu.Unlock()
		return
	}
	tail := ""
	if c.conn != nil && c.conn.Stderr != nil {
		tail = c.conn.Stderr()
	}
	conn := c.conn
	flooded := c.flooded == cs
	c.cs, c.conn, c.flooded = nil, nil, nil
	c.restarts++
	n := c.restarts
	why := "its connection ended"
	switch {
	case flooded:
		why = errSidecarFlood.Error()
	case werr != nil:
		why += " (" + werr.Error() + ")"
	}
	if tail != "" {
		why += "; its stderr ends with: " + tail
	}
	if n > MaxSidecarRestarts {
		c.err = fmt.Errorf("mcp server %q is down: %s; it was restarted %d times already, which is the limit: its tools fail until the session is closed", c.srv.Name, why, MaxSidecarRestarts)
	} else {
		c.err = fmt.Errorf("mcp server %q is down: %s; sandboxd restarts it (restart %d of %d) and whatever state it held is lost", c.srv.Name, why, n, MaxSidecarRestarts)
	}
	c.starting = make(chan struct{}) // callers fail fast (see call), listings wait
	close(down)
	c.mu.Unlock()
	_ = cs.Close() // releases the client session's goroutines
	if conn != nil && conn.Close != nil {
		conn.Close()
	}
	select {
	case <-c.set.closed:
		c.endStart(nil)
		return
	default:
	}
	c.log.Warn("mcp sidecar down", "err", c.err)
	if n > MaxSidecarRestarts {
		c.endStart(nil)
		return
	}
	delay := sidecarBackoff << (n - 1)
	select {
	case <-c.set.closed:
		c.endStart(nil)
		return
	case <-c.set.s.m.ctx.Done():
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
	res, err := c.callTool(ctx, cs, &mcp.CallToolParams{Name: orig, Arguments: arguments})
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return tools.Errorf("mcp server %q did not answer %s within %v, the deadline of a sidecar call", c.srv.Name, exposed, SidecarCallTimeout), nil
		}
		var rpc *jsonrpc.Error
		if errors.As(err, &rpc) {
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

// callTool is cs.CallTool within SidecarCallTimeout, returning at most
// sidecarCancelGrace after ctx ends whatever the transport does: a POST
// to an HTTP server that never answers held a cancelled call 16.7 s (M14).
// The abandoned call ends with the client session at the latest.
func (c *sidecar) callTool(ctx context.Context, cs *mcp.ClientSession, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	cctx, cancel := context.WithTimeout(ctx, SidecarCallTimeout)
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
	case <-cctx.Done():
	}
	t := time.NewTimer(sidecarCancelGrace)
	defer t.Stop()
	select {
	case a := <-done:
		return a.res, a.err
	case <-t.C:
		return nil, cctx.Err()
	}
}

// fromMCPTool is a server's tool as the session shows it: the exposed
// name, the server's schemas, annotations (MCP's defaults when unset:
// destructive and open-world) and description.
func fromMCPTool(server string, t *mcp.Tool) (tools.Definition, error) {
	d := tools.Definition{Name: ExposedToolName(server, t.Name), Description: t.Description}
	var err error
	if d.InputSchema, err = toSchema(t.InputSchema); err != nil {
		return d, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
	}
	if d.InputSchema == nil {
		d.InputSchema = &jsonschema.Schema{Type: "object"}
	}
	if t.OutputSchema != nil {
		if d.OutputSchema, err = toSchema(t.OutputSchema); err != nil {
			return d, fmt.Errorf("tool %q: output schema: %w", t.Name, err)
		}
	}
	d.Annotations = tools.Annotations{Title: t.Title, DestructiveHint: true, OpenWorldHint: true}
	if a := t.Annotations; a != nil {
		if a.Title != "" {
			d.Annotations.Title = a.Title
		}
		d.Annotations.ReadOnlyHint = a.ReadOnlyHint
		d.Annotations.IdempotentHint = a.IdempotentHint
		if a.DestructiveHint != nil {
			d.Annotations.DestructiveHint = *a.DestructiveHint
		}
		if a.OpenWorldHint != nil {
			d.Annotations.OpenWorldHint = *a.OpenWorldHint
		}
	}
	return d, nil
}

func toSchema(v any) (*jsonschema.Schema, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// fromMCPResult is a server's tool result as an observation: text, images
// and audio as they are, structured content and isError unchanged; other
// blocks (resource links, embedded resources) as their JSON text.
func fromMCPResult(res *mcp.CallToolResult) *tools.Observation {
	obs := &tools.Observation{IsError: res.IsError, Structured: res.StructuredContent, Content: make([]tools.Content, 0, len(res.Content))}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			obs.Content = append(obs.Content, tools.Content{Type: "text", Text: c.Text})
		case *mcp.ImageContent:
			obs.Content = append(obs.Content, tools.Content{Type: "image", Data: c.Data, MIMEType: c.MIMEType})
		case *mcp.AudioContent:
			obs.Content = append(obs.Content, tools.Content{Type: "audio", Data: c.Data, MIMEType: c.MIMEType})
		default:
			b, err := json.Marshal(c)
			if err != nil {
				b = []byte(fmt.Sprintf("(a %T block that could not be encoded: %v)", c, err))
			}
			obs.Content = append(obs.Content, tools.Content{Type: "text", Text: string(b)})
		}
	}
	return obs
}
