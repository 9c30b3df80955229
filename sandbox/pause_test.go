package sandbox

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pausableRuntime is the fake runtime with the engine's pause: it marks a
// box frozen and records the calls in order.
type pausableRuntime struct {
	*fakeRuntime
	mu    sync.Mutex
	calls []string
}

func newPausableRuntime(t *testing.T) *pausableRuntime {
	return &pausableRuntime{fakeRuntime: newFakeRuntime(t)}
}

func (p *pausableRuntime) Pause(_ context.Context, id string) error { return p.set(id, true, "pause") }
func (p *pausableRuntime) Unpause(_ context.Context, id string) error {
	return p.set(id, false, "unpause")
}

func (p *pausableRuntime) set(id string, paused bool, what string) error {
	b, err := p.box(id)
	if err != nil {
		return err
	}
	p.fakeRuntime.mu.Lock()
	b.paused = paused
	p.fakeRuntime.mu.Unlock()
	p.mu.Lock()
	p.calls = append(p.calls, what+" "+id)
	p.mu.Unlock()
	return nil
}

func (p *pausableRuntime) Remove(ctx context.Context, id string) error {
	p.mu.Lock()
	p.calls = append(p.calls, "remove "+id)
	p.mu.Unlock()
	return p.fakeRuntime.Remove(ctx, id)
}

func (p *pausableRuntime) log() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

// A paused session refuses calls, saying how to go on, and is never idle:
// its idle timeout counts again from Resume.
func TestPausedSessionRefusesCallsAndIsNeverIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newPausableRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{IdleTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, s.Pause(context.Background()))
		assert.Equal(t, StatePaused, s.State())
		assert.True(t, s.Paused())
		require.NoError(t, s.Pause(context.Background()), "pausing a paused session is no error")

		_, err = s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x"}`), nil)
		require.ErrorIs(t, err, ErrPaused)
		assert.Contains(t, err.Error(), "resume it first")
		_, err = s.Tools(context.Background())
		require.ErrorIs(t, err, ErrPaused)

		advance(time.Hour) // far past the idle timeout
		assert.Equal(t, StatePaused, s.State(), "a paused session is not idle")

		require.NoError(t, s.Resume(context.Background()))
		assert.Equal(t, StateReady, s.State())
		require.NoError(t, s.Resume(context.Background()), "resuming a running session is no error")
		assert.Equal(t, "back", echo(t, s, "back"))
		advance(200*time.Millisecond - time.Nanosecond)
		assert.Equal(t, StateReady, s.State(), "the idle timeout counts from the last call after Resume")
		advance(testReapInterval)
		assert.Equal(t, StateClosed, s.State(), "idle again once running")
		assert.Equal(t, []string{"pause " + s.ID(), "unpause " + s.ID(), "remove " + s.ID()}, rt.log())
	})
}

// A session with a call in flight is not paused: the call would freeze
// half-way and its timeouts fire at Resume.
func TestPauseRefusedWhileACallRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newPausableRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, err := s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x","sleep_ms":500}`), nil)
			assert.NoError(t, err)
		}()
		advance(100 * time.Millisecond)
		err = s.Pause(context.Background())
		require.ErrorIs(t, err, ErrBusy)
		assert.Contains(t, err.Error(), "1 call(s) running")
		assert.Equal(t, StateReady, s.State())
		<-done
		require.NoError(t, s.Pause(context.Background()))
		assert.Equal(t, []string{"pause " + s.ID()}, rt.log())
	})
}

// Closing a paused session thaws its sandbox first, so the agent stops its
// tools and the engine removes it.
func TestClosePausedSessionThawsFirst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newPausableRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		require.NoError(t, s.Pause(context.Background()))
		require.NoError(t, m.Close(context.Background(), s.ID()))
		assert.Equal(t, StateClosed, s.State())
		assert.Equal(t, []string{"pause " + s.ID(), "unpause " + s.ID(), "remove " + s.ID()}, rt.log())
		assert.Zero(t, rt.count())
		err = s.Resume(context.Background())
		require.ErrorIs(t, err, ErrClosed)
	})
}

// A runtime without the engine's pause says so, naming it.
func TestPauseUnsupportedByTheRuntime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, newFakeRuntime(t), ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		err = s.Pause(context.Background())
		require.ErrorIs(t, err, ErrUnsupported)
		var ue *UnsupportedError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, "pause", ue.Feature)
		assert.Equal(t, StateReady, s.State())
		assert.Equal(t, "still", echo(t, s, "still"))
	})
}

// A daemon restarted while a session was paused adopts it paused (the
// engine cannot exec in a frozen container); Resume thaws it and reaches
// its agent, with its state kept.
func TestRestartAdoptsPausedSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newPausableRuntime(t)
		t.Cleanup(rt.stopAll)
		m1, err := NewManager(context.Background(), rt, ManagerOptions{Defaults: SessionOptions{Image: "test-image"}, Logger: testLogger()})
		require.NoError(t, err)
		s, err := m1.Create(context.Background(), SessionOptions{IdleTimeout: time.Minute})
		require.NoError(t, err)
		require.NoError(t, s.Pause(context.Background()))
		require.NoError(t, m1.Shutdown(context.Background(), true))

		m2 := newTestManager(t, rt, ManagerOptions{})
		got, err := m2.Get(s.ID())
		require.NoError(t, err)
		assert.Equal(t, StatePaused, got.State(), "adopted as it was left")
		assert.Equal(t, time.Minute, got.Options().IdleTimeout)
		advance(time.Hour)
		assert.Equal(t, StatePaused, got.State(), "not idle, not pinged")
		require.NoError(t, got.Resume(context.Background()))
		assert.Equal(t, "adopted", echo(t, got, "adopted"))
	})
}

// A paused sandbox removed from outside fails its session at Resume, saying
// so; the error is not a bare engine error.
func TestResumeOfRemovedSandboxFailsTheSession(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newPausableRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		require.NoError(t, s.Pause(context.Background()))
		require.NoError(t, rt.fakeRuntime.Remove(context.Background(), s.ID()))
		synctest.Wait()
		err = s.Resume(context.Background())
		require.Error(t, err)
		assert.Equal(t, StateFailed, s.State())
		require.ErrorIs(t, s.Err(), ErrFailed)
		assert.Contains(t, s.Err().Error(), "removed from outside sandboxd")
	})
}
