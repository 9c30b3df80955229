package bash

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"golang.org/x/sys/unix"

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

// testOptions gives a soft timeout that a command meant to complete never
// meets, even on a loaded machine: no test waits for it. A test that wants
// a soft timeout makes that call with quickSoft (doSoft) and a command that
// is silent until the test lets it go on (gate), or for good.
func testOptions(t testing.TB, shell string) Options {
	return Options{
		Dir:         t.TempDir(),
		StateDir:    filepath.Join(t.TempDir(), "state"), // made by NewExecutor
		Shell:       shell,
		SoftTimeout: 5 * time.Second,
		MaxWait:     20 * time.Second,
	}
}

// quickSoft is the soft timeout of doSoft. Only the output a command
// printed before it went silent has to arrive within it.
const quickSoft = 200 * time.Millisecond

// doSoft runs an action with the soft timeout at quickSoft.
func doSoft(t testing.TB, e *Executor, a Action) (string, Output, *tools.Observation) {
	t.Helper()
	saved := e.opts.SoftTimeout
	e.opts.SoftTimeout = quickSoft
	defer func() { e.opts.SoftTimeout = saved }()
	return do(t, e, a)
}

// eventually waits until cond holds for the executor's shell session (with
// its lock held): an event of the shell, seen without a sleep of a guessed
// length. It may run on another goroutine than the test's.
func eventually(t testing.TB, e *Executor, what string, cond func(s *session) bool) bool {
	t.Helper()
	return assert.Eventually(t, func() bool {
		e.mu.Lock()
		s := e.sess
		e.mu.Unlock()
		if s == nil {
			return false
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return cond(s)
	}, time.Minute, time.Millisecond, what)
}

// waitFor is eventually on the test's goroutine: the test stops if the
// event never comes.
func waitFor(t testing.TB, e *Executor, what string, cond func(s *session) bool) {
	t.Helper()
	if !eventually(t, e, what, cond) {
		t.FailNow()
	}
}

// commandEnded: the running command's end (its prompt) has arrived and no
// call has taken it yet.
func commandEnded(s *session) bool { return s.done != nil }

// printed: text has arrived since the last call took the output.
func printed(text string) func(s *session) bool {
	return func(s *session) bool { return s.acc.Contains([]byte(text)) }
}

// runs: program owns the terminal, as the running command's foreground
// job. (Before its exec the job is a fork of the shell, which a signal may
// reach before it restored the default actions.)
func runs(program string) func(s *session) bool {
	return func(s *session) bool {
		pgrp, err := foregroundPgrp(s.master)
		if err != nil || pgrp <= 0 || pgrp == s.pid {
			return false
		}
		comm, err := os.ReadFile("/proc/" + strconv.Itoa(pgrp) + "/comm")
		return err == nil && strings.TrimSpace(string(comm)) == program
	}
}

// gate is a named pipe that a command waits at (gate.wait) until the test
// opens it: the test, not a sleep, decides when the command goes on.
type gate string

func newGate(t testing.TB) gate {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gate")
	require.NoError(t, unix.Mkfifo(p, 0o600))
	return gate(p)
}

// wait is shell code that blocks until the gate opens.
func (g gate) wait() string { return "read -r _gate <" + shellQuote(string(g)) }

// open lets the command waiting at the gate go on (it may not have reached
// the gate yet: open waits for it). It may run on another goroutine than
// the test's.
func (g gate) open(t testing.TB) {
	t.Helper()
	opened := make(chan error, 1)
	go func() {
		// Blocks until a reader opens the pipe: the command at the gate.
		f, err := os.OpenFile(string(g), os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString("\n")
			err = errors.Join(err, f.Close())
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil { // (t.Errorf: open may run on another goroutine)
			t.Errorf("gate %s: %v", g, err)
		}
	case <-time.After(time.Minute):
		t.Errorf("no command came to gate %s", g)
		// Be the reader, so the open above returns.
		if r, err := os.OpenFile(string(g), os.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			if err := <-opened; err != nil { // the test failed already; this only unblocks the writer
				t.Log(err)
			}
			_ = r.Close()
		}
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
