package mcpapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/mcpexport"
	"github.com/sandboxd/sandboxd/tools/transfer"
)

// The MCP revision 2026-07-28 has no protocol sessions: state that outlives
// a request is carried by handles the server mints and the model passes
// back as tool arguments (SEP-2567). A stateless client opens a sandbox
// with sandbox_open, gets a handle, and names it in the "sandbox" argument
// of every session tool; sandbox_close, or --mcp-idle-timeout without a
// call, ends it.
const (
	// ModernProtocol is the first revision served statelessly.
	ModernProtocol = "2026-07-28"

	ToolOpen  = "sandbox_open"
	ToolClose = "sandbox_close"
	// HandleArg is the argument of every session tool that names the sandbox.
	HandleArg = "sandbox"

	handlePrefix = "sb_"
	handleBytes  = 24 // 192 random bits: unguessable, never derived from anything a client sees
	// listTTL is how long a client may cache tools/list: the list depends
	// only on the endpoint's configuration, which is fixed while the
	// server runs.
	listTTL = 10 * time.Minute
)

// handles maps handles to the sandboxes of stateless clients. Handles are
// kept as their SHA-256, so the table never holds a usable handle and a
// lookup's timing says nothing about one.
type handles struct {
	mu   sync.Mutex
	byID map[[sha256.Size]byte]opened
	shut bool
}

// opened is a sandbox opened by handle, and the endpoint that opened it
// (its tools are that endpoint's).
type opened struct {
	s  *core.Session
	ep *endpoint
}

func newHandles() *handles { return &handles{byID: map[[sha256.Size]byte]opened{}} }

func handleKey(h string) [sha256.Size]byte { return sha256.Sum256([]byte(h)) }

func newHandle() string {
	b := make([]byte, handleBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error (Go 1.24+)
	return handlePrefix + base64.RawURLEncoding.EncodeToString(b)
}

// add records s, opened at ep, under a new handle until s ends (closed,
// idled out, failed). False: the server is shutting down.
func (hs *handles) add(s *core.Session, ep *endpoint) (string, bool) {
	h := newHandle()
	k := handleKey(h)
	hs.mu.Lock()
	if hs.shut {
		hs.mu.Unlock()
		return "", false
	}
	hs.byID[k] = opened{s, ep}
	hs.mu.Unlock()
	go func() {
		<-s.Done()
		hs.mu.Lock()
		delete(hs.byID, k)
		hs.mu.Unlock()
	}()
	return h, true
}

func (hs *handles) get(h string) (opened, bool) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	o, ok := hs.byID[handleKey(h)]
	return o, ok
}

// shutdown refuses new handles and returns the live sandboxes.
func (hs *handles) shutdown() []*core.Session {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.shut = true
	all := make([]*core.Session, 0, len(hs.byID))
	for _, o := range hs.byID {
		all = append(all, o.s)
	}
	return all
}

// modernTools is the tools/list of an endpoint's stateless path: the same
// for every caller. The session tools are defs, the tools of the
// endpoint's sandboxes (Options.Tools), each with the required handle
// argument.
func modernTools(defs []tools.Definition, idle time.Duration) []*mcp.Tool {
	expiry := fmt.Sprintf("It closes after %s without a call on it", humanDuration(idle))
	list := []*mcp.Tool{
		{
			Name: ToolOpen,
			Description: "Open a new sandbox: a Linux container with a persistent terminal, a file editor, grep and glob, " +
				"files under " + sandbox.WorkspaceDir + ". Returns its handle (\"" + handlePrefix + "…\"); pass it as the \"" + HandleArg +
				"\" argument of every other tool call for this sandbox, so the shell's directory, environment and files carry over. " +
				expiry + ", or with " + ToolClose + ". Open one sandbox per task and keep using its handle.",
			InputSchema: &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{}},
			OutputSchema: &jsonschema.Schema{Type: "object", Required: []string{HandleArg}, Properties: map[string]*jsonschema.Schema{
				HandleArg:              {Type: "string", Description: "the sandbox's handle"},
				"idle_timeout_seconds": {Type: "integer", Description: "the sandbox closes after this long without a call"},
			}},
			Annotations: &mcp.ToolAnnotations{Title: "Open a sandbox", OpenWorldHint: ptr(false), DestructiveHint: ptr(false)},
		},
		{
			Name:        ToolClose,
			Description: "Close a sandbox opened with " + ToolOpen + ": its container and files are removed and its handle stops working.",
			InputSchema: &jsonschema.Schema{Type: "object", Required: []string{HandleArg}, Properties: map[string]*jsonschema.Schema{
				HandleArg: handleSchema(),
			}},
			Annotations: &mcp.ToolAnnotations{Title: "Close a sandbox", OpenWorldHint: ptr(false), DestructiveHint: ptr(true), IdempotentHint: true},
		},
	}
	for _, d := range defs {
		t := mcpexport.Tool(d)
		in := t.InputSchema.(*jsonschema.Schema).CloneSchemas()
		if in.Properties == nil {
			in.Properties = map[string]*jsonschema.Schema{}
		}
		in.Properties[HandleArg] = handleSchema()
		in.Required = append([]string{HandleArg}, in.Required...)
		if in.PropertyOrder != nil {
			in.PropertyOrder = append([]string{HandleArg}, in.PropertyOrder...)
		}
		t.InputSchema = in
		list = append(list, t)
	}
	return list
}

func handleSchema() *jsonschema.Schema {
	return &jsonschema.Schema{Type: "string", Description: "The handle " + ToolOpen + " returned (\"" + handlePrefix +
		"…\"). Use the same handle on every call to keep working in the same sandbox."}
}

func ptr[T any](v T) *T { return &v }

func humanDuration(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return plural(int(d/time.Hour), "hour")
	case d%time.Minute == 0:
		return plural(int(d/time.Minute), "minute")
	}
	return d.String()
}

func plural(n int, unit string) string {
	if n == 1 {
		return "1 " + unit
	}
	return fmt.Sprintf("%d %ss", n, unit)
}

// modernMiddleware answers tools/list and tools/call of the endpoint's
// stateless path.
func (e *endpoint) modernMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	h := e.h
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		switch method {
		case "tools/list":
			h.core.Metrics().Requests.WithLabelValues(method, "mcp").Inc()
			return &mcp.ListToolsResult{Tools: e.modern(), Cacheable: mcp.Cacheable{TTLMs: int(listTTL.Milliseconds()), CacheScope: "public"}}, nil
		case "tools/call":
			creq, ok := req.(*mcp.CallToolRequest)
			if !ok {
				return next(ctx, method, req)
			}
			h.core.Metrics().Requests.WithLabelValues(method, "mcp").Inc()
			res, err := e.modernCall(ctx, creq)
			return res, h.protocolError(err)
		}
		return next(ctx, method, req)
	}
}

func (e *endpoint) modernCall(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	h := e.h
	name := req.Params.Name
	if name == ToolOpen {
		return e.openSandbox(ctx), nil
	}
	if !slices.ContainsFunc(e.modern(), func(t *mcp.Tool) bool { return t.Name == name }) {
		return nil, apierr.New(apierr.InvalidParams, "unknown tool %q", name)
	}
	args, handle, err := splitHandle(req.Params.Arguments)
	if err != nil {
		return failureText(err.Error()), nil
	}
	if handle == "" {
		return failureText(fmt.Sprintf("missing %q: every call of %s names its sandbox; call %s first and pass the handle it returns as %q",
			HandleArg, name, ToolOpen, HandleArg)), nil
	}
	o, ok := h.handles.get(handle)
	if !ok {
		shown := handle
		if len(shown) > 64 { // it is the client's own text; a long one need not come back whole
			shown = shown[:64] + "…"
		}
		return failureText(fmt.Sprintf("unknown sandbox %q: it was never opened, was closed, or closed after %s without a call; open a new one with %s",
			shown, humanDuration(h.opts.SessionTimeout), ToolOpen)), nil
	}
	if o.ep != e {
		return failureText(fmt.Sprintf("this sandbox was opened at %s, not %s: call its tools there (its tools are that endpoint's)", o.ep.path, e.path)), nil
	}
	s := o.s
	if name == ToolClose {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			return failure(err), nil
		}
		return &mcp.CallToolResult{
			Content:           []mcp.Content{&mcp.TextContent{Text: "Sandbox closed; its handle no longer works."}},
			StructuredContent: map[string]any{HandleArg: handle, "closed": true},
		}, nil
	}
	if e.transfer && transfer.IsName(name) {
		return e.callTransfer(ctx, s, name, args)
	}
	if e.snapshotTools && isSnapshotTool(name) {
		return e.callSnapshotTool(ctx, s, name, args)
	}
	var sink tools.StreamFunc
	if token := req.Params.GetProgressToken(); token != nil {
		p := newProgress(ctx, req.Session, token)
		defer p.stop()
		sink = p.send
	}
	obs, err := s.Call(ctx, core.CallRequest{Transport: metrics.TransportMCP, Name: name, Args: args, Extra: sink})
	if err != nil {
		if !apierr.ToolFailure(err) {
			return nil, err
		}
		h.core.Metrics().Error(apierr.KindOf(err).String(), "mcp")
		return failure(err), nil
	}
	return toResult(obs), nil
}

// openSandbox creates a sandbox of the endpoint's profile and mints its
// handle. Failures (the server at --max-sessions, the engine) are results
// the model reads.
func (e *endpoint) openSandbox(ctx context.Context) *mcp.CallToolResult {
	h := e.h
	// No session end exists: idling out is the end.
	r, err := h.core.Create(ctx, h.core.Operator(), core.APIMCP, core.CreateRequest{Profile: e.profile, IdleTimeout: h.opts.SessionTimeout})
	if err != nil {
		h.core.Metrics().Error(apierr.KindOf(err).String(), "mcp")
		return failure(fmt.Errorf("opening a sandbox: %w", err))
	}
	handle, ok := h.handles.add(r.Session, e)
	if !ok {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		_ = r.Session.Close(cctx) // the server is shutting down; Close logs a failed removal
		return failureText("the server is shutting down; no sandbox was opened")
	}
	h.log.Info("mcp sandbox opened", "session", r.Session.ID(), "endpoint", e.path)
	idle := h.opts.SessionTimeout
	return &mcp.CallToolResult{
		Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf(
			"Opened sandbox %s. Pass \"%s\": %q in every terminal, file_editor, grep and glob call for it. "+
				"It closes after %s without a call, or with %s.", handle, HandleArg, handle, humanDuration(idle), ToolClose)}},
		StructuredContent: map[string]any{HandleArg: handle, "idle_timeout_seconds": int64(idle / time.Second)},
	}
}

// splitHandle takes the handle out of a call's arguments; the rest goes to
// the tool, whose schema has no such argument.
func splitHandle(raw json.RawMessage) (json.RawMessage, string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return raw, "", nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, "", fmt.Errorf("arguments must be a JSON object: %w", err)
	}
	v, ok := m[HandleArg]
	if !ok {
		return raw, "", nil
	}
	var handle string
	if err := json.Unmarshal(v, &handle); err != nil {
		return nil, "", fmt.Errorf("%q must be a string: the handle %s returned", HandleArg, ToolOpen)
	}
	delete(m, HandleArg)
	rest, err := json.Marshal(m)
	return rest, strings.TrimSpace(handle), err
}

func failureText(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}
