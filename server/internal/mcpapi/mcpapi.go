// Package mcpapi serves sandboxd over MCP (streamable HTTP, the official Go
// SDK): each MCP session gets one fresh sandbox, whose tools (terminal,
// file_editor, grep, glob) become the MCP server's tools.
//
// Lifecycle: the sandbox is created eagerly, in the background, as soon as
// the client's initialize succeeds, so the container start overlaps the rest
// of the client's handshake; tools/list and tools/call wait for it. When the
// MCP session ends (HTTP DELETE, the idle SessionTimeout, or server
// shutdown) its sandbox is closed; a session closed while its sandbox is
// still starting cancels the start. At --max-sessions initialize itself is
// refused. A create that failed anyway (the engine refused, the cap was
// reached meanwhile) is tried again by the session's next tools/list or
// tools/call, so the MCP session is not lost to it.
//
// One mcp.Server serves every session. tools/list and tools/call are
// answered by a receiving middleware from the session's own sandbox, so
// different sessions could have different tools (skills, sidecars) without
// registering anything server-wide.
//
// Clients of revision 2026-07-28, which has no protocol sessions, are served
// on the same endpoint by a second, stateless mcp.Server: they open
// sandboxes with sandbox_open and name them by handle (stateless.go).
// Requests are routed by their Mcp-Protocol-Version header.
//
// Endpoints: /mcp serves the default profile (the core's: the config's
// "default", else --mcp-image), /mcp/NAME the session profile NAME; each
// is an endpoint of its own (its mcp.Servers, its HTTP handlers and so its
// own MCP session ids, its stateless tool list). Any other /mcp/... path is
// a 404 whose JSON-RPC error names the endpoints there are.
package mcpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/config"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
	"github.com/sandboxd/sandboxd/tools/mcpexport"
	"github.com/sandboxd/sandboxd/tools/transfer"
)

// Defaults of Options.
const (
	DefaultSessionTimeout = 30 * time.Minute
	progressQueue         = 64 // progress notifications buffered per call; more are dropped
)

// Path is where the handler is mounted: Path serves the default profile,
// Path/NAME the profile NAME.
const Path = "/mcp"

// Options configure the MCP endpoint.
type Options struct {
	// Requests is the Host and Origin check of every request (the zero
	// value: loopback Hosts, no browser Origin).
	Requests auth.RequestPolicy
	// SessionTimeout closes an MCP session (and its sandbox) after this
	// long without a request, and a sandbox opened by handle after this
	// long without a call. Default 30 minutes. It is the sandboxes' idle
	// timeout as far as MCP is concerned, applied on top of their profile's
	// options (core.CreateRequest.IdleTimeout), so a warm pool of the
	// profile serves MCP too.
	SessionTimeout time.Duration
	// Tools are the tools a profile's sandboxes serve, as the stateless
	// path lists them without a sandbox (tools/list of revision
	// 2026-07-28): profile is the endpoint's ("" for /mcp), opts the
	// profile's options as written. nil: BuiltinTools. The seam for tools
	// that come with a profile (skills).
	Tools func(profile string, opts sandbox.SessionOptions) []tools.Definition
	// ToolsVersion changes whenever Tools's answer may have changed (an MCP
	// sidecar's tools did): the stateless list is made again then. nil:
	// it never changes.
	ToolsVersion func() uint64
	// MaxBodyBytes bounds a request body (a file_editor call carries up to
	// 10 MiB of file text).
	MaxBodyBytes int64
	// Version is reported to clients in serverInfo.
	Version string
	// TransferTools says whether an endpoint serves the harness's upload
	// and download tools (transfer.go): profile is the endpoint's ("" for
	// /mcp), as the config's `transfer_tools` says. nil: none does.
	TransferTools func(profile string) bool
	// SnapshotTools says whether an endpoint serves the harness's
	// snapshot tools (snapshot.go), as the config's `snapshot_tools` says.
	// nil: none does.
	SnapshotTools func(profile string) bool
}

// Handler is the http.Handler of /mcp and /mcp/NAME. The server's
// middleware has checked Host and Origin; this handler requires the
// operator token.
type Handler struct {
	core *core.Core
	opts Options
	log  *slog.Logger

	def       *endpoint            // /mcp
	endpoints map[string]*endpoint // /mcp/NAME by NAME

	mu       sync.Mutex
	sessions map[*mcp.ServerSession]*mcpSandbox
	shut     bool
	wg       sync.WaitGroup

	// The sandboxes of the stateless path (revision 2026-07-28) by handle.
	handles *handles
}

// endpoint serves one profile: its MCP sessions' sandboxes and the
// stateless path's are created with that profile.
type endpoint struct {
	h       *Handler
	profile string // "" for /mcp: the default profile
	path    string // for people: /mcp, /mcp/NAME
	http    *mcp.StreamableHTTPHandler
	// The stateless path (revision 2026-07-28): its handlers and its tool
	// list (the same for every caller of the endpoint, made once). A
	// request that asks for no progress is answered as plain JSON
	// (modernJSON); one that does, as an SSE stream (modernHTTP), which
	// carries the progress notifications before the result.
	modernHTTP *mcp.StreamableHTTPHandler
	modernJSON *mcp.StreamableHTTPHandler
	modern     func() []*mcp.Tool
	// send is the legacy server's sending method handler, to tell one
	// MCP session that its tools changed.
	send mcp.MethodHandler
	// transfer: the endpoint serves upload and download (transfer.go),
	// within these limits.
	transfer       bool
	transferLimits transfer.Limits
	// snapshotTools: the endpoint serves the snapshot tools (snapshot.go).
	snapshotTools bool
}

// BuiltinTools are the built-in tools that a profile's options select:
// its tool set's (the four of openhands by default), or those its Tools
// names.
func BuiltinTools(_ string, o sandbox.SessionOptions) []tools.Definition {
	if len(o.Tools) > 0 {
		return slices.DeleteFunc(builtin.AllDefinitions(sandbox.WorkspaceDir), func(d tools.Definition) bool {
			return !slices.ContainsFunc(o.Tools, func(s tools.Spec) bool { return s.Name == d.Name })
		})
	}
	defs, err := builtin.SetDefinitions(o.ToolSet, sandbox.WorkspaceDir)
	if err != nil { // validated with the profile; never here
		return builtin.Definitions(sandbox.WorkspaceDir)
	}
	return defs
}

// mcpSandbox is the sandbox of one MCP session.
type mcpSandbox struct {
	ep     *endpoint          // the endpoint of its initialize
	ready  chan struct{}      // closed when the first create has ended
	cancel context.CancelFunc // cancels the first create
	// unwatch stops telling the MCP session of its sandbox's tool changes.
	unwatch func()

	mu    sync.Mutex // held by a create retry, so there is one at a time
	sess  *core.Session
	err   error // of the last create, while there is no sess
	ended bool  // the MCP session ended: its sandbox is closed, none is made
}

// New returns the MCP handler: an endpoint for the default profile and one
// for each profile the core defines.
func New(c *core.Core, opts Options) *Handler {
	if opts.SessionTimeout <= 0 {
		opts.SessionTimeout = DefaultSessionTimeout
	}
	if opts.Version == "" {
		opts.Version = "dev"
	}
	if opts.Tools == nil {
		opts.Tools = BuiltinTools
	}
	h := &Handler{
		core: c, opts: opts, log: c.Logger().With("component", "mcpapi"), sessions: map[*mcp.ServerSession]*mcpSandbox{},
		handles: newHandles(), endpoints: map[string]*endpoint{},
	}
	h.def = h.newEndpoint("")
	for _, name := range c.ProfileNames() {
		if name == config.DefaultProfile {
			h.endpoints[name] = h.def // /mcp/default is /mcp
			continue
		}
		h.endpoints[name] = h.newEndpoint(name)
	}
	return h
}

func (h *Handler) newEndpoint(profile string) *endpoint {
	e := &endpoint{h: h, profile: profile, path: Path}
	e.initTransfer()
	e.initSnapshotTools()
	of := ""
	if profile != "" {
		e.path += "/" + profile
		of = " (session profile " + profile + ")"
	}
	var (
		modernMu  sync.Mutex
		modernVer uint64
		listed    []*mcp.Tool
	)
	e.modern = func() []*mcp.Tool {
		var ver uint64
		if h.opts.ToolsVersion != nil {
			ver = h.opts.ToolsVersion()
		}
		modernMu.Lock()
		defer modernMu.Unlock()
		if listed == nil || ver != modernVer {
			o, _ := h.core.Profile(core.APIMCP, profile) // defined: the endpoint exists for it
			listed, modernVer = modernTools(e.withTransfer(h.opts.Tools(profile, o)), h.opts.SessionTimeout), ver
		}
		return listed
	}
	opts := h.opts
	srv := mcp.NewServer(&mcp.Implementation{Name: "sandboxd", Title: "sandboxd", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Each MCP session of this server is one sandbox" + of + " (a Linux container) with a persistent terminal, " +
			"a file editor, grep and glob. Files live under /workspace; the sandbox ends with the session.",
		// listChanged: a session's tools change when an MCP sidecar's do.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		Logger:       h.log,
	})
	srv.AddReceivingMiddleware(e.middleware)
	srv.AddSendingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		e.send = next
		return next
	})
	e.http = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		SessionTimeout:      opts.SessionTimeout,
		MaxRequestBodyBytes: opts.MaxBodyBytes,
		Logger:              h.log,
		// The SDK's own DNS-rebinding check (a request to a loopback
		// address must name a loopback Host) stays on as a second layer,
		// unless Hosts allows more names (a reverse proxy's, say): then
		// Requests is the check.
		DisableLocalhostProtection: len(opts.Requests.Hosts.Allowed) > 0,
	})

	// The SDK logs every stateless request's ephemeral session at INFO
	// ("server session connected", "... disconnected"): three lines per
	// tool call. Only its warnings and errors are kept on this path.
	quiet := slog.New(minLevel{h.log.Handler(), slog.LevelWarn})
	modern := mcp.NewServer(&mcp.Implementation{Name: "sandboxd", Title: "sandboxd", Version: opts.Version}, &mcp.ServerOptions{
		Instructions: "Open a sandbox" + of + " (a Linux container with a persistent terminal, a file editor, grep and glob; files under " +
			"/workspace) with " + ToolOpen + ", then pass the handle it returns as the \"" + HandleArg + "\" argument of every call; " +
			"close it with " + ToolClose + ".",
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}},
		Logger:       quiet,
	})
	modern.AddReceivingMiddleware(e.modernMiddleware)
	modernOpts := func(jsonResponse bool) *mcp.StreamableHTTPOptions {
		return &mcp.StreamableHTTPOptions{
			Stateless:           true,
			JSONResponse:        jsonResponse,
			MaxRequestBodyBytes: opts.MaxBodyBytes,
			Logger:              quiet,
			// Without it a client that gives up (or is cancelled) leaves its
			// terminal command running: a notifications/cancelled reaches
			// another request's ephemeral session, never this one.
			PropagateRequestCancellation: true,
			DisableLocalhostProtection:   len(opts.Requests.Hosts.Allowed) > 0,
		}
	}
	e.modernHTTP = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return modern }, modernOpts(false))
	e.modernJSON = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return modern }, modernOpts(true))
	return e
}

// modernRequest tells a request of revision 2026-07-28 or later: its
// clients send the revision in this header on every request (the SDK checks
// that it matches the request's _meta). Revisions are dates, so they
// compare as strings.
func modernRequest(r *http.Request) bool {
	return r.Method == http.MethodPost && r.Header.Get("Mcp-Protocol-Version") >= ModernProtocol
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Repeats the server's check, so that this handler is never open to
	// DNS rebinding or other origins wherever it is mounted.
	if code, msg := h.opts.Requests.Check(r); code != "" {
		h.core.Metrics().Error(code, "mcp")
		http.Error(w, msg, http.StatusForbidden)
		return
	}
	e := h.endpoint(r.URL.Path)
	if e == nil {
		h.notFound(w, r)
		return
	}
	if modernRequest(r) {
		e.serveModern(w, r)
		return
	}
	e.http.ServeHTTP(w, r)
}

// serveModern serves a stateless request: as one JSON response unless it
// asks for progress, which only an SSE stream can carry before the result
// (with JSONResponse the SDK sends a request's notifications to the
// standalone stream, which the stateless path has not). The test is on
// the bytes: "progressToken" anywhere in the body (in the arguments, say)
// picks the stream, which serves every request right, only slower. A body
// over MaxBodyBytes goes to the stream handler whole, which refuses it.
func (e *endpoint) serveModern(w http.ResponseWriter, r *http.Request) {
	limit := e.h.opts.MaxBodyBytes
	if limit <= 0 || r.Body == nil {
		e.modernHTTP.ServeHTTP(w, r)
		return
	}
	head, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	r.Body = readCloser{io.MultiReader(bytes.NewReader(head), r.Body), r.Body}
	if err != nil || int64(len(head)) > limit || bytes.Contains(head, progressTokenKey) {
		e.modernHTTP.ServeHTTP(w, r)
		return
	}
	e.modernJSON.ServeHTTP(w, r)
}

// progressTokenKey marks a request that asks for progress notifications.
var progressTokenKey = []byte(`"progressToken"`)

// readCloser reads from r and closes c (a request body put back together
// after serveModern looked at its start).
type readCloser struct {
	io.Reader
	c io.Closer
}

func (r readCloser) Close() error { return r.c.Close() }

// endpoint is the endpoint of a path: Path, or Path/NAME of a defined
// profile; nil for any other.
func (h *Handler) endpoint(path string) *endpoint {
	if path == Path {
		return h.def
	}
	name, ok := strings.CutPrefix(path, Path+"/")
	if !ok {
		return nil
	}
	return h.endpoints[name]
}

// maxIDBody bounds what notFound reads of a request to learn its id.
const maxIDBody = 64 << 10

// notFound answers a path under /mcp that names no profile: 404, with a
// JSON-RPC error naming the endpoints there are (an MCP client shows its
// message), under the request's id when its body gives one.
func (h *Handler) notFound(w http.ResponseWriter, r *http.Request) {
	id := json.RawMessage("null")
	if r.Method == http.MethodPost && r.Body != nil {
		var msg struct {
			ID json.RawMessage `json:"id"`
		}
		body, _ := io.ReadAll(io.LimitReader(r.Body, maxIDBody))
		if json.Unmarshal(body, &msg) == nil && len(msg.ID) > 0 && (msg.ID[0] == '"' || msg.ID[0] == '-' || (msg.ID[0] >= '0' && msg.ID[0] <= '9')) {
			id = msg.ID
		}
	}
	paths := []string{Path}
	for _, name := range h.core.ProfileNames() {
		paths = append(paths, Path+"/"+name)
	}
	name := strings.TrimPrefix(r.URL.Path, Path+"/")
	if len(name) > 64 { // the client's own text; a long one need not come back whole
		name = name[:64] + "…"
	}
	msg := fmt.Sprintf("no MCP endpoint at %s: %v; the endpoints here are %s", Path+"/"+name,
		config.UnknownProfile(name, h.core.ProfileNames()), strings.Join(paths, ", "))
	h.core.Metrics().Error(apierr.NotFound.String(), "mcp")
	e := apierr.JSONRPC(apierr.New(apierr.NotFound, "%s", msg))
	var b bytes.Buffer
	_ = json.NewEncoder(&b).Encode(struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   any             `json:"error"`
	}{"2.0", id, e})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusNotFound)
	_, _ = w.Write(b.Bytes())
}

func (e *endpoint) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	h := e.h
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		ss, _ := req.GetSession().(*mcp.ServerSession)
		switch {
		case ss == nil:
			return next(ctx, method, req)
		case method == "initialize":
			// Each MCP session is a sandbox to be: at --max-sessions a new
			// one is refused here, not accepted and held without a sandbox.
			if err := h.core.Admit(h.sandboxless()); err != nil {
				return nil, h.protocolError(err)
			}
			res, err := next(ctx, method, req)
			if err == nil {
				h.start(e, ss)
			}
			return res, err
		case method == "tools/list":
			h.core.Metrics().Requests.WithLabelValues(method, "mcp").Inc()
			res, err := h.listTools(ctx, e, ss)
			return res, h.protocolError(err)
		case method == "tools/call":
			h.core.Metrics().Requests.WithLabelValues(method, "mcp").Inc()
			creq, ok := req.(*mcp.CallToolRequest)
			if !ok {
				return next(ctx, method, req)
			}
			res, err := h.callTool(ctx, e, ss, creq)
			return res, h.protocolError(err)
		}
		return next(ctx, method, req)
	}
}

// sandboxless counts MCP sessions that hold no sandbox yet (starting, or
// whose create failed and waits for a retry): the core does not count them.
func (h *Handler) sandboxless() int {
	h.mu.Lock()
	all := make([]*mcpSandbox, 0, len(h.sessions))
	for _, sb := range h.sessions {
		all = append(all, sb)
	}
	h.mu.Unlock()
	n := 0
	for _, sb := range all {
		if !sb.mu.TryLock() {
			continue // a create is running: the core counts it as creating
		}
		if sb.sess == nil && !sb.ended {
			n++
		}
		sb.mu.Unlock()
	}
	return n
}

// protocolError turns an error into a JSON-RPC error of the same code the
// WebSocket API would send.
func (h *Handler) protocolError(err error) error {
	if err == nil {
		return nil
	}
	h.core.Metrics().Error(apierr.KindOf(err).String(), "mcp")
	e := apierr.JSONRPC(err)
	data, _ := json.Marshal(e.Data) // plain fields: cannot fail
	return &jsonrpc.Error{Code: int64(e.Code), Message: e.Message, Data: data}
}

// start begins creating the sandbox of ss, initialized at e, and watches
// for the session's end.
func (h *Handler) start(e *endpoint, ss *mcp.ServerSession) {
	h.mu.Lock()
	if _, ok := h.sessions[ss]; ok || h.shut {
		h.mu.Unlock()
		if h.shut {
			// Not inline: Close waits for running requests, this one too.
			go ss.Close()
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	sb := &mcpSandbox{ep: e, ready: make(chan struct{}), cancel: cancel}
	h.sessions[ss] = sb
	h.wg.Add(2)
	h.mu.Unlock()
	h.core.Metrics().MCPSessions.Inc()

	go func() {
		defer h.wg.Done()
		defer close(sb.ready)
		sb.mu.Lock()
		defer sb.mu.Unlock()
		h.create(ctx, ss, sb)
	}()
	go func() {
		defer h.wg.Done()
		_ = ss.Wait() // returns when the session is closed: DELETE, idle timeout, shutdown
		sb.cancel()
		<-sb.ready
		sb.mu.Lock() // waits for a create retry in progress
		sb.ended = true
		sess := sb.sess
		if sb.unwatch != nil {
			sb.unwatch()
		}
		sb.mu.Unlock()
		if sess != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			if err := sess.Close(ctx); err != nil {
				h.log.Warn("closing mcp sandbox", "session", sess.ID(), "err", err)
			}
			cancel()
		}
		h.mu.Lock()
		delete(h.sessions, ss)
		h.mu.Unlock()
		h.core.Metrics().MCPSessions.Dec()
		h.log.Info("mcp session ended", "mcp_session", ss.ID(), "endpoint", e.path)
	}()
}

// create makes the sandbox of ss, with sb.mu held: of its endpoint's
// profile, without an idle timeout of its own (the MCP session's end closes
// it: the sandbox's reaper counts only tool calls, while the MCP session
// also lives on pings, the SDK client's KeepAlive, and a sandbox reaped
// under a live MCP session lost its shell state).
func (h *Handler) create(ctx context.Context, ss *mcp.ServerSession, sb *mcpSandbox) {
	r, err := h.core.Create(ctx, h.core.Operator(), core.APIMCP, core.CreateRequest{Profile: sb.ep.profile, IdleTimeout: sandbox.NoIdleTimeout})
	if err != nil {
		sb.err = fmt.Errorf("creating the sandbox of this MCP session: %w (the next call tries again)", err)
		level := slog.LevelWarn
		if ctx.Err() != nil {
			level = slog.LevelInfo // the session ended while its sandbox started
		}
		h.log.Log(ctx, level, "mcp sandbox create failed", "mcp_session", ss.ID(), "err", err)
		return
	}
	sb.sess, sb.err = r.Session, nil
	sb.unwatch = r.Session.WatchTools(func() { go sb.ep.toolsChanged(ss) })
	h.log.Info("mcp session started", "mcp_session", ss.ID(), "session", r.Session.ID(), "endpoint", sb.ep.path)
}

// toolsChanged sends notifications/tools/list_changed to ss, whose
// sandbox's tools changed (an MCP sidecar's did); the client lists again.
func (e *endpoint) toolsChanged(ss *mcp.ServerSession) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &mcp.ServerRequest[*mcp.ToolListChangedParams]{Session: ss, Params: &mcp.ToolListChangedParams{}}
	if _, err := e.send(ctx, "notifications/tools/list_changed", req); err != nil {
		e.h.log.Debug("telling an mcp session its tools changed", "mcp_session", ss.ID(), "err", err)
		return
	}
	e.h.log.Info("told an mcp session its tools changed", "mcp_session", ss.ID())
}

// sandboxOf waits for the sandbox of ss; if its create failed, it tries
// again.
func (h *Handler) sandboxOf(ctx context.Context, ss *mcp.ServerSession) (*core.Session, error) {
	h.mu.Lock()
	sb, ok := h.sessions[ss]
	h.mu.Unlock()
	if !ok {
		return nil, apierr.New(apierr.Unavailable, "this MCP session has no sandbox (it was not initialized, or it is ending)")
	}
	select {
	case <-sb.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.sess == nil && !sb.ended {
		h.create(ctx, ss, sb)
	}
	switch {
	case sb.sess != nil:
		return sb.sess, nil
	case sb.err != nil:
		return nil, sb.err
	}
	return nil, apierr.New(apierr.Unavailable, "this MCP session is ending")
}

func (h *Handler) listTools(ctx context.Context, e *endpoint, ss *mcp.ServerSession) (*mcp.ListToolsResult, error) {
	s, err := h.sandboxOf(ctx, ss)
	if err != nil {
		return nil, err
	}
	defs, err := s.Tools(ctx)
	if err != nil {
		return nil, err
	}
	defs = e.withTransfer(defs)
	res := &mcp.ListToolsResult{Tools: make([]*mcp.Tool, len(defs))}
	for i, d := range defs {
		res.Tools[i] = mcpexport.Tool(d)
	}
	return res, nil
}

// callTool runs a tool. Failures of the tool, and of the sandbox while
// running it, are results with IsError (the model reads them); only a
// request that is itself wrong (unknown tool) is a protocol error.
func (h *Handler) callTool(ctx context.Context, e *endpoint, ss *mcp.ServerSession, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	s, err := h.sandboxOf(ctx, ss)
	if err != nil {
		return failure(err), nil
	}
	if e.transfer && transfer.IsName(req.Params.Name) {
		return e.callTransfer(ctx, s, req.Params.Name, req.Params.Arguments)
	}
	if e.snapshotTools && isSnapshotTool(req.Params.Name) {
		return e.callSnapshotTool(ctx, s, req.Params.Name, req.Params.Arguments)
	}
	var sink tools.StreamFunc
	if token := req.Params.GetProgressToken(); token != nil {
		p := newProgress(ctx, ss, token)
		defer p.stop()
		sink = p.send
	}
	obs, err := s.Call(ctx, core.CallRequest{Transport: metrics.TransportMCP, Name: req.Params.Name, Args: req.Params.Arguments, Extra: sink})
	if err != nil {
		if !apierr.ToolFailure(err) {
			return nil, err
		}
		h.core.Metrics().Error(apierr.KindOf(err).String(), "mcp")
		return failure(err), nil
	}
	return toResult(obs), nil
}

// failure is err as a failed tool result, in the client's terms
// (apierr.From).
func failure(err error) *mcp.CallToolResult {
	res := &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: apierr.From(err).Error()}}}
	if _, busy := apierr.RetryAfter(err); busy {
		// A sandbox that could not start soon enough: what a harness acts
		// on, as the WebSocket API's error data (decision 0041).
		d := apierr.Data(err)
		res.Meta = mcp.Meta{"sandboxd/error": map[string]any{"code": apierr.JSONRPCCode(apierr.Busy), "kind": d.Kind, "retry_after": d.RetryAfter}}
	}
	return res
}

// toResult converts an observation: text and images as content blocks,
// structured data as structuredContent.
func toResult(obs *tools.Observation) *mcp.CallToolResult {
	res := &mcp.CallToolResult{IsError: obs.IsError, StructuredContent: obs.Structured, Content: make([]mcp.Content, 0, len(obs.Content))}
	for _, c := range obs.Content {
		switch c.Type {
		case "image":
			res.Content = append(res.Content, &mcp.ImageContent{Data: c.Data, MIMEType: c.MIMEType})
		case "audio": // from an MCP sidecar
			res.Content = append(res.Content, &mcp.AudioContent{Data: c.Data, MIMEType: c.MIMEType})
		default:
			res.Content = append(res.Content, &mcp.TextContent{Text: c.Text})
		}
	}
	return res
}

// progress forwards streamed output as notifications/progress, off the
// tool's reading goroutine: a slow client loses progress messages, never
// stalls the tool (the result carries the output anyway).
type progress struct {
	ch   chan string
	done chan struct{}
}

// newProgress sends on ss under ctx, the request's: on the stateless path
// a notification is only delivered while its request is open, and the
// request's context is what names it.
func newProgress(ctx context.Context, ss *mcp.ServerSession, token any) *progress {
	parent := context.WithoutCancel(ctx)
	p := &progress{ch: make(chan string, progressQueue), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		n := 0.0
		for msg := range p.ch {
			n++
			ctx, cancel := context.WithTimeout(parent, 5*time.Second)
			_ = ss.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: token, Progress: n, Message: msg})
			cancel()
		}
	}()
	return p
}

func (p *progress) send(b []byte) {
	select {
	case p.ch <- string(b):
	default:
	}
}

func (p *progress) stop() {
	close(p.ch)
	<-p.done
}

// Shutdown closes every MCP session (and with it its sandbox) and every
// sandbox opened by handle, and waits, or ctx. Sessions initialized from
// now on are closed at once; sandbox_open is refused.
func (h *Handler) Shutdown(ctx context.Context) error {
	for _, s := range h.handles.shutdown() {
		h.wg.Go(func() {
			if err := s.Close(ctx); err != nil {
				h.log.Warn("closing mcp sandbox", "session", s.ID(), "err", err)
			}
		})
	}
	h.mu.Lock()
	h.shut = true
	all := make([]*mcp.ServerSession, 0, len(h.sessions))
	for ss := range h.sessions {
		all = append(all, ss)
	}
	h.mu.Unlock()
	for _, ss := range all {
		go ss.Close() // waits for its requests; calls were cancelled by the drain
	}
	done := make(chan struct{})
	go func() { h.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// minLevel drops records below min; the rest go to the wrapped handler.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}

func (m minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(a), m.min}
}
func (m minLevel) WithGroup(g string) slog.Handler { return minLevel{m.Handler.WithGroup(g), m.min} }
