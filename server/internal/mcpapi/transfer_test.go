package mcpapi_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/mcpapi"
	"github.com/sandboxd/sandboxd/server/servertest"
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

// transferServer serves the profiles "harness" (transfer_tools on) and
// "agent" (off) over a fake backend.
func transferServer(t *testing.T) (base, token string) {
	t.Helper()
	token = auth.NewToken()
	c, err := core.New(core.Options{Backend: servertest.NewFakeBackend(), OperatorToken: token,
		MCPDefault: sandbox.SessionOptions{Image: "fake:latest"},
		Profiles:   map[string]sandbox.SessionOptions{"harness": {Image: "fake:latest"}, "agent": {Image: "fake:latest"}}})
	require.NoError(t, err)
	h := mcpapi.New(c, mcpapi.Options{MaxBodyBytes: 4 << 20, TransferTools: func(p string) bool { return p == "harness" }})
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		_ = h.Shutdown(context.Background())
		_ = c.Shutdown(context.Background(), false)
	})
	return hs.URL, token
}

func connect(t *testing.T, url, token, version string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "t", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

func toolNames(t *testing.T, cs *mcp.ClientSession) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	list, err := cs.ListTools(ctx, nil)
	require.NoError(t, err)
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
	}
	return names
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
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

// upload and download are listed and served only where the profile turns
// them on, in both revisions; a call round-trips the bytes; a bad argument
// is an isError result, not a protocol error.
func TestTransferToolsPerProfile(t *testing.T) {
	base, token := transferServer(t)
	for _, version := range []string{"2025-11-25", mcpapi.ModernProtocol} {
		t.Run(version, func(t *testing.T) {
			off := connect(t, base+"/mcp/agent", token, version)
			assert.NotContains(t, toolNames(t, off), "upload")
			assert.NotContains(t, toolNames(t, connect(t, base+"/mcp", token, version)), "download")

			on := connect(t, base+"/mcp/harness", token, version)
			names := toolNames(t, on)
			assert.Contains(t, names, "upload")
			assert.Contains(t, names, "download")
			assert.Contains(t, names, "terminal")

			args := func(a map[string]any) map[string]any { return a }
			if version == mcpapi.ModernProtocol {
				res, text := callTool(t, on, mcpapi.ToolOpen, map[string]any{})
				require.False(t, res.IsError, text)
				handle := res.StructuredContent.(map[string]any)[mcpapi.HandleArg]
				args = func(a map[string]any) map[string]any { a[mcpapi.HandleArg] = handle; return a }
				// Called where it is off, it is an unknown tool.
				_, err := off.CallTool(context.Background(), &mcp.CallToolParams{Name: "upload", Arguments: map[string]any{"path": "/workspace/x", "content_base64": ""}})
				require.ErrorContains(t, err, "unknown tool")
			}
			data := make([]byte, 100_000)
			_, _ = rand.Read(data)
			res, text := callTool(t, on, "upload", args(map[string]any{"path": "/workspace/blob.bin", "content_base64": base64.StdEncoding.EncodeToString(data)}))
			require.False(t, res.IsError, text)
			assert.Contains(t, text, "Wrote 100000 bytes to /workspace/blob.bin")
			// The fake keeps the tar by its directory and gives it back.
			res, text = callTool(t, on, "download", args(map[string]any{"path": "/workspace", "offset": 10, "length": 1000}))
			require.False(t, res.IsError, text)
			st := res.StructuredContent.(map[string]any)
			got, err := base64.StdEncoding.DecodeString(st["content_base64"].(string))
			require.NoError(t, err)
			assert.Equal(t, data[10:1010], got)
			assert.EqualValues(t, 100_000, st["size"])

			res, text = callTool(t, on, "upload", args(map[string]any{"path": "../etc/passwd", "content_base64": "eA=="}))
			assert.True(t, res.IsError)
			assert.Contains(t, text, "relative")
			// Over the request body bound, the HTTP layer refuses it (the
			// tool's limit, 3.0 MiB decoded here, is what such a body holds).
			_, err = on.CallTool(context.Background(), &mcp.CallToolParams{Name: "upload",
				Arguments: args(map[string]any{"path": "/workspace/big", "content_base64": strings.Repeat("A", 4<<20)})})
			assert.ErrorContains(t, err, "Too Large")
		})
	}
}
