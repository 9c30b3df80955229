package sandbox

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// createBusy is a create whose caller gives up after wait, while its start
// (5 s in the fake runtime) goes on: it must fail with ErrBusy.
func createBusy(t *testing.T, m *Manager, wait time.Duration, co CreateOptions) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	began := time.Now()
	_, err := m.CreateWith(ctx, SessionOptions{}, co)
	require.ErrorIs(t, err, ErrBusy)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, wait, time.Since(began), "it returns at its caller's deadline")
	assert.Contains(t, err.Error(), "the start goes on and a retry of this create gets it")
}

// A create whose caller's deadline passes during the start gets ErrBusy;
// the start goes on, and the retry of the same create (same profile and
// options) gets that sandbox, waiting for the rest of its start; a create
// of another profile does not.
func TestKeptStartGoesToTheRetry(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = 5 * time.Second
		m := newTestManager(t, rt, ManagerOptions{})
		began := time.Now()
		createBusy(t, m, 2*time.Second, CreateOptions{Profile: "swe"})
		assert.Empty(t, m.List(), "a kept start is nobody's session")

		// A retry whose own deadline passes first: busy again, still kept.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := m.CreateWith(ctx, SessionOptions{}, CreateOptions{Profile: "swe"})
		cancel()
		require.ErrorIs(t, err, ErrBusy)
		assert.Contains(t, err.Error(), "the sandbox kept for this create is still starting")

		other, err := m.CreateWith(context.Background(), SessionOptions{}, CreateOptions{Profile: "other"})
		require.NoError(t, err)
		assert.EqualValues(t, 2, rt.starts.Load(), "another profile's create starts its own")

		s, err := m.CreateWith(context.Background(), SessionOptions{}, CreateOptions{Profile: "swe", IdleTimeout: time.Hour})
		require.NoError(t, err)
		assert.EqualValues(t, 2, rt.starts.Load(), "the retry took the kept start")
		assert.Equal(t, 8*time.Second, time.Since(began), "2 + 1 s given up, then the other profile's 5 s start; the kept one was ready at 5 s")
		assert.Equal(t, time.Hour, s.Options().IdleTimeout, "the retry's idle timeout")
		assert.Equal(t, "kept", echo(t, s, "kept"))
		assert.ElementsMatch(t, []string{other.ID(), s.ID()}, ids(m.List()))

		// Taken once: the next create starts its own.
		_, err = m.CreateWith(context.Background(), SessionOptions{}, CreateOptions{Profile: "swe"})
		require.NoError(t, err)
		assert.EqualValues(t, 3, rt.starts.Load())
	})
}

// A retry that comes while the kept start still runs waits for it, and
// takes exactly that sandbox.
func TestRetryWaitsForTheKeptStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = 5 * time.Second
		m := newTestManager(t, rt, ManagerOptions{})
		began := time.Now()
		createBusy(t, m, 2*time.Second, CreateOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		assert.Equal(t, 5*time.Second, time.Since(began), "ready when the first start is")
		assert.EqualValues(t, 1, rt.starts.Load())
		assert.Equal(t, "one start", echo(t, s, "one start"))
	})
}

// A kept sandbox no retry takes is removed KeepStarted after it became
// ready; one whose start fails leaves nothing.
func TestKeptStartExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = 5 * time.Second
		m := newTestManager(t, rt, ManagerOptions{KeepStarted: 30 * time.Second})
		createBusy(t, m, 2*time.Second, CreateOptions{})
		advance(3 * time.Second)
		require.Equal(t, 1, rt.count(), "ready and kept")
		advance(30*time.Second - time.Millisecond)
		require.Equal(t, 1, rt.count(), "kept for KeepStarted")
		advance(time.Millisecond)
		assert.Zero(t, rt.count(), "removed once nobody came for it")
		m.mu.Lock()
		assert.Empty(t, m.kept)
		m.mu.Unlock()

		rt.mu.Lock()
		rt.startWait, rt.startErr = time.Second, assert.AnError
		rt.mu.Unlock()
		createBusy(t, m, 500*time.Millisecond, CreateOptions{})
		advance(time.Second)
		m.mu.Lock()
		assert.Empty(t, m.kept, "a failed start is not kept")
		m.mu.Unlock()
		assert.Zero(t, rt.count())
	})
}

// Shutdown removes kept starts, those still starting and those ready.
func TestShutdownRemovesKeptStarts(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = 5 * time.Second
		m := newTestManager(t, rt, ManagerOptions{})
		createBusy(t, m, 2*time.Second, CreateOptions{Profile: "a"})
		advance(3 * time.Second) // ready
		createBusy(t, m, 2*time.Second, CreateOptions{Profile: "b"})
		require.Equal(t, 1, rt.count())
		require.NoError(t, m.Shutdown(context.Background(), false))
		synctest.Wait()
		assert.Zero(t, rt.count(), "nothing left")
		m.mu.Lock()
		assert.Empty(t, m.kept)
		m.mu.Unlock()
	})
}

func ids(ss []*Session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.ID()
	}
	return out
}

// A create does not wait for a kept start still under way when its pool
// has a sandbox ready: it takes that one at once.
func TestReadyPoolBeforeAKeptStartUnderWay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 1}}})
		synctest.Wait() // the pool is full
		rt.mu.Lock()
		rt.startWait = 5 * time.Second
		rt.mu.Unlock()
		_, err := m.Create(context.Background(), SessionOptions{}) // from the pool; its refill takes 5 s
		require.NoError(t, err)
		advance(time.Second)
		createBusy(t, m, 2*time.Second, CreateOptions{}) // cold from 1 s, kept at 3 s, ready at 6 s
		advance(2*time.Second + time.Millisecond)        // the refill is pooled at 5 s
		require.Equal(t, 1, m.Pools()[0].Ready)
		began := time.Now()
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		assert.Equal(t, began, time.Now(), "taken from the pool at once")
		m.mu.Lock()
		kept := len(m.kept)
		m.mu.Unlock()
		assert.Equal(t, 1, kept, "the kept start stays for a later retry")
		assert.Equal(t, "pooled", echo(t, s, "pooled"))
	})
}
