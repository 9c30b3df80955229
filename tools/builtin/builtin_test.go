package builtin

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/skill"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestDefaultSpecsResolve(t *testing.T) {
	reg := Registry()
	specs := DefaultSpecs()
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	assert.Equal(t, reg.Names(), slices.Sorted(slices.Values(append(slices.Clone(names), skill.FactoryName, "shell", "apply_patch"))),
		"every factory but the skills' and OpenAI's has a default spec")
	assert.Equal(t, append(slices.Clone(names), "shell", "apply_patch", "local_shell"), ToolNames())

	ws := t.TempDir()
	ts, err := reg.Resolve(tools.Env{Workspace: ws, StateDir: t.TempDir()}, specs)
	require.NoError(t, err)
	defer ts.Close()
	var got []string
	for _, d := range ts.Definitions() {
		got = append(got, d.Name)
		assert.NotEmpty(t, d.Description, d.Name)
		assert.NotNil(t, d.InputSchema, d.Name)
	}
	assert.Equal(t, names, got, "the tools come in spec order under their factory names")
	assert.Equal(t, []string{"terminal", "file_editor", "grep", "glob"}, got)
}

// Definitions must list exactly what a resolved default toolset lists, so
// `sandboxd tools` never drifts from tools/list of a real session.
func TestDefinitionsMatchResolvedToolset(t *testing.T) {
	ws := t.TempDir()
	ts, err := Registry().Resolve(tools.Env{Workspace: ws, StateDir: t.TempDir()}, DefaultSpecs())
	require.NoError(t, err)
	defer ts.Close()
	want, err := json.Marshal(ts.Definitions())
	require.NoError(t, err)
	got, err := json.Marshal(Definitions(ws))
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(got))
	assert.Contains(t, Definitions("/nonexistent/ws")[1].Description, "/nonexistent/ws")
}

// Every tool set resolves to the tools SetDefinitions lists, so the
// stateless MCP listing and `sandboxd tools --set` never drift from a
// real session's tools/list.
func TestSetsMatchResolvedToolsets(t *testing.T) {
	want := map[string][]string{
		SetOpenHands: {"terminal", "file_editor", "grep", "glob"},
		SetOpenAI:    {"shell", "apply_patch", "grep", "glob"},
		SetBoth:      {"terminal", "shell", "file_editor", "apply_patch", "grep", "glob"},
	}
	for _, set := range Sets() {
		t.Run(set, func(t *testing.T) {
			ws := t.TempDir()
			specs, err := SetSpecs(set)
			require.NoError(t, err)
			ts, err := Registry().Resolve(tools.Env{Workspace: ws, StateDir: t.TempDir()}, specs)
			require.NoError(t, err)
			defer ts.Close()
			var names []string
			for _, d := range ts.Definitions() {
				names = append(names, d.Name)
			}
			assert.Equal(t, want[set], names)
			defs, err := SetDefinitions(set, ws)
			require.NoError(t, err)
			got, err := json.Marshal(defs)
			require.NoError(t, err)
			resolved, err := json.Marshal(ts.Definitions())
			require.NoError(t, err)
			assert.JSONEq(t, string(resolved), string(got))
		})
	}
	_, err := SetSpecs("codex")
	require.ErrorContains(t, err, "not one of")
	_, err = SetDefinitions("codex", "/w")
	require.Error(t, err)
	assert.Len(t, AllDefinitions("/w"), 7)
}
