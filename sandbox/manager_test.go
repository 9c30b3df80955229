package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/tools"
)

func TestMain(m *testing.M) {
	slog.SetDefault(testLogger())
	goleak.VerifyTestMain(m)
}

// Every test of the Manager runs in a synctest bubble: the fake runtime is
// in-process, so the reaper's ticks, refill backoffs, health pings and the
// echo tool's sleeps all run on the bubble's fake clock, which jumps ahead
// as soon as every goroutine of the bubble waits. No wall-clock time passes.

// advance lets d pass on the bubble's clock (the sleep ends at once on the
// wall clock, when everything else waits too) and then lets what the timers
// woke run until it blocks again.
func advance(d time.Duration) {
	time.Sleep(d)
	synctest.Wait()
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// testReapInterval is the test managers' ReapInterval: idle and health
// checks every 20 ms of the bubble's clock.
const testReapInterval = 20 * time.Millisecond

func newTestManager(t *testing.T, rt Runtime, opts ManagerOptions) *Manager {
	t.Helper()
	opts.Defaults.Image = "test-image"
	if opts.ReapInterval == 0 {
		opts.ReapInterval = testReapInterval
	}
	if opts.Logger == nil {
		opts.Logger = testLogger()
	}
	m, err := NewManager(context.Background(), rt, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		assert.NoError(t, m.Shutdown(ctx, false))
	})
	return m
}

func echo(t *testing.T, s *Session, text string) string {
	t.Helper()
	obs, err := s.Call(context.Background(), "echo", json.RawMessage(`{"text":"`+text+`"}`), nil)
	require.NoError(t, err)
	return obs.Text()
}

func TestCreateCallClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{Env: map[string]string{"X": "1"}})
		require.NoError(t, err)
		assert.Equal(t, StateReady, s.State())
		assert.Equal(t, "test-image", s.Options().Image)
		assert.Equal(t, "hello", echo(t, s, "hello"))

		defs, err := s.Tools(context.Background())
		require.NoError(t, err)
		require.Len(t, defs, 1)
		assert.Equal(t, "echo", defs[0].Name)

		got, err := m.Get(s.ID())
		require.NoError(t, err)
		assert.Same(t, s, got)
		assert.Len(t, m.List(), 1)

		require.NoError(t, m.Close(context.Background(), s.ID()))
		assert.Equal(t, StateClosed, s.State())
		assert.Zero(t, rt.count())
		_, err = m.Get(s.ID())
		require.ErrorIs(t, err, ErrNotFound)
		_, err = s.Call(context.Background(), "echo", nil, nil)
		require.ErrorIs(t, err, ErrClosed)
		select {
		case <-s.Done():
		default:
			t.Fatal("Done not closed after Close")
		}
	})
}

// The runtime is given the agent's command line, built from the resolved
// options, and the session's labels.
func TestStartSpecCarriesAgentCommand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{Tools: []tools.Spec{{Name: "grep"}}})
		require.NoError(t, err)
		b, err := rt.box(s.ID())
		require.NoError(t, err)
		want, err := AgentCommand(s.Options())
		require.NoError(t, err)
		assert.Equal(t, want, b.spec.Command)
		assert.Contains(t, b.spec.Command, "--tools", "the session's tools go to the agent's command line")
		assert.Equal(t, s.ID(), b.spec.Labels[LabelSession])
		assert.False(t, b.spec.Pooled)
	})
}

func TestCreateRejectsInvalidOptions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		_, err := m.Create(context.Background(), SessionOptions{User: "0"})
		require.ErrorIs(t, err, ErrInvalidOptions)
		assert.Zero(t, rt.starts.Load())
	})
}

func TestCloseIdempotentConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = s.Close(context.Background()) }()
		}
		wg.Wait()
		for _, err := range errs {
			require.NoError(t, err)
		}
		require.NoError(t, s.Close(context.Background()), "a later Close is a no-op")
		rt.mu.Lock()
		assert.Equal(t, []string{s.ID()}, rt.removed, "one teardown")
		rt.mu.Unlock()
	})
}

func TestConcurrentCallsOverlap(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		const n, sleep = 10, 300 * time.Millisecond
		start := time.Now()
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				obs, err := s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x","sleep_ms":300}`), nil)
				assert.NoError(t, err)
				assert.Equal(t, "x", obs.Text())
			}()
		}
		wg.Wait()
		// The bubble's clock moves only while every goroutine waits: calls
		// that overlap all end after one sleep, one after another after n.
		assert.Equal(t, sleep, time.Since(start), "calls ran one after another")
	})
}

func TestKilledSandboxFailsSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)

		inflight := make(chan error, 1)
		go func() {
			_, err := s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x","sleep_ms":10000}`), nil)
			inflight <- err
		}()
		synctest.Wait() // the call is running in the agent
		rt.kill(s.ID())

		select {
		case <-s.Done():
		case <-time.After(time.Minute):
			t.Fatal("session not failed after its sandbox was killed")
		}
		assert.Equal(t, StateFailed, s.State())
		require.ErrorIs(t, s.Err(), ErrFailed)
		assert.Contains(t, s.Err().Error(), "SIGKILL")

		select {
		case err := <-inflight:
			require.ErrorIs(t, err, ErrFailed, "the in-flight call reports the failure")
		case <-time.After(time.Minute):
			t.Fatal("in-flight call hangs")
		}
		start := time.Now()
		_, err = s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x"}`), nil)
		require.ErrorIs(t, err, ErrFailed)
		// Had the call waited for anything (an answer, a timeout), the
		// bubble's clock would have moved.
		assert.Equal(t, start, time.Now(), "calls on a failed session fail fast")

		require.NoError(t, s.Close(context.Background()))
		assert.Zero(t, rt.count())
		assert.ErrorIs(t, s.Err(), ErrFailed, "Close keeps the failure")
	})
}

func TestBrokenStreamReconnects(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		first := s.currentClient()
		rt.breakStream(s.ID())
		synctest.Wait()
		require.NotSame(t, first, s.currentClient(), "reconnected")
		assert.Equal(t, StateReady, s.State())
		assert.Equal(t, "again", echo(t, s, "again"))
	})
}

// The engine away when a stream breaks (restarting): the session waits for
// it, its calls failing fast saying so, and reconnects when it is back.
func TestBrokenStreamWaitsForTheEngine(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{EngineOutage: time.Minute})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		rt.away.Store(true)
		rt.breakStream(s.ID())
		advance(30 * time.Second)
		assert.Equal(t, StateReady, s.State(), "not failed while the engine may come back")
		start := time.Now()
		_, err = s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x"}`), nil)
		require.ErrorIs(t, err, ErrReconnecting)
		require.ErrorContains(t, err, "engine does not answer")
		assert.Equal(t, start, time.Now(), "calls fail fast meanwhile")
		rt.away.Store(false)
		advance(2 * time.Second)
		assert.Equal(t, "back", echo(t, s, "back"))
	})
}

// The engine away longer than EngineOutage: the session fails saying so;
// its sandbox, which Close cannot remove then, is removed once the engine
// is back.
func TestEngineAwayTooLongFailsAndRemovesLater(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{EngineOutage: time.Second})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		rt.away.Store(true)
		rt.breakStream(s.ID())
		advance(3 * time.Second)
		require.Equal(t, StateFailed, s.State())
		require.ErrorContains(t, s.Err(), "container engine did not answer for 1s")
		require.Error(t, s.Close(context.Background()), "the engine cannot remove it now")
		assert.Equal(t, 1, rt.count())
		rt.away.Store(false)
		advance(5 * time.Second)
		assert.Zero(t, rt.count(), "removed once the engine is back")
	})
}

func TestIdleReaper(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		idle, err := m.Create(context.Background(), SessionOptions{IdleTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		busy, err := m.Create(context.Background(), SessionOptions{IdleTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		keep, err := m.Create(context.Background(), SessionOptions{IdleTimeout: NoIdleTimeout})
		require.NoError(t, err)

		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := busy.Call(context.Background(), "echo", json.RawMessage(`{"text":"x","sleep_ms":600}`), nil)
			assert.NoError(t, err, "a running call keeps its session alive")
		}()
		advance(200*time.Millisecond - time.Nanosecond)
		assert.Equal(t, StateReady, idle.State(), "not idle for its timeout yet")
		advance(testReapInterval) // the reaper's next tick
		select {
		case <-idle.Done():
		default:
			t.Fatal("idle session not reaped at the first tick after its idle timeout")
		}
		assert.Equal(t, StateClosed, idle.State())
		assert.Equal(t, "idle timeout: no call for 200ms", idle.EndReason())
		assert.Equal(t, StateReady, busy.State(), "a running call keeps its session alive")
		<-done
		select {
		case <-busy.Done():
		case <-time.After(time.Minute):
			t.Fatal("busy session not reaped once its call ended")
		}
		synctest.Wait()
		assert.Equal(t, StateClosed, busy.State())
		assert.Equal(t, StateReady, keep.State())
		assert.Empty(t, keep.EndReason())
		assert.Equal(t, 1, rt.count())
		require.NoError(t, keep.Close(context.Background()))
		assert.Empty(t, keep.EndReason(), "closed by its owner")
	})
}

// A session's idle clock starts when it is ready: a start that took longer
// than its idle timeout does not get it reaped before its first call.
func TestIdleClockStartsWhenReady(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.onStart = func(Spec) { time.Sleep(time.Second) } // a slow engine
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{IdleTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		advance(testReapInterval)
		assert.Equal(t, StateReady, s.State(), "not reaped for the time its start took")
		advance(200 * time.Millisecond)
		assert.Equal(t, StateClosed, s.State(), "reaped once idle for its timeout after it was ready")
	})
}

func TestWarmPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 2}}})
		synctest.Wait()
		require.Equal(t, 2, rt.count())
		assert.Empty(t, m.List(), "pooled sandboxes are not sessions")
		require.Equal(t, 2, m.Pools()[0].Ready)
		p := m.pools[mustKey(t, m, SessionOptions{})]
		p.mu.Lock()
		warm := []string{p.ready[0].s.ID(), p.ready[1].s.ID()}
		p.mu.Unlock()

		start := time.Now()
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		assert.Contains(t, warm, s.ID(), "handed out from the pool, not started cold")
		assert.Equal(t, start, time.Now(), "the hand-out waited for nothing (the bubble's clock did not move)")
		assert.Equal(t, "warm", echo(t, s, "warm"))
		assert.Len(t, m.List(), 1)
		synctest.Wait()
		assert.Equal(t, 3, rt.count(), "refilled")
		rt.mu.Lock()
		assert.True(t, rt.boxes[s.ID()].pooled, "the claim waits for hand-outs to pause")
		rt.mu.Unlock()
		time.Sleep(claimQuiet)
		synctest.Wait()
		rt.mu.Lock()
		assert.False(t, rt.boxes[s.ID()].pooled, "claimed")
		rt.mu.Unlock()

		// Other options start cold.
		before := rt.starts.Load()
		other, err := m.Create(context.Background(), SessionOptions{Env: map[string]string{"A": "1"}})
		require.NoError(t, err)
		assert.Equal(t, before+1, rt.starts.Load())
		require.NoError(t, other.Close(context.Background()))

		// A pooled sandbox that dies is replaced.
		p.mu.Lock()
		victim := p.ready[0].s
		p.mu.Unlock()
		rt.kill(victim.ID())
		synctest.Wait()
		assert.Equal(t, StateClosed, victim.State())
		assert.Equal(t, 2, p.stat().Ready)
	})
}

// An API that owns its sessions' end (MCP) creates with the options a pool
// holds and its own idle timeout: it is handed a pooled sandbox, and the
// idle timeout in force is its own, on the pooled path and the cold one.
func TestCreateWithIdleTimeoutDrawsFromPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		// Counted at Start, by kind: the pool's refill after the hand-out
		// may start at any moment, a cold start may not.
		var coldStarts atomic.Int64
		rt.onStart = func(spec Spec) {
			if !spec.Pooled {
				coldStarts.Add(1)
			}
		}
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 1, Options: SessionOptions{IdleTimeout: time.Second}}}})
		synctest.Wait()
		p := m.pools[mustKey(t, m, SessionOptions{IdleTimeout: time.Second})]
		require.NotNil(t, p)
		p.mu.Lock()
		warm := p.ready[0].s.ID()
		p.mu.Unlock()

		kept, err := m.CreateWith(context.Background(), SessionOptions{IdleTimeout: time.Second}, CreateOptions{IdleTimeout: NoIdleTimeout})
		require.NoError(t, err)
		assert.Equal(t, warm, kept.ID(), "handed out from the pool")
		assert.Zero(t, coldStarts.Load(), "nothing started cold")
		assert.Equal(t, NoIdleTimeout, kept.Options().IdleTimeout, "the create's idle timeout is in force")
		synctest.Wait() // the refill
		assert.Zero(t, coldStarts.Load(), "after the refill too: nothing started cold")
		cold, err := m.CreateWith(context.Background(), SessionOptions{Env: map[string]string{"A": "1"}}, CreateOptions{IdleTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		assert.Equal(t, 200*time.Millisecond, cold.Options().IdleTimeout)

		advance(200*time.Millisecond + testReapInterval)
		assert.Equal(t, StateClosed, cold.State(), "reaped at its create's idle timeout, not the default 30 minutes")
		advance(2 * time.Second)
		assert.Equal(t, StateReady, kept.State(), "never idles out, though its options say 1s")

		_, err = m.CreateWith(context.Background(), SessionOptions{}, CreateOptions{IdleTimeout: time.Millisecond})
		require.ErrorIs(t, err, ErrInvalidOptions)
		require.NoError(t, kept.Close(context.Background()))
	})
}

// mustKey is the id of the profile-less pool of o.
func mustKey(t *testing.T, m *Manager, o SessionOptions) string {
	r, err := m.Resolve(o)
	require.NoError(t, err)
	return poolID("", false, r.Key())
}

func TestPoolBacksOffOnFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startErr = errors.New("engine on fire")
		newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 1}}})
		// Each failure doubles the wait before the next refill (1 s, 2 s,
		// 4 s ...) up to maxPoolBackoff: starts at 0, 1, 3, 7, 15, 31, 61
		// and then every 30 s. The clock is read half a second after each.
		start := time.Now()
		for _, want := range []struct {
			at     time.Duration
			starts int64
		}{
			{0, 1}, {500 * time.Millisecond, 1}, {1500 * time.Millisecond, 2}, {2500 * time.Millisecond, 2},
			{3500 * time.Millisecond, 3}, {6500 * time.Millisecond, 3}, {7500 * time.Millisecond, 4},
			{15500 * time.Millisecond, 5}, {31500 * time.Millisecond, 6}, {60500 * time.Millisecond, 6},
			{61500 * time.Millisecond, 7}, {91500 * time.Millisecond, 8}, {121500 * time.Millisecond, 9},
		} {
			advance(want.at - time.Since(start))
			assert.Equal(t, want.starts, rt.starts.Load(), "refills back off: starts by %v", want.at)
		}
	})
}

func TestStartFailureLeavesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startErr = errors.New("no such image")
		m := newTestManager(t, rt, ManagerOptions{})
		_, err := m.Create(context.Background(), SessionOptions{})
		require.ErrorIs(t, err, ErrStart)
		assert.Contains(t, err.Error(), "no such image")
		assert.Empty(t, m.List())
	})
}

func TestCloseDuringStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startHold = make(chan struct{})
		m := newTestManager(t, rt, ManagerOptions{})
		res := make(chan error, 1)
		go func() {
			_, err := m.Create(context.Background(), SessionOptions{})
			res <- err
		}()
		synctest.Wait() // the create waits in Start
		require.Len(t, m.List(), 1)
		s := m.List()[0]
		assert.Equal(t, StateStarting, s.State())
		_, err := s.Call(context.Background(), "echo", nil, nil)
		require.ErrorIs(t, err, ErrNotReady)
		require.NoError(t, s.Close(context.Background()))
		require.Error(t, <-res)
		assert.Equal(t, StateClosed, s.State())
		assert.Zero(t, rt.count())
	})
}

func TestRestartAdoptsLiveSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		t.Cleanup(rt.stopAll)
		key := func(o SessionOptions) string { r, _ := o.Resolve(SessionOptions{Image: "test-image"}); return r.Key() }

		m1, err := NewManager(context.Background(), rt, ManagerOptions{
			Defaults: SessionOptions{Image: "test-image"}, Logger: testLogger(),
			Pools: []PoolOptions{{Size: 1, Options: SessionOptions{Env: map[string]string{"P": "1"}}}},
		})
		require.NoError(t, err)
		live, err := m1.Create(context.Background(), SessionOptions{IdleTimeout: time.Hour})
		require.NoError(t, err)
		dead, err := m1.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		synctest.Wait() // the pool's sandbox started
		require.Equal(t, 3, rt.count())
		// Shutdown closes the pool; keep a pooled box by faking one alive.
		require.NoError(t, m1.Shutdown(context.Background(), true))
		assert.Equal(t, StateClosed, live.State())
		assert.Equal(t, 2, rt.count(), "kept sessions stay, the pool is removed")
		rt.kill(dead.ID())

		m2 := newTestManager(t, rt, ManagerOptions{})
		got, err := m2.Get(live.ID())
		require.NoError(t, err)
		assert.Equal(t, StateReady, got.State())
		assert.Equal(t, time.Hour, got.Options().IdleTimeout, "options come back from the label")
		assert.Equal(t, "adopted", echo(t, got, "adopted"))
		_, err = m2.Get(dead.ID())
		require.ErrorIs(t, err, ErrNotFound)
		assert.Equal(t, 1, rt.count(), "the dead sandbox was removed")
		_ = key
	})
}

// A session handed out from the pool just before a keep-sessions Shutdown
// is still claimed, so the next manager adopts it instead of recycling it as
// a pooled sandbox (which lost the session and its state).
func TestShutdownRightAfterHandOutKeepsClaim(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.claimWait = 50 * time.Millisecond
		t.Cleanup(rt.stopAll)
		opts := ManagerOptions{Defaults: SessionOptions{Image: "test-image"}, Logger: testLogger(),
			Pools: []PoolOptions{{Size: 1}}}
		m1, err := NewManager(context.Background(), rt, opts)
		require.NoError(t, err)
		synctest.Wait()
		require.Equal(t, 1, m1.Pools()[0].Ready)
		s, err := m1.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		require.NoError(t, m1.Shutdown(context.Background(), true))

		m2 := newTestManager(t, rt, ManagerOptions{})
		got, err := m2.Get(s.ID())
		require.NoError(t, err, "the handed-out session is adopted")
		assert.Equal(t, "still here", echo(t, got, "still here"))
	})
}

func TestReclaimReturnsPooledToPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		t.Cleanup(rt.stopAll)
		opts := ManagerOptions{Pools: []PoolOptions{{Size: 1}}}
		// A pooled sandbox left by a crashed daemon: start one by hand.
		o, err := SessionOptions{}.Resolve(SessionOptions{Image: "test-image"})
		require.NoError(t, err)
		_, err = rt.Start(context.Background(), Spec{SessionID: "pooled-1", Options: o, Pooled: true,
			Labels: SessionLabels("pooled-1", o, poolID("", false, o.Key()), time.Now())})
		require.NoError(t, err)
		stray := SessionOptions{Env: map[string]string{"Z": "1"}}
		so, _ := stray.Resolve(SessionOptions{Image: "test-image"})
		_, err = rt.Start(context.Background(), Spec{SessionID: "pooled-2", Options: so, Pooled: true,
			Labels: SessionLabels("pooled-2", so, poolID("", false, so.Key()), time.Now())})
		require.NoError(t, err)

		m := newTestManager(t, rt, opts)
		assert.Empty(t, m.List())
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		assert.Equal(t, "pooled-1", s.ID(), "the adopted warm sandbox is handed out")
		_, err = rt.box("pooled-2")
		assert.ErrorIs(t, err, ErrNotFound, "a pooled sandbox no pool wants is removed")
	})
}

// A warm sandbox made with outdated settings (say, before a seccomp
// change) is never handed out after a restart; a claimed one is adopted,
// as its session still runs.
func TestReclaimSkipsOutdated(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		t.Cleanup(rt.stopAll)
		o, err := SessionOptions{}.Resolve(SessionOptions{Image: "test-image"})
		require.NoError(t, err)
		for _, id := range []string{"pooled-old", "claimed-old"} {
			pooled := id == "pooled-old"
			key := ""
			if pooled {
				key = poolID("", false, o.Key())
			}
			_, err = rt.Start(context.Background(), Spec{SessionID: id, Options: o, Pooled: pooled, Labels: SessionLabels(id, o, key, time.Now())})
			require.NoError(t, err)
			rt.outdate(id, "older seccomp profile")
		}

		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 1}}})
		_, err = rt.box("pooled-old")
		require.ErrorIs(t, err, ErrNotFound, "removed, not pooled")
		got, err := m.Get("claimed-old")
		require.NoError(t, err, "adopted")
		assert.Equal(t, StateReady, got.State())
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		assert.NotEqual(t, "pooled-old", s.ID())
	})
}

func TestShutdownClosesEverything(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m, err := NewManager(context.Background(), rt, ManagerOptions{
			Defaults: SessionOptions{Image: "test-image"}, Logger: testLogger(), Pools: []PoolOptions{{Size: 2}},
		})
		require.NoError(t, err)
		for range 3 {
			_, err := m.Create(context.Background(), SessionOptions{Cwd: "/tmp"})
			require.NoError(t, err)
		}
		require.NoError(t, m.Shutdown(context.Background(), false))
		assert.Zero(t, rt.count())
		_, err = m.Create(context.Background(), SessionOptions{})
		require.ErrorIs(t, err, ErrManagerClosed)
		assert.NoError(t, m.Shutdown(context.Background(), false), "idempotent")
	})
}

// frozenConn stops delivering the agent's answers while frozen is set, as
// a stopped (SIGSTOP) agent would; Close still ends it.
type frozenConn struct {
	io.ReadWriteCloser
	frozen *atomic.Bool
	closed chan struct{}
	once   sync.Once
}

func (c *frozenConn) Read(p []byte) (int, error) {
	n, err := c.ReadWriteCloser.Read(p)
	for c.frozen.Load() { // what arrived meanwhile is held back
		select {
		case <-c.closed:
			return 0, io.ErrClosedPipe
		case <-time.After(5 * time.Millisecond):
		}
	}
	return n, err
}

func (c *frozenConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.ReadWriteCloser.Close()
}

// An agent that stops answering fails its session within the health
// timeout: a call waiting on it returns the reason instead of hanging.
func TestStoppedAgentFailsTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		var frozen atomic.Bool
		m := newTestManager(t, rt, ManagerOptions{HealthTimeout: 300 * time.Millisecond, Dial: func(conn io.ReadWriteCloser, log *slog.Logger) AgentClient {
			return DialAgent(&frozenConn{ReadWriteCloser: conn, frozen: &frozen, closed: make(chan struct{})}, log)
		}})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = s.Call(ctx, "echo", json.RawMessage(`{"text":"x"}`), nil)
		require.NoError(t, err)
		advance(5 * testReapInterval) // five health pings pass meanwhile
		require.Equal(t, StateReady, s.State())

		frozen.Store(true)
		_, err = s.Call(ctx, "echo", json.RawMessage(`{"text":"y"}`), nil)
		require.ErrorIs(t, err, ErrFailed)
		assert.Contains(t, err.Error(), "did not answer a ping within 300ms")
		require.NoError(t, ctx.Err(), "the call hung until the test's deadline")
		assert.Contains(t, s.EndReason(), "did not answer a ping")
		require.NoError(t, s.Close(context.Background()))
		assert.Equal(t, 0, rt.count())
	})
}
