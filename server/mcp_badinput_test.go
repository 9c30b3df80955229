package server_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// mcpPost sends one raw request to /mcp, as a client that is not the SDK.
func mcpPost(t *testing.T, ts *servertest.Server, session string, body []byte) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, ts.Base+"/mcp", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+ts.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// Bad input to /mcp gets a clear HTTP or JSON-RPC error, creates no
// sandbox, and leaves a working MCP session beside it untouched.
func TestMCPBadInput(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.MaxMessageBytes = 1 << 20 })
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
	sid := cs.ID()
	for _, c := range []struct {
		name    string
		session string
		body    []byte
		code    int
		says    string
	}{
		{"malformed JSON, no session", "", []byte(`{"jsonrpc":"2.0","id":1,"method":`), http.StatusBadRequest, "malformed"},
		{"malformed JSON in a session", sid, []byte(`{"jsonrpc":"2.0","id":1,"method":`), http.StatusBadRequest, "malformed"},
		{"not JSON-RPC", sid, []byte(`[1,2,3]`), http.StatusBadRequest, "malformed"},
		{"unknown method", sid, []byte(`{"jsonrpc":"2.0","id":2,"method":"no/such"}`), http.StatusBadRequest, `"no/such" unsupported`},
		{"unknown session", "no-such-session", []byte(`{"jsonrpc":"2.0","id":3,"method":"tools/list"}`), http.StatusNotFound, "session not found"},
		{"oversized body", sid, append(append([]byte(`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"echo","arguments":{"text":"`),
			bytes.Repeat([]byte("x"), 2<<20)...), []byte(`"}}}`)...), http.StatusRequestEntityTooLarge, "exceeds 1048576 bytes"},
	} {
		code, body, _ := mcpPost(t, ts, c.session, c.body)
		if code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("%s: HTTP %d %q, want %d saying %q", c.name, code, strings.TrimSpace(body), c.code, c.says)
		}
	}
	// Wrong argument types are the tool's error, a result the model reads.
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": 5}})
	if err != nil || !res.IsError {
		t.Fatalf("wrong argument type: %+v %v", res, err)
	}
	// The session still works, and no request above made a sandbox.
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "still here"}})
	if err != nil || res.IsError || res.Content[0].(*mcp.TextContent).Text != "still here" {
		t.Fatalf("after bad input: %+v %v", res, err)
	}
	if n := ts.Backend.Created(); n != 1 {
		t.Fatalf("%d sandboxes created, want the one of the session", n)
	}
}
