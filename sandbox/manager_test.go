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
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	slog.SetDefault(testLogger())
	goleak.VerifyTestMain(m)
}

func testLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func newTestManager(t *testing.T, rt Runtime, opts ManagerOptions) *Manager {
	t.Helper()
	opts.Defaults.Image = "test-image"
	if opts.ReapInterval == 0 {
		opts.ReapInterval = 20 * time.Millisecond
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
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = s.Call(context.Background(), "echo", nil, nil)
	assert.ErrorIs(t, err, ErrClosed)
	select {
	case <-s.Done():
	default:
		t.Fatal("Done not closed after Close")
	}
}

// The runtime is given the agent's command line, built from the resolved
// options, and the session's labels.
func TestStartSpecCarriesAgentCommand(t *testing.T) {
	rt := newFakeRuntime(t)
	m := newTestManager(t, rt, ManagerOptions{})
	s, err := m.Create(context.Background(), SessionOptions{Cwd: "/tmp"})
	require.NoError(t, err)
	b, err := rt.box(s.ID())
	require.NoError(t, err)
	want, err := AgentCommand(s.Options())
	require.NoError(t, err)
	assert.Equal(t, want, b.spec.Command)
	assert.Contains(t, b.spec.Command, "--tools", "a cwd other than the workspace goes to the terminal's spec")
	assert.Equal(t, s.ID(), b.spec.Labels[LabelSession])
	assert.False(t, b.spec.Pooled)
}

func TestCreateRejectsInvalidOptions(t *testing.T) {
	rt := newFakeRuntime(t)
	m := newTestManager(t, rt, ManagerOptions{})
	_, err := m.Create(context.Background(), SessionOptions{User: "0"})
	assert.ErrorIs(t, err, ErrInvalidOptions)
	assert.Zero(t, rt.starts.Load())
}

func TestCloseIdempotentConcurrent(t *testing.T) {
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
		assert.NoError(t, err)
	}
	assert.NoError(t, s.Close(context.Background()), "a later Close is a no-op")
	rt.mu.Lock()
	assert.Equal(t, []string{s.ID()}, rt.removed, "one teardown")
	rt.mu.Unlock()
}

func TestConcurrentCallsOverlap(t *testing.T) {
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
	assert.Less(t, time.Since(start), n*sleep/2, "calls ran one after another")
}

func TestKilledSandboxFailsSession(t *testing.T) {
	rt := newFakeRuntime(t)
	m := newTestManager(t, rt, ManagerOptions{})
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)

	inflight := make(chan error, 1)
	go func() {
		_, err := s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x","sleep_ms":10000}`), nil)
		inflight <- err
	}()
	time.Sleep(50 * time.Millisecond)
	rt.kill(s.ID())

	select {
	case <-s.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("session not failed after its sandbox was killed")
	}
	assert.Equal(t, StateFailed, s.State())
	require.ErrorIs(t, s.Err(), ErrFailed)
	assert.Contains(t, s.Err().Error(), "SIGKILL")

	select {
	case err := <-inflight:
		assert.ErrorIs(t, err, ErrFailed, "the in-flight call reports the failure")
	case <-time.After(5 * time.Second):
		t.Fatal("in-flight call hangs")
	}
	start := time.Now()
	_, err = s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x"}`), nil)
	assert.ErrorIs(t, err, ErrFailed)
	assert.Less(t, time.Since(start), 50*time.Millisecond, "calls on a failed session fail fast")

	require.NoError(t, s.Close(context.Background()))
	assert.Zero(t, rt.count())
	assert.ErrorIs(t, s.Err(), ErrFailed, "Close keeps the failure")
}

func TestBrokenStreamReconnects(t *testing.T) {
	rt := newFakeRuntime(t)
	m := newTestManager(t, rt, ManagerOptions{})
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	first := s.currentClient()
	rt.breakStream(s.ID())
	require.Eventually(t, func() bool { return s.currentClient() != first }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, StateReady, s.State())
	assert.Equal(t, "again", echo(t, s, "again"))
}

func TestIdleReaper(t *testing.T) {
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
	select {
	case <-idle.Done():
	case <-time.After(3 * time.Second):
		t.Fatal("idle session not reaped")
	}
	require.Eventually(t, func() bool { return idle.State() == StateClosed }, 3*time.Second, 10*time.Millisecond)
	assert.Equal(t, "idle timeout: no call for 200ms", idle.EndReason())
	<-done
	require.Eventually(t, func() bool { return busy.State() == StateClosed }, 3*time.Second, 10*time.Millisecond)
	assert.Equal(t, StateReady, keep.State())
	assert.Equal(t, "", keep.EndReason())
	assert.Equal(t, 1, rt.count())
	require.NoError(t, keep.Close(context.Background()))
	assert.Equal(t, "", keep.EndReason(), "closed by its owner")
}

func TestWarmPool(t *testing.T) {
	rt := newFakeRuntime(t)
	m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 2}}})
	require.Eventually(t, func() bool { return rt.count() == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.Empty(t, m.List(), "pooled sandboxes are not sessions")
	require.Eventually(t, func() bool { return m.Pools()[0].Ready == 2 }, 5*time.Second, 5*time.Millisecond)

	start := time.Now()
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	assert.Less(t, time.Since(start), 20*time.Millisecond)
	assert.Equal(t, "warm", echo(t, s, "warm"))
	assert.Len(t, m.List(), 1)
	require.Eventually(t, func() bool { return rt.count() == 3 }, 5*time.Second, 5*time.Millisecond, "refilled")
	require.Eventually(t, func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return !rt.boxes[s.ID()].pooled
	}, 5*time.Second, 5*time.Millisecond, "claimed")

	// Other options start cold.
	before := rt.starts.Load()
	other, err := m.Create(context.Background(), SessionOptions{Env: map[string]string{"A": "1"}})
	require.NoError(t, err)
	assert.Equal(t, before+1, rt.starts.Load())
	require.NoError(t, other.Close(context.Background()))

	// A pooled sandbox that dies is replaced.
	p := m.pools[mustKey(t, m, SessionOptions{})]
	p.mu.Lock()
	victim := p.ready[0]
	p.mu.Unlock()
	rt.kill(victim.ID())
	require.Eventually(t, func() bool { return victim.State() == StateClosed }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return p.stat().Ready == 2 }, 5*time.Second, 5*time.Millisecond)
}

func mustKey(t *testing.T, m *Manager, o SessionOptions) string {
	r, err := m.Resolve(o)
	require.NoError(t, err)
	return r.Key()
}

func TestPoolBacksOffOnFailure(t *testing.T) {
	rt := newFakeRuntime(t)
	rt.startErr = errors.New("engine on fire")
	newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 1}}})
	time.Sleep(1500 * time.Millisecond)
	n := rt.starts.Load()
	assert.GreaterOrEqual(t, n, int64(1))
	assert.LessOrEqual(t, n, int64(3), "refills back off")
}

func TestStartFailureLeavesNothing(t *testing.T) {
	rt := newFakeRuntime(t)
	rt.startErr = errors.New("no such image")
	m := newTestManager(t, rt, ManagerOptions{})
	_, err := m.Create(context.Background(), SessionOptions{})
	require.ErrorIs(t, err, ErrStart)
	assert.Contains(t, err.Error(), "no such image")
	assert.Empty(t, m.List())
}

func TestCloseDuringStart(t *testing.T) {
	rt := newFakeRuntime(t)
	rt.startHold = make(chan struct{})
	m := newTestManager(t, rt, ManagerOptions{})
	res := make(chan error, 1)
	go func() {
		_, err := m.Create(context.Background(), SessionOptions{})
		res <- err
	}()
	require.Eventually(t, func() bool { return len(m.List()) == 1 }, 5*time.Second, 5*time.Millisecond)
	s := m.List()[0]
	assert.Equal(t, StateStarting, s.State())
	_, err := s.Call(context.Background(), "echo", nil, nil)
	assert.ErrorIs(t, err, ErrNotReady)
	require.NoError(t, s.Close(context.Background()))
	assert.Error(t, <-res)
	assert.Equal(t, StateClosed, s.State())
	assert.Zero(t, rt.count())
}

func TestRestartAdoptsLiveSessions(t *testing.T) {
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
	require.Eventually(t, func() bool { return rt.count() == 3 }, 5*time.Second, 5*time.Millisecond)
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
	assert.ErrorIs(t, err, ErrNotFound)
	assert.Equal(t, 1, rt.count(), "the dead sandbox was removed")
	_ = key
}

// A session handed out from the pool just before a keep-sessions Shutdown
// is still claimed, so the next manager adopts it instead of recycling it as
// a pooled sandbox (which lost the session and its state).
func TestShutdownRightAfterHandOutKeepsClaim(t *testing.T) {
	rt := newFakeRuntime(t)
	rt.claimWait = 50 * time.Millisecond
	t.Cleanup(rt.stopAll)
	opts := ManagerOptions{Defaults: SessionOptions{Image: "test-image"}, Logger: testLogger(),
		Pools: []PoolOptions{{Size: 1}}}
	m1, err := NewManager(context.Background(), rt, opts)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m1.Pools()[0].Ready == 1 }, 5*time.Second, 5*time.Millisecond)
	s, err := m1.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	require.NoError(t, m1.Shutdown(context.Background(), true))

	m2 := newTestManager(t, rt, ManagerOptions{})
	got, err := m2.Get(s.ID())
	require.NoError(t, err, "the handed-out session is adopted")
	assert.Equal(t, "still here", echo(t, got, "still here"))
}

func TestReclaimReturnsPooledToPool(t *testing.T) {
	rt := newFakeRuntime(t)
	t.Cleanup(rt.stopAll)
	opts := ManagerOptions{Pools: []PoolOptions{{Size: 1}}}
	// A pooled sandbox left by a crashed daemon: start one by hand.
	o, err := SessionOptions{}.Resolve(SessionOptions{Image: "test-image"})
	require.NoError(t, err)
	_, err = rt.Start(context.Background(), Spec{SessionID: "pooled-1", Options: o, Pooled: true,
		Labels: SessionLabels("pooled-1", o, o.Key(), time.Now())})
	require.NoError(t, err)
	stray := SessionOptions{Env: map[string]string{"Z": "1"}}
	so, _ := stray.Resolve(SessionOptions{Image: "test-image"})
	_, err = rt.Start(context.Background(), Spec{SessionID: "pooled-2", Options: so, Pooled: true,
		Labels: SessionLabels("pooled-2", so, so.Key(), time.Now())})
	require.NoError(t, err)

	m := newTestManager(t, rt, opts)
	assert.Empty(t, m.List())
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, "pooled-1", s.ID(), "the adopted warm sandbox is handed out")
	_, err = rt.box("pooled-2")
	assert.ErrorIs(t, err, ErrNotFound, "a pooled sandbox no pool wants is removed")
}

// A warm sandbox made with outdated settings (say, before a seccomp
// change) is never handed out after a restart; a claimed one is adopted,
// as its session still runs.
func TestReclaimSkipsOutdated(t *testing.T) {
	rt := newFakeRuntime(t)
	t.Cleanup(rt.stopAll)
	o, err := SessionOptions{}.Resolve(SessionOptions{Image: "test-image"})
	require.NoError(t, err)
	for _, id := range []string{"pooled-old", "claimed-old"} {
		pooled := id == "pooled-old"
		key := ""
		if pooled {
			key = o.Key()
		}
		_, err = rt.Start(context.Background(), Spec{SessionID: id, Options: o, Pooled: pooled, Labels: SessionLabels(id, o, key, time.Now())})
		require.NoError(t, err)
		rt.outdate(id, "older seccomp profile")
	}

	m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 1}}})
	_, err = rt.box("pooled-old")
	assert.ErrorIs(t, err, ErrNotFound, "removed, not pooled")
	got, err := m.Get("claimed-old")
	require.NoError(t, err, "adopted")
	assert.Equal(t, StateReady, got.State())
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	assert.NotEqual(t, "pooled-old", s.ID())
}

func TestShutdownClosesEverything(t *testing.T) {
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
	assert.ErrorIs(t, err, ErrManagerClosed)
	assert.NoError(t, m.Shutdown(context.Background(), false), "idempotent")
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
	rt := newFakeRuntime(t)
	var frozen atomic.Bool
	m := newTestManager(t, rt, ManagerOptions{HealthTimeout: 300 * time.Millisecond, Dial: func(conn io.ReadWriteCloser) AgentClient {
		return DialAgent(&frozenConn{ReadWriteCloser: conn, frozen: &frozen, closed: make(chan struct{})})
	}})
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = s.Call(ctx, "echo", json.RawMessage(`{"text":"x"}`), nil)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // health pings pass meanwhile
	require.Equal(t, StateReady, s.State())

	frozen.Store(true)
	_, err = s.Call(ctx, "echo", json.RawMessage(`{"text":"y"}`), nil)
	require.ErrorIs(t, err, ErrFailed)
	assert.Contains(t, err.Error(), "did not answer a ping within 300ms")
	require.NoError(t, ctx.Err(), "the call hung until the test's deadline")
	assert.Contains(t, s.EndReason(), "did not answer a ping")
	require.NoError(t, s.Close(context.Background()))
	assert.Equal(t, 0, rt.count())
}
