package bash

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/tools"
)

// TestMain checks for goroutine leaks. Set SANDBOXD_TEST_BUSYBOX to a
// busybox binary to run the shell tests with busybox ash as well (the sh of
// minimal images).
func TestMain(m *testing.M) {
	var opts []goleak.Option
	if bb := os.Getenv("SANDBOXD_TEST_BUSYBOX"); bb != "" {
		dir, err := os.MkdirTemp("", "busybox-sh-")
		if err != nil {
			panic(err)
		}
		if err := os.Symlink(bb, filepath.Join(dir, "sh")); err != nil {
			panic(err)
		}
		shells = append(shells, filepath.Join(dir, "sh"))
		opts = append(opts, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
	}
	goleak.VerifyTestMain(m, opts...)
}

// shells are the flavours every behaviour test runs with: bash, and the
// POSIX sh fallback (dash or busybox where /bin/sh is one).
var shells = []string{"bash", "sh"}

func shellName(shell string) string {
	if strings.Contains(shell, "busybox") {
		return "busybox"
	}
	return shell
}

// testOptions keeps timeouts short so the suite stays fast.
func testOptions(t testing.TB, shell string) Options {
	return Options{
		Dir:         t.TempDir(),
		StateDir:    filepath.Join(t.TempDir(), "state"), // made by NewExecutor
		Shell:       shell,
		SoftTimeout: time.Second,
		MaxWait:     20 * time.Second,
	}
}

func newExec(t testing.TB, opts Options) *Executor {
	t.Helper()
	e, err := NewExecutor(opts)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	return e
}

// do runs an action and returns its text and structured output.
func do(t testing.TB, e *Executor, a Action) (string, Output, *tools.Observation) {
	t.Helper()
	obs, err := e.Call(context.Background(), a)
	require.NoError(t, err)
	require.NotNil(t, obs)
	out, _ := obs.Structured.(Output)
	return obs.Text(), out, obs
}

func cmd(c string) Action { return Action{Command: c} }

func input(c string) Action { return Action{Command: c, IsInput: true} }

func withTimeout(c string, seconds float64) Action { return Action{Command: c, Timeout: &seconds} }

// body is the command output without the bracketed trailer lines.
func body(text string) string {
	for _, trailer := range []string{"\n[The command", "[The command", "\n[Current working directory", "\n[The shell exited"} {
		if i := strings.Index(text, trailer); i >= 0 {
			text = text[:i]
		}
	}
	return text
}
