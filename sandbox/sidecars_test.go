package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/sandboxd/sandboxd/tools"
)

// The manager's cache of what sidecars listed: found by the declaration,
// resolved or not, whatever its workspace; its version changes when a
// server's tools change, not when the same list is learned again.
func TestLearnedSidecarTools(t *testing.T) {
	m := &Manager{}
	srv := MCPServer{Name: "fake", Image: "x"}
	running := srv.withDefaults(builtinDefaults.Limits)
	running.Workspace = WorkspaceReadOnly
	v0 := m.SidecarToolsVersion()
	assert.Empty(t, m.SidecarTools([]MCPServer{srv}), "not learned yet")

	count := []tools.Definition{{Name: "fake__count"}}
	m.learnedTools(running, count)
	v1 := m.SidecarToolsVersion()
	assert.Greater(t, v1, v0)
	assert.Equal(t, count, m.SidecarTools([]MCPServer{srv}))

	m.learnedTools(running, []tools.Definition{{Name: "fake__count"}})
	assert.Equal(t, v1, m.SidecarToolsVersion(), "the same list again")

	added := []tools.Definition{{Name: "fake__count"}, {Name: "fake__added"}}
	m.learnedTools(running, added)
	assert.Greater(t, m.SidecarToolsVersion(), v1)
	assert.Equal(t, added, m.SidecarTools([]MCPServer{srv}))
}
