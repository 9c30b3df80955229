package api

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

// An MCP client (the official Go SDK, streamable HTTP) gets a sandbox, runs
// the four tools in it, and closing the session removes the sandbox.
func TestMCPFourToolsAndClose(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{s.token, http.DefaultTransport}},
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}) // the session mode (2026-07-28 is stateless)
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*mcp.Tool{}
	for _, tool := range list.Tools {
		byName[tool.Name] = tool
	}
	for _, name := range []string{"terminal", "file_editor", "grep", "glob"} {
		tool := byName[name]
		if tool == nil {
			t.Fatalf("tools/list lacks %s: %v", name, list.Tools)
		}
		if tool.InputSchema == nil || tool.Annotations == nil || tool.Description == "" {
			t.Fatalf("%s: schema, annotations or description missing: %+v", name, tool)
		}
	}
	if !byName["grep"].Annotations.ReadOnlyHint || byName["terminal"].Annotations.ReadOnlyHint {
		t.Fatalf("annotations: grep %+v, terminal %+v", byName["grep"].Annotations, byName["terminal"].Annotations)
	}
	if containers(t) != 1 {
		t.Fatalf("%d containers for one MCP session", containers(t))
	}

	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return res
	}
	text := func(res *mcp.CallToolResult) string {
		var b strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				b.WriteString(tc.Text)
			}
		}
		return b.String()
	}

	res := call("terminal", map[string]any{"command": "mkdir -p /workspace/src && echo hello-$((6*7))"})
	if res.IsError || !strings.Contains(text(res), "hello-42") {
		t.Fatalf("terminal: %+v %q", res, text(res))
	}
	if m, ok := res.StructuredContent.(map[string]any); !ok || m["exit_code"] != float64(0) {
		t.Fatalf("terminal structured: %#v", res.StructuredContent)
	}
	res = call("file_editor", map[string]any{"command": "create", "path": "/workspace/src/main.go", "file_text": "package main\n\nfunc main() { println(\"needle\") }\n"})
	if res.IsError {
		t.Fatalf("file_editor create: %q", text(res))
	}
	res = call("file_editor", map[string]any{"command": "view", "path": "/workspace/src/main.go"})
	if res.IsError || !strings.Contains(text(res), "needle") {
		t.Fatalf("file_editor view: %q", text(res))
	}
	res = call("grep", map[string]any{"pattern": "needle", "path": "/workspace"})
	if res.IsError || !strings.Contains(text(res), "/workspace/src/main.go") {
		t.Fatalf("grep: %q", text(res))
	}
	res = call("glob", map[string]any{"pattern": "**/*.go", "path": "/workspace"})
	if res.IsError || !strings.Contains(text(res), "/workspace/src/main.go") {
		t.Fatalf("glob: %q", text(res))
	}
	// A failing tool call is a result with isError, not a protocol error.
	res = call("file_editor", map[string]any{"command": "view", "path": "/workspace/missing.txt"})
	if !res.IsError {
		t.Fatalf("view of a missing file: %q", text(res))
	}
	// A command's non-zero exit is output, not a failure.
	res = call("terminal", map[string]any{"command": "false"})
	if m, _ := res.StructuredContent.(map[string]any); m["exit_code"] != float64(1) {
		t.Fatalf("false: %#v", res.StructuredContent)
	}

	// Ending the MCP session (HTTP DELETE) removes its sandbox.
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for containers(t) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the sandbox of the closed MCP session is still there")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// An MCP client that gives up on a call (its context ends: the SDK sends
// notifications/cancelled) can run the next command at once: the terminal
// is not left busy with the cancelled one.
func TestMCPCancelThenNextCommand(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{s.token, http.DefaultTransport}},
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}) // the session mode (2026-07-28 is stateless)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	for i := range 5 {
		callCtx, stop := context.WithTimeout(ctx, 500*time.Millisecond)
		_, err := cs.CallTool(callCtx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "sleep 30", "timeout": 60}})
		stop()
		if err == nil {
			t.Fatalf("round %d: the call outlived its context", i)
		}
		want := "next-" + string(rune('a'+i))
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo " + want}})
		if err != nil {
			t.Fatal(err)
		}
		var text strings.Builder
		for _, c := range res.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				text.WriteString(tc.Text)
			}
		}
		if res.IsError || !strings.Contains(text.String(), want) {
			t.Fatalf("round %d: the command after a cancel: %q", i, text.String())
		}
	}
}
