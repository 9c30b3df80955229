// Package sidecar is the daemon's MCP client to a session's sidecars: the
// MCP servers a session declares, each run in a container of its own. A
// Set holds one client session per server, shared by every caller of the
// session: it starts them (eager or at first use), lists and names their
// tools, routes calls, restarts a server that went down, re-reads the
// tools a server says changed, and bounds all a server sends (limits.go).
//
// It knows nothing of sessions' options or runtimes: package sandbox
// declares the servers (sandbox.MCPServer) and gives each a Start that
// runs its container; this package imports nothing of sandboxd but tools.
package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/sandboxd/sandboxd/tools"
)

// Transports of a Server: the values of sandbox.MCPServer.Transport.
const (
	// Stdio speaks MCP over the sidecar's stdin/stdout (Conn.Stream).
	Stdio = "stdio"
	// HTTP is streamable HTTP at Conn.URL.
	HTTP = "http"
	// SSE is the legacy HTTP+SSE transport (2024-11-05) at Conn.URL.
	SSE = "sse"
)

// Conn is the daemon's way to a started sidecar.
type Conn struct {
	// Stream is the stdio of its main process (Stdio). The client
	// session speaks MCP over it when set, else over HTTP at URL.
	Stream io.ReadWriteCloser
	// URL is its MCP endpoint (HTTP, SSE), reachable from the daemon only.
	URL string
	// Stderr returns the end of what the sidecar wrote to stderr (hostile
	// input, bounded), for errors that say why it did not answer.
	Stderr func() string
	// Close drops the connection (not the container).
	Close func()
	// Exited, when set, is closed when the container ends (its output
	// ended: it exited, or Close was called). A client session over
	// Stream ends with the container by itself; one over HTTP does not
	// (a dead address answers nothing: a call to it fails only when a
	// dial times out, and one in flight waits for its deadline), so an
	// HTTP or SSE sidecar is found down by this.
	Exited <-chan struct{}
}

// Server is one MCP server of a Set.
type Server struct {
	// Name prefixes its tools (ExposedToolName) and names it in errors.
	Name string
	// Transport is Stdio, HTTP or SSE.
	Transport string
	// Eager servers are started by StartEager; the others at the first
	// listing or call that needs them.
	Eager bool
	// Start runs the server's container, replacing any it had (a
	// restart), and connects to it. Its error is returned as it is, so
	// it names the server itself.
	Start func(ctx context.Context) (*Conn, error)
	// Learned, when set, is told the server's tools each time they are
	// read: at every start, and after a change it announced.
	Learned func(defs []tools.Definition)
}

// Options of a Set.
type Options struct {
	// Servers in declaration order; names are unique.
	Servers []Server
	// Log is the session's logger for what servers send (hostile input:
	// bounded, package loglimit); each server's lines carry its name.
	Log *slog.Logger
	// Closed is wrapped by the errors of a Set that was closed (the
	// caller's sentinel, sandbox.ErrClosed).
	Closed error
}

// Set is a session's MCP servers, one daemon-owned MCP client session
// each. Its methods are safe for concurrent use.
type Set struct {
	life   context.Context // ends starts and restarts (the daemon's)
	closed error           // Options.Closed
	all    []*sidecar      // in declaration order
	by     map[string]*sidecar

	closeOnce sync.Once
	done      chan struct{} // closed by Close

	watchMu   sync.Mutex
	watchNext int
	watchers  map[int]func() // Watch's
}

// New makes the set of opts.Servers; none starts yet. life bounds every
// start and restart: when it ends (the daemon shuts down), they stop.
func New(life context.Context, opts Options) *Set {
	set := &Set{life: life, closed: opts.Closed, by: map[string]*sidecar{}, done: make(chan struct{})}
	if set.closed == nil {
		set.closed = errors.New("closed")
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, srv := range opts.Servers {
		c := &sidecar{set: set, srv: srv, log: log.With("sidecar", srv.Name), requests: newRequestLimiter()}
		set.all = append(set.all, c)
		set.by[srv.Name] = c
	}
	return set
}

// StartEager starts the eager servers at once and returns their errors,
// joined in declaration order.
func (set *Set) StartEager(ctx context.Context) error {
	var (
		wg   sync.WaitGroup
		errs = make([]error, len(set.all))
	)
	for i, c := range set.all {
		if !c.srv.Eager {
			continue
		}
		wg.Go(func() { _, errs[i] = c.session(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Watch calls fn (which must not block) whenever a server's tools change
// after it started: it announced notifications/tools/list_changed (the
// list is read again first), or came back from a restart listing other
// tools. stop ends the watch.
func (set *Set) Watch(fn func()) (stop func()) {
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

// changed tells the watchers that a server's tools changed.
func (set *Set) changed() {
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

// SameTools reports whether two lists of definitions are the same.
func SameTools(a, b []tools.Definition) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// Close ends every client session; the containers are the caller's to
// remove.
func (set *Set) Close() {
	set.closeOnce.Do(func() {
		close(set.done)
		for _, c := range set.all {
			c.mu.Lock()
			cs, conn := c.cs, c.conn
			c.cs, c.conn = nil, nil
			c.err = fmt.Errorf("mcp server %q: %w", c.srv.Name, set.closed)
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

// route returns the server a tool name belongs to by its prefix.
func (set *Set) route(name string) (*sidecar, bool) {
	srv, _, ok := strings.Cut(name, ToolSep)
	if !ok {
		return nil, false
	}
	c, ok := set.by[srv]
	return c, ok
}

// Owns reports whether a tool name is one of a server's in the set (by
// its prefix), to be run by Call.
func (set *Set) Owns(name string) bool {
	_, ok := set.route(name)
	return ok
}

// Call runs the tool a server of the set owns; name is the session's name
// for it. A server that is down, or dies during the call, gives at once an
// IsError observation saying so.
func (set *Set) Call(ctx context.Context, name string, args json.RawMessage) (*tools.Observation, error) {
	c, ok := set.route(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q (no mcp server of the session has it)", tools.ErrUnknownTool, name)
	}
	return c.call(ctx, name, args)
}

// Tools lists the servers' tools (starting lazy ones) after own, the
// sandbox's own tools, checked against them: a clash names both owners.
func (set *Set) Tools(ctx context.Context, own []tools.Definition) ([]tools.Definition, error) {
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
