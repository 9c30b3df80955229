package bash

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/mcpexport"
)

func TestDefinition(t *testing.T) {
	d := NewDefinition(Options{SoftTimeout: 7 * time.Second, MaxWait: 90 * time.Second})
	assert.Equal(t, "terminal", d.Name)
	assert.Equal(t, tools.Annotations{Title: "terminal", ReadOnlyHint: false, DestructiveHint: true, IdempotentHint: false, OpenWorldHint: true}, d.Annotations)
	assert.Contains(t, d.Description, "prints nothing new for 7 seconds")
	assert.Contains(t, d.Description, "after 90 seconds")
	assert.Contains(t, d.Description, "30000 characters")
	assert.Contains(t, d.Description, "run together as one command")
	assert.NotContains(t, d.Description, "One command at a time")

	in, err := json.Marshal(d.InputSchema)
	require.NoError(t, err)
	s := string(in)
	for _, field := range []string{`"command"`, `"is_input"`, `"timeout"`, `"reset"`, `"minimum":0`, "7 seconds"} {
		assert.Contains(t, s, field)
	}
	assert.Equal(t, []string{"command"}, d.InputSchema.Required)

	out, err := json.Marshal(d.OutputSchema)
	require.NoError(t, err)
	for _, field := range []string{"exit_code", "timeout", "metadata", "working_dir", "py_interpreter_path", "username", "hostname", "pid"} {
		assert.Contains(t, string(out), `"`+field+`"`)
	}
	// Exports used by the transports work.
	assert.Equal(t, "terminal", mcpexport.Tool(d).Name)
	assert.Equal(t, "function", d.OpenAI().Type)
}

func TestOptionsFromParams(t *testing.T) {
	env := tools.Env{Workspace: "/ws", StateDir: "/state"}
	opts, err := OptionsFromParams(env, nil)
	require.NoError(t, err)
	assert.Equal(t, Options{Dir: "/ws", StateDir: "/state/terminal"}, opts)

	// The session's working directory, when the agent has one, is where
	// the shell starts.
	withDir := tools.Env{Workspace: "/ws", StateDir: "/state", Dir: "/testbed"}
	opts, err = OptionsFromParams(withDir, nil)
	require.NoError(t, err)
	assert.Equal(t, "/testbed", opts.Dir)
	opts, err = OptionsFromParams(withDir, json.RawMessage(`{"dir": "/other"}`))
	require.NoError(t, err)
	assert.Equal(t, "/other", opts.Dir, "the tool's own dir param wins")

	opts, err = OptionsFromParams(env, json.RawMessage(`{"soft_timeout_seconds": 2.5, "max_wait_seconds": 60, "max_output_chars": 5000, "shell": "sh", "env": {"A": "b"}, "dir": "/other"}`))
	require.NoError(t, err)
	assert.Equal(t, 2500*time.Millisecond, opts.SoftTimeout)
	assert.Equal(t, time.Minute, opts.MaxWait)
	assert.Equal(t, 5000, opts.MaxOutputChars)
	assert.Equal(t, "sh", opts.Shell)
	assert.Equal(t, "/other", opts.Dir)
	assert.Equal(t, map[string]string{"A": "b"}, opts.Env)

	for _, bad := range []string{`{"nope": 1}`, `{"soft_timeout_seconds": -1}`, `{"max_wait_seconds": 0}`, `{"max_output_chars": 0}`, `[1]`} {
		_, err := OptionsFromParams(env, json.RawMessage(bad))
		assert.Error(t, err, bad)
	}
}

// A working directory inside the workspace is created; one elsewhere must
// exist.
func TestFactoryMakesWorkDir(t *testing.T) {
	ws := t.TempDir()
	env := tools.Env{Workspace: ws, StateDir: t.TempDir()}
	dir := filepath.Join(ws, "a", "b")
	var reg tools.Registry
	require.NoError(t, reg.Register(Name, Factory))
	ts, err := reg.Resolve(env, []tools.Spec{{Name: Name, Params: json.RawMessage(`{"dir":` + strconv.Quote(dir) + `}`)}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ts.Close() })
	st, err := os.Stat(dir)
	require.NoError(t, err)
	assert.True(t, st.IsDir())

	outside := filepath.Join(t.TempDir(), "missing")
	_, err = Factory(env, json.RawMessage(`{"dir":`+strconv.Quote(outside)+`}`))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "working directory")
	assert.NoDirExists(t, outside)
	_, err = Factory(env, json.RawMessage(`{"dir":`+strconv.Quote(filepath.Join(ws, "..", "escape"))+`}`))
	require.Error(t, err, "a dir that only looks inside the workspace is not created")
}

func TestOptionsValidation(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for name, o := range map[string]Options{
		"negative soft":  {Dir: dir, SoftTimeout: -time.Second},
		"negative wait":  {Dir: dir, MaxWait: -time.Second},
		"tiny output":    {Dir: dir, MaxOutputChars: 10},
		"bad env name":   {Dir: dir, Env: map[string]string{"A-B": "x"}},
		"missing dir":    {Dir: filepath.Join(dir, "missing")},
		"dir is a file":  {Dir: file},
		"missing shell":  {Dir: dir, Shell: "/nonexistent/shell"},
		"unknown shell":  {Dir: dir, Shell: "no-such-shell-xyz"},
		"negative grace": {Dir: dir, KillGrace: -1},
		"negative start": {Dir: dir, StartTimeout: -1},
	} {
		_, err := NewExecutor(o)
		assert.Error(t, err, name)
	}
}

func TestFactory(t *testing.T) {
	t.Parallel()
	var reg tools.Registry
	require.NoError(t, reg.Register(Name, Factory))
	env := tools.Env{Workspace: t.TempDir(), StateDir: t.TempDir()}
	_, err := reg.Resolve(env, []tools.Spec{{Name: Name, Params: json.RawMessage(`{"bogus": true}`)}})
	require.Error(t, err)

	ts, err := reg.Resolve(env, []tools.Spec{{Name: Name, Params: json.RawMessage(`{"soft_timeout_seconds": 1}`)}})
	require.NoError(t, err)
	defer ts.Close()
	require.Len(t, ts.Definitions(), 1)
	assert.Contains(t, ts.Definitions()[0].Description, "prints nothing new for 1 seconds")

	obs, err := ts.Call(context.Background(), Name, json.RawMessage(`{"command": "pwd; seq 1 20000"}`))
	require.NoError(t, err)
	out := obs.Structured.(Output)
	assert.Equal(t, 0, out.ExitCode)
	assert.True(t, strings.HasPrefix(obs.Text(), env.Workspace+"\n"))
	require.True(t, out.Truncated)
	assert.Equal(t, filepath.Join(env.StateDir, "terminal"), filepath.Dir(out.FullOutputPath))
	st, err := os.Stat(filepath.Dir(out.FullOutputPath))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	// Schema validation by the framework: wrong types are model-readable errors.
	obs, err = ts.Call(context.Background(), Name, json.RawMessage(`{"command": "ls", "timeout": -1}`))
	require.NoError(t, err)
	assert.True(t, obs.IsError)
	obs, err = ts.Call(context.Background(), Name, json.RawMessage(`{"command": 5}`))
	require.NoError(t, err)
	assert.True(t, obs.IsError)
}
