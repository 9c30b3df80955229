package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// A paused session is frozen by the engine: its background job writes
// nothing while it is paused, calls are refused, neither the idle timeout
// nor the health ping ends it; resumed, the same processes run on with
// their state. Closing a paused session leaves nothing behind.
func TestPauseFreezesAndResumeThaws(t *testing.T) {
	t.Parallel()
	// The ping would fail a frozen agent within 0.5 s if it were pinged.
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{HealthTimeout: 500 * time.Millisecond})
	ctx := ctxT(t)
	s, err := m.Create(ctx, sandbox.SessionOptions{IdleTimeout: 2 * time.Second})
	require.NoError(t, err)
	sh(t, s, `export KEEP=kept; (while :; do echo "${EPOCHREALTIME/./}" >> /workspace/ticks; sleep 0.05; done) >/dev/null 2>&1 & echo $! > /workspace/pid`)
	pid := strings.Fields(sh(t, s, "sleep 0.3; cat /workspace/pid"))[0]

	require.NoError(t, s.Pause(ctx))
	frozeAt := time.Now()
	assert.True(t, containerOf(t, s.ID()).State.Paused, "the engine says paused")
	assert.Equal(t, sandbox.StatePaused, s.State())
	_, err = s.Call(ctx, "terminal", []byte(`{"command":"echo no"}`), nil)
	require.ErrorIs(t, err, sandbox.ErrPaused)

	// Past its idle timeout and many health ticks.
	time.Sleep(3 * time.Second)
	assert.Equal(t, sandbox.StatePaused, s.State(), "neither idle nor pinged while paused: %v", s.Err())
	thawAt := time.Now()
	require.NoError(t, s.Resume(ctx))
	assert.False(t, containerOf(t, s.ID()).State.Paused)

	out := sh(t, s, `echo "KEEP=$KEEP"; kill -0 `+pid+` && echo alive; sleep 0.3; cat /workspace/ticks`)
	assert.Contains(t, out, "KEEP=kept", "the shell's state survived")
	assert.Contains(t, out, "alive", "the same background job runs on")
	var during, after int
	for _, f := range strings.Fields(out) {
		us, err := strconv.ParseInt(f, 10, 64) // microseconds since the epoch
		if err != nil || us < 1e15 {
			continue
		}
		at := time.UnixMicro(us)
		switch {
		case at.After(frozeAt) && at.Before(thawAt):
			during++
		case at.After(thawAt):
			after++
		}
	}
	assert.Zero(t, during, "ticks written while paused")
	assert.NotZero(t, after, "the job ticks again after resume")

	// A paused session closes cleanly.
	require.NoError(t, s.Pause(ctx))
	require.NoError(t, s.Close(ctx))
	assert.Zero(t, sessionResources(t, s.ID()))
}

// A daemon that stops while a session is paused leaves it paused; the next
// one adopts it paused (the engine cannot exec in a frozen container) and
// its Resume reaches the agent again, the shell's state intact.
func TestRestartAdoptsPausedSession(t *testing.T) {
	rt := newRuntime(t)
	ctx := ctxT(t)
	m1, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: testImage, Runtime: e2eRuntime}, Logger: logger()})
	require.NoError(t, err)
	s1, err := m1.Create(ctx, sandbox.SessionOptions{IdleTimeout: time.Hour})
	require.NoError(t, err)
	sh(t, s1, "cd /tmp; export X=1")
	require.NoError(t, s1.Pause(ctx))
	require.NoError(t, m1.Shutdown(ctx, true)) // as if the daemon stopped
	assert.True(t, containerOf(t, s1.ID()).State.Paused, "left paused")

	m2 := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m2.Get(s1.ID())
	require.NoError(t, err, "the paused session is adopted")
	assert.Equal(t, sandbox.StatePaused, s.State())
	require.NoError(t, s.Resume(ctx))
	out := sh(t, s, "pwd; echo X=$X")
	assert.Contains(t, out, "/tmp")
	assert.Contains(t, out, "X=1", "shell state survived the restart and the pause")
	require.NoError(t, s.Close(ctx))
	assert.Zero(t, sessionResources(t, s.ID()))
}
