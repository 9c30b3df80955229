package bash

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The terminal's processes are the OOM killer's first choice; the process
// that runs the executor (the agent) keeps its own score.
func TestCommandsPreferredByOOMKiller(t *testing.T) {
	t.Parallel()
	own, err := os.ReadFile("/proc/self/oom_score_adj")
	if err != nil {
		t.Skip("no /proc/self/oom_score_adj:", err)
	}
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			text, out, _ := do(t, e, cmd("cat /proc/$$/oom_score_adj; cat /proc/self/oom_score_adj"))
			require.Equal(t, 0, out.ExitCode, text)
			assert.Equal(t, "1000\n1000", strings.TrimSpace(body(text)), "the shell and its commands")
			after, err := os.ReadFile("/proc/self/oom_score_adj")
			require.NoError(t, err)
			assert.Equal(t, string(own), string(after), "the executor's own process is unchanged")
		})
	}
}

// A fork bomb names its function `:`; the prompt plumbing must not call a
// command that a user function can replace, or every later command would
// run the bomb (or whatever else the function does).
func TestRedefinedColonDoesNotReachPlumbing(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	text, out, _ := do(t, e, cmd(":() { echo shadowed; }"))
	require.Equal(t, 0, out.ExitCode, text)
	for range 2 {
		text, out, _ = do(t, e, cmd("echo hi"))
		assert.Equal(t, 0, out.ExitCode, text)
		assert.Equal(t, "hi", strings.TrimSpace(body(text)))
		assert.NotContains(t, text, "shadowed")
	}
	text, _, _ = do(t, e, cmd(":"))
	assert.Equal(t, "shadowed", strings.TrimSpace(body(text)), "the user's function still works when called")
}
