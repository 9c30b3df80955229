package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// bearer adds the token to every request of the MCP client.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func mcpConnect(t *testing.T, ts *servertest.Server, token string) (*mcp.ClientSession, error) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{
		Endpoint:   ts.Base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}},
		MaxRetries: -1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return client.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}) // the session mode (2026-07-28 is stateless)
}

func TestMCPSessionIsOneSandbox(t *testing.T) {
	ts := servertest.Start(t, nil)
	cs, err := mcpConnect(t, ts, ts.Token)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]*mcp.Tool{}
	for _, tool := range list.Tools {
		names[tool.Name] = tool
	}
	if names["echo"] == nil || names["echo"].InputSchema == nil || names["echo"].Annotations == nil || !names["echo"].Annotations.ReadOnlyHint {
		t.Fatalf("tools/list: %+v", list.Tools)
	}
	if ts.Backend.Live() != 1 {
		t.Fatalf("%d sandboxes for one MCP session", ts.Backend.Live())
	}
	// The MCP session's end closes the sandbox, never the sandbox's own
	// idle reaper (which would not see the session's pings).
	for _, s := range ts.Backend.List() {
		if idle := s.(*servertest.FakeSandbox).Options().IdleTimeout; idle >= 0 {
			t.Fatalf("an MCP sandbox with idle timeout %v", idle)
		}
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "hi" {
		t.Fatalf("echo: %+v", res)
	}
	// A tool failure is a result with IsError, not a protocol error.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "fail"})
	if err != nil || !res.IsError {
		t.Fatalf("fail: %+v %v", res, err)
	}
	// Images are ImageContent.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "image"})
	if err != nil {
		t.Fatal(err)
	}
	if img, ok := res.Content[1].(*mcp.ImageContent); !ok || img.MIMEType != "image/png" || len(img.Data) == 0 {
		t.Fatalf("image: %+v", res.Content)
	}
	// Structured output passes through.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := res.StructuredContent.(map[string]any); !ok || m["exit_code"] != float64(3) {
		t.Fatalf("structured: %#v", res.StructuredContent)
	}
	// An unknown tool is a protocol error (the request is wrong).
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "nope"}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown tool: %v", err)
	}

	// A second MCP session gets its own sandbox.
	cs2, err := mcpConnect(t, ts, ts.Token)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs2.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if ts.Backend.Live() != 2 {
		t.Fatalf("%d sandboxes for two MCP sessions", ts.Backend.Live())
	}
	// Ending an MCP session (DELETE) closes its sandbox.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return ts.Backend.Live() == 1 }, "the sandbox of the closed MCP session to close")
	cs2.Close()
	waitFor(t, func() bool { return ts.Backend.Live() == 0 }, "all sandboxes to close")
}

func TestMCPIdleTimeoutClosesSandbox(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.MCPSessionTimeout = 200 * time.Millisecond })
	cs, err := mcpConnect(t, ts, ts.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	waitFor(t, func() bool { return ts.Backend.Created() == 1 }, "the sandbox to start")
	waitFor(t, func() bool { return ts.Backend.Live() == 0 }, "the idle MCP session's sandbox to close")
}

func TestMCPAuth(t *testing.T) {
	ts := servertest.Start(t, nil)
	if _, err := mcpConnect(t, ts, "wrong-wrong-wrong-wrong-wrong-wrong-wrong"); err == nil {
		t.Fatal("connected with a wrong token")
	}
	if ts.Backend.Created() != 0 {
		t.Fatal("a sandbox was created for an unauthenticated client")
	}
}

func TestMCPShutdownClosesSandboxes(t *testing.T) {
	ts := servertest.Start(t, nil)
	cs, err := mcpConnect(t, ts, ts.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if ts.Backend.Live() != 0 {
		t.Fatal("MCP sandbox left after shutdown")
	}
	if _, err := cs.ListTools(ctx, nil); err == nil {
		t.Fatal("MCP session still answers after shutdown")
	}
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Streamed output reaches an MCP client as progress notifications when it
// asks for them with a progress token.
func TestMCPProgress(t *testing.T) {
	ts := servertest.Start(t, nil)
	// The session mode (2026-07-28 is stateless: TestMCPStatelessProgress).
	cs, progress := mcpConnectProgress(t, ts, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	params := &mcp.CallToolParams{Name: "stream", Arguments: map[string]any{"chunks": 5, "size": 3, "pause_us": 1000}}
	params.SetProgressToken("p1")
	if _, err := cs.CallTool(ctx, params); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return progress() == strings.Repeat("x", 15) }, "all progress messages")
}

// At --max-sessions a new MCP session is refused at initialize with the
// server's limit, instead of being accepted and held without a sandbox; a
// session that ends makes room.
func TestMCPInitializeRefusedAtCap(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.MaxSessions = 2 })
	var live []*mcp.ClientSession
	for range 2 {
		cs, err := mcpConnect(t, ts, ts.Token)
		if err != nil {
			t.Fatal(err)
		}
		live = append(live, cs)
	}
	waitFor(t, func() bool { return ts.Backend.Live() == 2 }, "both sandboxes")
	for range 3 {
		cs, err := mcpConnect(t, ts, ts.Token)
		if err == nil {
			_ = cs.Close()
			t.Fatal("a third MCP session was accepted at a cap of 2")
		}
		if !strings.Contains(err.Error(), "maximum of 2 sessions") {
			t.Fatalf("refusal: %v", err)
		}
	}
	_ = live[0].Close()
	waitFor(t, func() bool { return ts.Backend.Live() == 1 }, "the closed session's sandbox gone")
	cs, err := mcpConnect(t, ts, ts.Token)
	if err != nil {
		t.Fatalf("after a close: %v", err)
	}
	_ = cs.Close()
	_ = live[1].Close()
}
