package bash

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
)

// A timeout too large for a time.Duration is capped, not overflowed into a
// negative one that returned at once while the command kept running.
func TestHugeTimeoutIsCapped(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	for _, sec := range []float64{1e10, 1e300} {
		text, out, obs := do(t, e, withTimeout("sleep 0.1; echo done", sec))
		assert.False(t, obs.IsError, text)
		assert.Equal(t, 0, out.ExitCode, text)
		assert.Contains(t, text, "done")
	}
	assert.Equal(t, MaxTimeout, timeoutDuration(1e300))
	assert.Equal(t, 1500*time.Millisecond, timeoutDuration(1.5))
}

// Input lines longer than a terminal passes on are refused, not cut.
func TestLongInputLineRefused(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	// wc prints nothing until its input ends: the calls before return on
	// their own timeout.
	text, out, _ := do(t, e, withTimeout("wc -c", 0.05))
	require.Equal(t, -1, out.ExitCode, text)
	text, _, obs := do(t, e, input(strings.Repeat("x", 5000)))
	assert.True(t, obs.IsError)
	assert.Contains(t, text, "5000 bytes")
	assert.Contains(t, text, "at most 4095")
	// A line that fits goes through whole, the refused one never arrived.
	_, out, _ = do(t, e, Action{Command: strings.Repeat("y", 4000), IsInput: true, Timeout: ptr(0.05)})
	require.Equal(t, -1, out.ExitCode)
	text, out, _ = do(t, e, input("C-d"))
	assert.Equal(t, 0, out.ExitCode, text)
	assert.Contains(t, body(text), "4001")
}

// A poll while another call waits on the running command returns after its
// own timeout with a clear message instead of waiting for the other call.
func TestPollWhileAnotherCallInFlightIsBounded(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	g := newGate(t)
	first := make(chan *tools.Observation, 1)
	go func() {
		obs, err := e.Call(context.Background(), withTimeout(g.wait()+"; echo finished", 10))
		assert.NoError(t, err)
		first <- obs
	}()
	require.Eventually(t, func() bool { return e.holder.Load() != nil }, time.Minute, time.Millisecond, "the first call holds the terminal")
	text, _, obs := do(t, e, Action{Command: "", Timeout: ptr(0.1)})
	assert.True(t, obs.IsError)
	assert.Contains(t, text, "Another terminal call is still in flight")
	assert.Contains(t, text, "this call waited 0.1 for it and did nothing")
	assert.Empty(t, first, "bounded by the poll's own timeout: the first call still waits at the gate")
	g.open(t)
	obs = <-first
	require.NotNil(t, obs)
	assert.Contains(t, obs.Text(), "finished")
}

// A command that takes away the prompt hook leaves the terminal waiting for
// a marker that never comes; the refusal says how to get out, and reset does.
func TestLostPromptHookPointsToReset(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	// No marker ever comes: the call returns on its timeout.
	do(t, e, withTimeout(`PROMPT_COMMAND='echo hook'`, 0.05))
	text, _, obs := do(t, e, cmd("echo next"))
	assert.True(t, obs.IsError, text)
	assert.Contains(t, text, "is NOT executed")
	assert.Contains(t, text, "set `reset` to `true`")
	do(t, e, Action{Command: "", Reset: true})
	text, out, _ := do(t, e, cmd("echo fresh"))
	assert.Equal(t, 0, out.ExitCode, text)
	assert.Contains(t, text, "fresh")
}

// A command sent right after the call in flight was cancelled runs once the
// cancelled call has stopped its command, instead of being refused as busy.
func TestCommandRightAfterCancelRuns(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		first := make(chan *tools.Observation, 1)
		go func() {
			obs, _ := e.Call(ctx, withTimeout("sleep 30", 60))
			first <- obs
		}()
		require.Eventually(t, func() bool { return e.holder.Load() != nil }, time.Minute, time.Millisecond)
		waitFor(t, e, "sleep runs", runs("sleep"))
		cancel()
		text, out, obs := do(t, e, cmd("echo after"))
		assert.False(t, obs.IsError, text)
		assert.Equal(t, 0, out.ExitCode, text)
		assert.Contains(t, body(text), "after")
		assert.Contains(t, (<-first).Text(), "interrupted")
	}
	// The cancel may come just after the next command (clients that send
	// it asynchronously): the command waits for it briefly.
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan *tools.Observation, 1)
	go func() {
		obs, _ := e.Call(ctx, withTimeout("sleep 30", 60))
		first <- obs
	}()
	require.Eventually(t, func() bool { return e.holder.Load() != nil }, time.Minute, time.Millisecond)
	waitFor(t, e, "sleep runs", runs("sleep"))
	time.AfterFunc(100*time.Millisecond, cancel)
	text, out, obs := do(t, e, cmd("echo late-cancel"))
	assert.False(t, obs.IsError, text)
	assert.Equal(t, 0, out.ExitCode, text)
	assert.Contains(t, (<-first).Text(), "interrupted")
	// A live call in flight still gets a new command refused.
	g := newGate(t)
	live := make(chan struct{})
	go func() {
		defer close(live)
		_, _ = e.Call(context.Background(), withTimeout(g.wait(), 60))
	}()
	require.Eventually(t, func() bool { return e.holder.Load() != nil }, time.Minute, time.Millisecond)
	text, _, obs = do(t, e, cmd("echo refused"))
	assert.True(t, obs.IsError, text)
	assert.Contains(t, text, "is NOT executed")
	g.open(t)
	<-live
}

// Processes that left the shell's session (setsid, a daemon's double fork)
// still end with reset and with Close: they carry the shell's tag.
func TestResetAndCloseEndDetachedProcesses(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	detached := func() int {
		pidFile := filepath.Join(t.TempDir(), "pid")
		// The command ends once the detached process wrote its pid.
		text, out, _ := do(t, e, cmd(`setsid sh -c 'echo $$ > `+pidFile+`; exec sleep 60' </dev/null >/dev/null 2>&1 & while [ ! -s `+pidFile+` ]; do sleep 0.01; done`))
		require.Equal(t, 0, out.ExitCode, text)
		text, _, _ = do(t, e, cmd(`cat `+pidFile))
		pid, err := strconv.Atoi(strings.TrimSpace(body(text)))
		require.NoError(t, err, text)
		require.True(t, processAlive(pid))
		state, sid, ok := procStat(pid)
		require.True(t, ok)
		require.NotEqual(t, e.sess.pid, sid, "the process left the shell's session (state %c)", state)
		return pid
	}
	pid := detached()
	do(t, e, Action{Command: "", Reset: true})
	assert.Eventually(t, func() bool { return !processAlive(pid) }, time.Minute, 10*time.Millisecond, "reset left a setsid process")
	pid = detached()
	require.NoError(t, e.Close())
	assert.False(t, processAlive(pid), "Close left a setsid process")
}
