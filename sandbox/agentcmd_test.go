package sandbox

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
)

func resolvedForAgent(t *testing.T, o SessionOptions) SessionOptions {
	t.Helper()
	r, err := o.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	return r
}

// The argv is part of the contract with the agent binary (its flags) and
// with the images (the paths): pinned byte for byte.
func TestAgentCommand(t *testing.T) {
	base := []string{
		"/.sandboxd/sandboxd", "agent",
		"--stdio",
		"--socket", "/run/sandboxd/agent.sock",
		"--workspace", "/workspace",
		"--state-dir", "/run/sandboxd/state",
		"--dir", ".",
	}
	got, err := AgentCommand(resolvedForAgent(t, SessionOptions{}))
	require.NoError(t, err)
	assert.Equal(t, base, got)
	assert.NotContains(t, got, "--tools", "defaults need no tool specs")

	got, err = AgentCommand(resolvedForAgent(t, SessionOptions{Tools: []tools.Spec{{Name: "grep"}}}))
	require.NoError(t, err)
	require.Len(t, got, len(base)+2)
	assert.Equal(t, base, got[:len(base)])
	assert.Equal(t, "--tools", got[len(base)])
	assert.JSONEq(t, `[{"name":"grep"}]`, got[len(base)+1])

	// Editable paths are transfer roots beside the workspace.
	got, err = AgentCommand(resolvedForAgent(t, SessionOptions{EditablePaths: []string{"/testbed", "/opt/venv"}}))
	require.NoError(t, err)
	assert.Equal(t, append(slices.Clone(base), "--transfer-root", "/testbed", "--transfer-root", "/opt/venv"), got)

	assert.Equal(t, []string{"/.sandboxd/sandboxd", "agent-proxy", "--socket", "/run/sandboxd/agent.sock"}, ProxyCommand())
}

func TestAgentToolSpecs(t *testing.T) {
	specsJSON := func(o SessionOptions) string {
		t.Helper()
		specs, err := AgentToolSpecs(resolvedForAgent(t, o))
		require.NoError(t, err)
		require.NotNil(t, specs)
		b, err := json.Marshal(specs)
		require.NoError(t, err)
		return string(b)
	}
	got, err := AgentToolSpecs(resolvedForAgent(t, SessionOptions{}))
	require.NoError(t, err)
	assert.Empty(t, got)

	assert.JSONEq(t, `[{"name":"terminal","params":{"dir":"/tmp"}},{"name":"file_editor"},{"name":"grep"},{"name":"glob"}]`,
		specsJSON(SessionOptions{Cwd: "/tmp"}))

	assert.JSONEq(t, `[{"name":"terminal","params":{"dir":"/tmp","soft_timeout_seconds":5}},{"name":"grep"}]`,
		specsJSON(SessionOptions{Cwd: "/tmp", Tools: []tools.Spec{
			{Name: "terminal", Params: json.RawMessage(`{"soft_timeout_seconds":5}`)}, {Name: "grep"}}}))

	assert.JSONEq(t, `[{"name":"terminal","params":{"dir":"/workspace/x"}}]`,
		specsJSON(SessionOptions{Cwd: "/tmp", Tools: []tools.Spec{
			{Name: "terminal", Params: json.RawMessage(`{"dir":"/workspace/x"}`)}}}), "an explicit dir wins")

	// terminal.no_change_timeout becomes the terminal's soft timeout; its
	// default (the terminal's own) needs no specs, an explicit param wins.
	got, err = AgentToolSpecs(resolvedForAgent(t, SessionOptions{Terminal: TerminalOptions{NoChangeTimeout: DefaultNoChangeTimeout}}))
	require.NoError(t, err)
	assert.Empty(t, got)
	assert.JSONEq(t, `[{"name":"terminal","params":{"soft_timeout_seconds":2.5}},{"name":"file_editor"},{"name":"grep"},{"name":"glob"}]`,
		specsJSON(SessionOptions{Terminal: TerminalOptions{NoChangeTimeout: 2500 * time.Millisecond}}))
	assert.JSONEq(t, `[{"name":"terminal","params":{"soft_timeout_seconds":7}}]`,
		specsJSON(SessionOptions{Terminal: TerminalOptions{NoChangeTimeout: 3 * time.Second}, Tools: []tools.Spec{
			{Name: "terminal", Params: json.RawMessage(`{"soft_timeout_seconds":7}`)}}}), "an explicit param wins")

	// The session's own specs are not changed in place.
	o := resolvedForAgent(t, SessionOptions{Cwd: "/tmp", Tools: []tools.Spec{{Name: "terminal"}}})
	_, err = AgentToolSpecs(o)
	require.NoError(t, err)
	assert.Empty(t, o.Tools[0].Params)
}

// shell_init: image reaches the terminal as its param (an explicit one
// wins); entrypoint: image changes nothing in the argv (the runtime puts
// the image's command in the agent's environment).
func TestAgentCommandImageEnvironment(t *testing.T) {
	specs, err := AgentToolSpecs(resolvedForAgent(t, SessionOptions{ShellInit: ShellInitImage}))
	require.NoError(t, err)
	b, err := json.Marshal(specs)
	require.NoError(t, err)
	assert.JSONEq(t, `[{"name":"terminal","params":{"shell_init":"image"}},{"name":"file_editor"},{"name":"grep"},{"name":"glob"}]`, string(b))

	specs, err = AgentToolSpecs(resolvedForAgent(t, SessionOptions{ShellInit: ShellInitImage, Tools: []tools.Spec{
		{Name: "terminal", Params: json.RawMessage(`{"shell_init":"none"}`)}}}))
	require.NoError(t, err)
	b, err = json.Marshal(specs)
	require.NoError(t, err)
	assert.JSONEq(t, `[{"name":"terminal","params":{"shell_init":"none"}}]`, string(b), "an explicit param wins")

	plain, err := AgentCommand(resolvedForAgent(t, SessionOptions{}))
	require.NoError(t, err)
	got, err := AgentCommand(resolvedForAgent(t, SessionOptions{Entrypoint: EntrypointImage}))
	require.NoError(t, err)
	assert.Equal(t, plain, got)
}

// tool_set: the agent gets the set's specs, the terminal's params (cwd,
// soft timeout) go to the shell too; openhands is the default spelled out
// and resolves to "" (the same pool key as before the option was); a
// wrong value or one beside tools is refused naming tool_set.
func TestAgentToolSpecsToolSet(t *testing.T) {
	r := resolvedForAgent(t, SessionOptions{ToolSet: ToolSetOpenAI, Cwd: "/workspace/proj"})
	specs, err := AgentToolSpecs(r)
	require.NoError(t, err)
	var names []string
	for _, s := range specs {
		names = append(names, s.Name)
	}
	assert.Equal(t, []string{"shell", "apply_patch", "grep", "glob"}, names)
	assert.JSONEq(t, `{"dir":"/workspace/proj"}`, string(specs[0].Params))

	r = resolvedForAgent(t, SessionOptions{ToolSet: ToolSetBoth, Terminal: TerminalOptions{NoChangeTimeout: 30 * time.Second}})
	specs, err = AgentToolSpecs(r)
	require.NoError(t, err)
	assert.JSONEq(t, `{"terminal":true,"soft_timeout_seconds":30}`, string(specs[0].Params))
	assert.JSONEq(t, `{"file_editor":true}`, string(specs[1].Params))

	r = resolvedForAgent(t, SessionOptions{ToolSet: ToolSetOpenHands})
	assert.Empty(t, r.ToolSet)
	specs, err = AgentToolSpecs(r)
	require.NoError(t, err)
	assert.Nil(t, specs, "the default set needs no --tools")

	// A request's set replaces a profile's tools, and the other way round.
	o := SessionOptions{ToolSet: ToolSetOpenAI}.Over(SessionOptions{Tools: []tools.Spec{{Name: "terminal"}}})
	assert.Equal(t, ToolSetOpenAI, o.ToolSet)
	assert.Empty(t, o.Tools)

	for _, bad := range []SessionOptions{
		{ToolSet: "codex"},
		{ToolSet: ToolSetOpenAI, Tools: []tools.Spec{{Name: "terminal"}}},
	} {
		_, err := bad.Resolve(SessionOptions{Image: "img"})
		require.ErrorContains(t, err, "tool_set")
	}
}
