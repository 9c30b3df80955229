package mcpapi_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/mcpapi"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// The snapshot tools are listed and served only where the profile turns
// them on, in both revisions, and act on the MCP session's own sandbox.
func TestSnapshotToolsPerProfile(t *testing.T) {
	token := auth.NewToken()
	c, err := core.New(core.Options{Backend: servertest.NewFakeBackend(), OperatorToken: token,
		MCPDefault: sandbox.SessionOptions{Image: "fake:latest"},
		Profiles:   map[string]sandbox.SessionOptions{"harness": {Image: "fake:latest"}}})
	require.NoError(t, err)
	h := mcpapi.New(c, mcpapi.Options{MaxBodyBytes: 4 << 20, SnapshotTools: func(p string) bool { return p == "harness" }})
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
		_ = h.Shutdown(context.Background())
		_ = c.Shutdown(context.Background(), false)
	})
	base := hs.URL
	for _, version := range []string{"2025-11-25", mcpapi.ModernProtocol} {
		t.Run(version, func(t *testing.T) {
			assert.NotContains(t, toolNames(t, connect(t, base+"/mcp", token, version)), mcpapi.SnapshotToolName)
			on := connect(t, base+"/mcp/harness", token, version)
			names := toolNames(t, on)
			for _, n := range []string{mcpapi.SnapshotToolName, mcpapi.RestoreToolName, mcpapi.SnapshotListToolName, mcpapi.ForkToolName, "terminal"} {
				assert.Contains(t, names, n)
			}
			args := func(a map[string]any) map[string]any { return a }
			if version == mcpapi.ModernProtocol {
				res, text := callTool(t, on, mcpapi.ToolOpen, map[string]any{})
				require.False(t, res.IsError, text)
				handle := res.StructuredContent.(map[string]any)[mcpapi.HandleArg]
				args = func(a map[string]any) map[string]any { a[mcpapi.HandleArg] = handle; return a }
			}
			res, text := callTool(t, on, mcpapi.SnapshotToolName, args(map[string]any{"name": "t-" + version}))
			require.False(t, res.IsError, text)
			assert.Contains(t, text, "not carried over", "says processes are not in it")
			res, text = callTool(t, on, mcpapi.SnapshotListToolName, args(map[string]any{}))
			require.False(t, res.IsError, text)
			assert.Contains(t, text, "t-"+version)
			res, text = callTool(t, on, mcpapi.RestoreToolName, args(map[string]any{"snapshot": "t-" + version}))
			require.False(t, res.IsError, text)
			res, text = callTool(t, on, mcpapi.ForkToolName, args(map[string]any{"snapshot": "t-" + version, "count": 2}))
			require.False(t, res.IsError, text)
			assert.Contains(t, text, "session_token")
			res, text = callTool(t, on, mcpapi.RestoreToolName, args(map[string]any{"snapshot": "nope"}))
			assert.True(t, res.IsError, text)
		})
	}
}
