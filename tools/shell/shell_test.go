package shell

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/bash"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func newSet(t *testing.T, params string) (string, *tools.Toolset) {
	t.Helper()
	dir := t.TempDir()
	made, err := Factory(tools.Env{Workspace: dir, StateDir: t.TempDir()}, json.RawMessage(params))
	require.NoError(t, err)
	ts, err := tools.NewToolset(made...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ts.Close() })
	return dir, ts
}

func run(t *testing.T, ts *tools.Toolset, name string, args any) (*tools.Observation, Output) {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	obs, err := ts.Call(context.Background(), name, raw)
	require.NoError(t, err)
	out, _ := obs.Structured.(Output)
	return obs, out
}

func exit(t *testing.T, r CommandOutput) int {
	t.Helper()
	require.Equal(t, OutcomeExit, r.Outcome.Type, "%+v", r)
	require.NotNil(t, r.Outcome.ExitCode)
	return *r.Outcome.ExitCode
}

func TestCommandsInOrderStreamsApart(t *testing.T) {
	_, ts := newSet(t, "")
	obs, out := run(t, ts, Name, map[string]any{"commands": []string{
		"echo out; echo err >&2",
		"printf 'no newline'",
		"false",
		"exit_status_test() { return 7; }; exit_status_test",
	}})
	require.False(t, obs.IsError, obs.Text())
	require.Len(t, out.Output, 4)
	require.Equal(t, "out\n", out.Output[0].Stdout)
	require.Equal(t, "err\n", out.Output[0].Stderr)
	require.Equal(t, 0, exit(t, out.Output[0]))
	require.Equal(t, "no newline", out.Output[1].Stdout)
	require.Empty(t, out.Output[1].Stderr)
	require.Equal(t, 1, exit(t, out.Output[2]))
	require.Equal(t, 7, exit(t, out.Output[3]))
	require.Contains(t, obs.Text(), "$ echo out; echo err >&2\nout\n[stderr]\nerr\n[exit code 0]")
}

func TestStatePersistsAcrossCommandsAndCalls(t *testing.T) {
	dir, ts := newSet(t, "")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	_, out := run(t, ts, Name, map[string]any{"commands": []string{"cd sub", "export GREETING=hi", "pwd; echo $GREETING"}})
	require.Equal(t, filepath.Join(dir, "sub")+"\nhi\n", out.Output[2].Stdout)
	_, out = run(t, ts, Name, map[string]any{"commands": []string{"pwd; echo $GREETING"}})
	require.Equal(t, filepath.Join(dir, "sub")+"\nhi\n", out.Output[0].Stdout)
}

func TestTimeoutStopsTheRest(t *testing.T) {
	dir, ts := newSet(t, "")
	obs, out := run(t, ts, Name, map[string]any{
		"commands":   []string{"echo before", "echo partial; sleep 30; echo never", "touch not-run"},
		"timeout_ms": 300,
	})
	require.False(t, obs.IsError, obs.Text())
	require.Len(t, out.Output, 2, "the command after the timeout is not run")
	require.Equal(t, 0, exit(t, out.Output[0]))
	require.Equal(t, OutcomeTimeout, out.Output[1].Outcome.Type)
	require.Nil(t, out.Output[1].Outcome.ExitCode)
	require.Equal(t, "partial\n", out.Output[1].Stdout)
	require.NoFileExists(t, filepath.Join(dir, "not-run"))
	// The shell is usable again at once: the sleep was interrupted.
	_, out = run(t, ts, Name, map[string]any{"commands": []string{"echo again"}, "timeout_ms": 5000})
	require.Equal(t, "again\n", out.Output[0].Stdout)
}

func TestTimeoutOfACommandIgnoringSIGINT(t *testing.T) {
	_, ts := newSet(t, "")
	_, out := run(t, ts, Name, map[string]any{"commands": []string{"export KEEP=1; trap '' INT; sleep 30"}, "timeout_ms": 200})
	require.Equal(t, OutcomeTimeout, out.Output[0].Outcome.Type)
	// Reset to a fresh shell: usable, its state gone.
	_, out = run(t, ts, Name, map[string]any{"commands": []string{"echo ok${KEEP}"}})
	require.Equal(t, "ok\n", out.Output[0].Stdout)
}

func TestMaxOutputLength(t *testing.T) {
	_, ts := newSet(t, "")
	cmds := []string{"echo 0123456789; echo abcdef >&2"}
	_, out := run(t, ts, Name, map[string]any{"commands": cmds, "max_output_length": 0})
	require.Empty(t, out.Output[0].Stdout)
	require.Empty(t, out.Output[0].Stderr)
	require.Equal(t, 0, exit(t, out.Output[0]))
	require.EqualValues(t, 0, *out.MaxOutputLength)
	_, out = run(t, ts, Name, map[string]any{"commands": cmds, "max_output_length": 4})
	require.Equal(t, "0123", out.Output[0].Stdout)
	require.Empty(t, out.Output[0].Stderr)
	_, out = run(t, ts, Name, map[string]any{"commands": cmds, "max_output_length": 14})
	require.Equal(t, "0123456789\n", out.Output[0].Stdout)
	require.Equal(t, "abc", out.Output[0].Stderr)
	// Characters, not bytes.
	_, out = run(t, ts, Name, map[string]any{"commands": []string{"echo héllo"}, "max_output_length": 2})
	require.Equal(t, "hé", out.Output[0].Stdout)
}

func TestRejections(t *testing.T) {
	_, ts := newSet(t, "")
	for _, args := range []map[string]any{
		{"commands": []string{}},
		{"commands": []string{"true"}, "timeout_ms": -1},
		{"commands": []string{"true"}, "max_output_length": -1},
		{"commands": "echo hi"},
	} {
		obs, _ := run(t, ts, Name, args)
		require.True(t, obs.IsError, "%v", args)
	}
	_, out := run(t, ts, Name, map[string]any{"commands": []string{"  "}})
	require.Equal(t, 1, exit(t, out.Output[0]))
	require.Equal(t, "empty command", out.Output[0].Stderr)
}

func TestHeredocAndComment(t *testing.T) {
	_, ts := newSet(t, "")
	_, out := run(t, ts, Name, map[string]any{"commands": []string{"cat <<'EOF'\n$HOME stays\nEOF", "echo x # a comment"}})
	require.Equal(t, "$HOME stays\n", out.Output[0].Stdout)
	require.Equal(t, "x\n", out.Output[1].Stdout)
}

func TestSharedWithTerminal(t *testing.T) {
	dir, ts := newSet(t, `{"terminal": true}`)
	_, ok := ts.Lookup(bash.Name)
	require.True(t, ok)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	obs, err := ts.Call(context.Background(), bash.Name, json.RawMessage(`{"command": "cd d && export FROM_TERMINAL=yes"}`))
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())
	_, out := run(t, ts, Name, map[string]any{"commands": []string{"pwd; echo $FROM_TERMINAL"}})
	require.Equal(t, filepath.Join(dir, "d")+"\nyes\n", out.Output[0].Stdout)
}

func TestLocalShellArgv(t *testing.T) {
	dir, ts := newSet(t, `{"local_shell": true}`)
	require.NoError(t, os.Mkdir(filepath.Join(dir, "w"), 0o755))
	obs, out := run(t, ts, LocalName, map[string]any{
		"command":           []string{"sh", "-c", `printf '%s|' "$0" "$@"; echo "$LS_VAR"; pwd; echo oops >&2; exit 3`, "a b", "*", "$HOME"},
		"working_directory": "w",
		"env":               map[string]string{"LS_VAR": "v"},
	})
	require.False(t, obs.IsError, obs.Text())
	r := out.Output[0]
	require.Equal(t, "a b|*|$HOME|v\n"+filepath.Join(dir, "w")+"\n", r.Stdout, "no splitting, no globbing, no expansion")
	require.Equal(t, "oops\n", r.Stderr)
	require.Equal(t, 3, exit(t, r))

	_, out = run(t, ts, LocalName, map[string]any{"command": []string{"sleep", "30"}, "timeout_ms": 200})
	require.Equal(t, OutcomeTimeout, out.Output[0].Outcome.Type)

	_, out = run(t, ts, LocalName, map[string]any{"command": []string{"/no/such/program"}})
	require.Equal(t, 1, exit(t, out.Output[0]))
	require.Contains(t, out.Output[0].Stderr, "no such file")

	_, out = run(t, ts, LocalName, map[string]any{"command": []string{"true"}, "user": "somebody-else"})
	require.Equal(t, 1, exit(t, out.Output[0]))
	require.Contains(t, out.Output[0].Stderr, "cannot run as")

	_, out = run(t, ts, LocalName, map[string]any{"command": []string{}})
	require.Equal(t, 1, exit(t, out.Output[0]))
}

func TestFactoryParams(t *testing.T) {
	_, err := Factory(tools.Env{Workspace: t.TempDir()}, json.RawMessage(`{"nope": 1}`))
	require.Error(t, err)
	d := Definition("/workspace")
	require.Contains(t, d.Description, "/workspace")
	b, err := json.Marshal(d.InputSchema)
	require.NoError(t, err)
	require.Contains(t, string(b), `"commands"`)
}

func TestExitEndsTheShellNotTheCall(t *testing.T) {
	dir, ts := newSet(t, "")
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	_, out := run(t, ts, Name, map[string]any{"commands": []string{"cd sub", "exit 3", "pwd"}})
	require.Len(t, out.Output, 3)
	require.Equal(t, 3, exit(t, out.Output[1]))
	require.Equal(t, dir+"\n", out.Output[2].Stdout, "a fresh shell in the start folder")
}
