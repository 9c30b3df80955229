package server_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// mcpConnectModern connects with the SDK client's default: revision
// 2026-07-28, stateless.
func mcpConnectModern(t *testing.T, ts *servertest.Server) *mcp.ClientSession {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{
		Endpoint:   ts.Base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{ts.Token, http.DefaultTransport}},
		MaxRetries: -1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, transport, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	require.Equal(t, "2026-07-28", cs.InitializeResult().ProtocolVersion)
	return cs
}

func callText(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err)
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res, b.String()
}

func openHandle(t *testing.T, cs *mcp.ClientSession) string {
	t.Helper()
	res, text := callText(t, cs, "sandbox_open", map[string]any{})
	require.False(t, res.IsError, text)
	st, ok := res.StructuredContent.(map[string]any)
	require.True(t, ok, "structured content: %#v", res.StructuredContent)
	h, _ := st["sandbox"].(string)
	require.True(t, strings.HasPrefix(h, "sb_"), h)
	assert.Contains(t, text, h, "the text carries the handle too, for models that read only text")
	assert.Len(t, h, len("sb_")+32, "192 random bits, base64url")
	return h
}

func TestMCPStatelessHandles(t *testing.T) {
	ts := servertest.Start(t, nil)
	cs := mcpConnectModern(t, ts)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	byName := map[string]*mcp.Tool{}
	for _, tool := range list.Tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{"sandbox_open", "sandbox_close", "terminal", "file_editor", "grep", "glob"} {
		require.Contains(t, byName, name)
	}
	for _, name := range []string{"sandbox_close", "terminal", "file_editor", "grep", "glob"} {
		schema, ok := byName[name].InputSchema.(map[string]any)
		require.True(t, ok, "%s: %T", name, byName[name].InputSchema)
		assert.Contains(t, schema["required"], "sandbox", name)
		assert.Contains(t, schema["properties"], "sandbox", name)
	}

	a, b := openHandle(t, cs), openHandle(t, cs)
	require.NotEqual(t, a, b)
	assert.Equal(t, 2, ts.Backend.Live(), "one sandbox per handle")

	res, text := callText(t, cs, "terminal", map[string]any{"command": "echo from-a", "sandbox": a})
	require.False(t, res.IsError, text)
	assert.Contains(t, text, "from-a")

	res, text = callText(t, cs, "terminal", map[string]any{"command": "echo x"})
	assert.True(t, res.IsError)
	assert.True(t, strings.HasPrefix(text, `missing "sandbox"`), text)
	assert.Contains(t, text, "sandbox_open")

	made := "sb_" + strings.Repeat("A", 32)
	res, text = callText(t, cs, "terminal", map[string]any{"command": "echo x", "sandbox": made})
	assert.True(t, res.IsError)
	assert.True(t, strings.HasPrefix(text, "unknown sandbox"), text)

	res, text = callText(t, cs, "sandbox_close", map[string]any{"sandbox": a})
	require.False(t, res.IsError, text)
	for _, name := range []string{"terminal", "sandbox_close"} {
		res, text = callText(t, cs, name, map[string]any{"command": "echo x", "sandbox": a})
		assert.True(t, res.IsError, name)
		assert.True(t, strings.HasPrefix(text, "unknown sandbox"), "%s on a closed handle: %s", name, text)
	}
	assert.Equal(t, 1, ts.Backend.Live(), "the closed sandbox is gone, the other lives")

	res, text = callText(t, cs, "terminal", map[string]any{"command": "echo from-b", "sandbox": b})
	require.False(t, res.IsError, text)
	assert.Contains(t, text, "from-b")

	_, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool", Arguments: map[string]any{}})
	require.Error(t, err, "an unknown tool is a protocol error")
}

// Both revisions on one endpoint: a 2025-11-25 client keeps its one sandbox
// per session, with the tools as they were (no handle argument).
func TestMCPLegacyAndStatelessSideBySide(t *testing.T) {
	ts := servertest.Start(t, nil)
	modern := mcpConnectModern(t, ts)
	h := openHandle(t, modern)

	client := mcp.NewClient(&mcp.Implementation{Name: "legacy", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	legacy, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   ts.Base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{ts.Token, http.DefaultTransport}},
		MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	require.NoError(t, err)
	defer func() { _ = legacy.Close() }()
	require.Equal(t, "2025-11-25", legacy.InitializeResult().ProtocolVersion)
	list, err := legacy.ListTools(ctx, nil)
	require.NoError(t, err)
	for _, tool := range list.Tools {
		assert.NotContains(t, []string{"sandbox_open", "sandbox_close"}, tool.Name)
		schema, _ := tool.InputSchema.(map[string]any)
		if props, ok := schema["properties"].(map[string]any); ok {
			assert.NotContains(t, props, "sandbox", tool.Name)
		}
	}
	res, err := legacy.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo legacy"}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	assert.Equal(t, 2, ts.Backend.Live(), "the handle's sandbox and the legacy session's")

	res2, text := callText(t, modern, "terminal", map[string]any{"command": "echo still", "sandbox": h})
	require.False(t, res2.IsError, text)
}

// A handle's sandbox idles out after the MCP idle timeout (the manager's
// reaper does it: the e2e suite checks that for real); the handle is then
// unknown.
func TestMCPStatelessIdleExpiry(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.MCPSessionTimeout = 7 * time.Minute })
	cs := mcpConnectModern(t, ts)
	h := openHandle(t, cs)
	all := ts.Backend.List()
	require.Len(t, all, 1)
	sb := ts.Backend.Sandbox(all[0].ID())
	assert.Equal(t, 7*time.Minute, sb.Options().IdleTimeout, "the sandbox idles out after the MCP idle timeout")

	require.NoError(t, sb.Close(context.Background())) // as the idle reaper would
	require.Eventually(t, func() bool {
		res, text := callText(t, cs, "terminal", map[string]any{"command": "echo x", "sandbox": h})
		return res.IsError && strings.HasPrefix(text, "unknown sandbox") && strings.Contains(text, "7 minutes")
	}, time.Minute, 10*time.Millisecond, "the ended sandbox's handle is unknown")
}

// Streamed output reaches a stateless client as progress notifications
// while its request is open.
func TestMCPStatelessProgress(t *testing.T) {
	ts := servertest.Start(t, nil)
	cs, progress := mcpConnectProgress(t, ts, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := openHandle(t, cs)
	params := &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo progress-line", "sandbox": h}}
	params.SetProgressToken("p1")
	res, err := cs.CallTool(ctx, params)
	require.NoError(t, err)
	require.False(t, res.IsError)
	require.Eventually(t, func() bool { return progress() == "progress-line\n" },
		5*time.Second, 5*time.Millisecond, "the output came as progress")
}

// --max-sessions counts sandboxes opened by handle: at the cap sandbox_open
// is a result the model reads, and closing one makes room.
func TestMCPStatelessCap(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.MaxSessions = 1 })
	cs := mcpConnectModern(t, ts)
	h := openHandle(t, cs)
	res, text := callText(t, cs, "sandbox_open", map[string]any{})
	assert.True(t, res.IsError)
	assert.Contains(t, text, "maximum of 1 sessions")
	assert.Equal(t, 1, ts.Backend.Live())
	res, text = callText(t, cs, "sandbox_close", map[string]any{"sandbox": h})
	require.False(t, res.IsError, text)
	openHandle(t, cs)
}

// mcpConnectProgress connects a client (opts: nil for the SDK's default
// revision) that collects the messages of the progress notifications it
// gets; progress returns them so far. It is closed when the test ends.
func mcpConnectProgress(t *testing.T, ts *servertest.Server, opts *mcp.ClientSessionOptions) (cs *mcp.ClientSession, progress func() string) {
	t.Helper()
	var mu sync.Mutex
	var got strings.Builder
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got.WriteString(req.Params.Message)
			mu.Unlock()
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   ts.Base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{ts.Token, http.DefaultTransport}},
	}, opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs, func() string { mu.Lock(); defer mu.Unlock(); return got.String() }
}

// A stateless call that asks for no progress is answered as one JSON
// response; one with a progress token as an SSE stream that carries the
// progress before the result.
func TestMCPStatelessJSONUnlessProgress(t *testing.T) {
	ts := servertest.Start(t, nil)
	rec := &contentTypes{next: bearer{ts.Token, http.DefaultTransport}}
	var mu sync.Mutex
	var got strings.Builder
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			got.WriteString(req.Params.Message)
			mu.Unlock()
		},
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.Base + "/mcp", HTTPClient: &http.Client{Transport: rec}}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	h := openHandle(t, cs)

	rec.reset()
	res, text := callText(t, cs, "terminal", map[string]any{"command": "echo plain", "sandbox": h})
	require.False(t, res.IsError, text)
	assert.Contains(t, text, "plain")
	assert.Equal(t, []string{"application/json"}, rec.reset(), "no progress asked: one JSON response")

	params := &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo progress-line", "sandbox": h}}
	params.SetProgressToken("p1")
	res, err = cs.CallTool(ctx, params)
	require.NoError(t, err)
	require.False(t, res.IsError)
	assert.Equal(t, []string{"text/event-stream"}, rec.reset(), "progress asked: an SSE stream")
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return got.String() == "progress-line\n" },
		5*time.Second, 5*time.Millisecond, "the output came as progress")
}

// contentTypes records the Content-Type of every POST's response.
type contentTypes struct {
	next http.RoundTripper
	mu   sync.Mutex
	got  []string
}

func (c *contentTypes) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.next.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost {
		c.mu.Lock()
		c.got = append(c.got, strings.TrimSpace(strings.Split(resp.Header.Get("Content-Type"), ";")[0]))
		c.mu.Unlock()
	}
	return resp, err
}

// reset returns what was recorded since the last reset.
func (c *contentTypes) reset() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.got
	c.got = nil
	return out
}
