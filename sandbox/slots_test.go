package sandbox

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A create that finds its pool empty starts before the pool's refills that
// still wait for a start slot: a burst of hand-outs queues a refill per
// sandbox, and a second burst used to wait for all of them first (`go run
// ./bench -suite harness`, 2 cores, 4 slots: a burst of 16 creates right
// after one that drained a pool of 16 was ready at p50 6.3 s / p99 8.8 s,
// 16 cold creates without a pool at 2.5 s / 4.7 s; now 2.8 s / 5.4 s).
func TestCreateStartsBeforeQueuedRefills(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 2}}, MaxConcurrentStarts: 1})
		synctest.Wait()
		require.Equal(t, 2, m.Pools()[0].Ready)

		var mu sync.Mutex
		var order []bool // Spec.Pooled of each Start, in order
		hold := make(chan struct{})
		rt.mu.Lock()
		rt.startHold = hold
		rt.onStart = func(s Spec) {
			mu.Lock()
			order = append(order, s.Pooled)
			mu.Unlock()
		}
		rt.mu.Unlock()
		starts := func() int {
			mu.Lock()
			defer mu.Unlock()
			return len(order)
		}

		// Two hand-outs: two refills, one in Start (held), one waiting for the slot.
		for range 2 {
			_, err := m.Create(context.Background(), SessionOptions{})
			require.NoError(t, err)
		}
		synctest.Wait() // the second refill queues for the slot
		require.Equal(t, 1, starts())
		assert.Equal(t, [2]int{0, 1}, m.slots.waiting(), "no create waits, one refill does")

		// The pool is empty: this create starts cold, after the refill in Start.
		created := make(chan error, 1)
		go func() {
			_, err := m.Create(context.Background(), SessionOptions{})
			created <- err
		}()
		synctest.Wait() // it queues for the slot too
		require.Len(t, m.List(), 3)
		assert.Equal(t, [2]int{1, 1}, m.slots.waiting(), "the create waits too")

		rt.mu.Lock()
		rt.startHold = nil
		rt.mu.Unlock()
		close(hold)
		select {
		case err := <-created:
			require.NoError(t, err)
		case <-time.After(time.Minute):
			t.Fatal("the create did not return")
		}
		synctest.Wait()
		require.Equal(t, 3, starts())
		mu.Lock()
		defer mu.Unlock()
		assert.Equal(t, []bool{true, false, true}, order, "start order (pooled?): the create must go before the queued refill")
	})
}

// Slots go to waiting creates first, then to refills, each in arrival order;
// a waiter that gives up leaves its place, and a slot handed to a waiter
// that gave up meanwhile is passed on, never lost.
func TestStartSlots(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newStartSlots(1)
		require.NoError(t, q.acquire(context.Background(), false))
		queued := func() int {
			q.mu.Lock()
			defer q.mu.Unlock()
			return len(q.urgent) + len(q.background)
		}
		got := make(chan string, 8)
		wait := func(ctx context.Context, name string, urgent bool) {
			before := queued()
			go func() {
				if err := q.acquire(ctx, urgent); err != nil {
					got <- name + " gave up"
					return
				}
				got <- name
			}()
			synctest.Wait() // it waits for its slot
			require.Equal(t, before+1, queued())
		}
		next := func() string {
			select {
			case s := <-got:
				return s
			case <-time.After(5 * time.Second):
				return "nothing"
			}
		}

		wait(context.Background(), "refill 1", false)
		wait(context.Background(), "refill 2", false)
		gone, cancel := context.WithCancel(context.Background())
		wait(gone, "create 1", true)
		wait(context.Background(), "create 2", true)
		cancel()
		assert.Equal(t, "create 1 gave up", next())
		assert.Equal(t, 3, queued())

		order := []string{}
		for range 3 {
			q.release()
			order = append(order, next())
		}
		assert.Equal(t, []string{"create 2", "refill 1", "refill 2"}, order)

		q.release()
		assert.Equal(t, 1, q.free)

		// Granted and cancelled at once: whichever wins, no slot is lost or
		// made up.
		for range 200 {
			require.NoError(t, q.acquire(context.Background(), false))
			ctx, cancel := context.WithCancel(context.Background())
			res := make(chan error, 1)
			go func() { res <- q.acquire(ctx, true) }()
			synctest.Wait()
			require.Equal(t, 1, queued())
			go q.release()
			cancel()
			if err := <-res; err == nil {
				q.release()
			}
			synctest.Wait() // the release has run
			q.mu.Lock()
			require.Equal(t, 1, q.free)
			require.Empty(t, q.urgent)
			q.mu.Unlock()
		}
	})
}

// waiting counts the creates and the refills waiting for a slot.
func (q *startSlots) waiting() [2]int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return [2]int{len(q.urgent), len(q.background)}
}

// The wait for a start slot is not charged to the start's deadline: three
// creates through one slot, each start taking 0.8 s of a 1 s StartTimeout,
// all start (the third after 2.4 s).
func TestSlotWaitIsNotPartOfTheStartDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = 800 * time.Millisecond
		m := newTestManager(t, rt, ManagerOptions{MaxConcurrentStarts: 1, StartTimeout: time.Second})
		began := time.Now()
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				_, err := m.Create(context.Background(), SessionOptions{})
				errs <- err
			}()
		}
		for range 3 {
			require.NoError(t, <-errs)
		}
		assert.Equal(t, 2400*time.Millisecond, time.Since(began))
		assert.Len(t, m.List(), 3)
	})
}

// A create that gets no start slot within MaxStartWait, or before its
// caller's deadline, fails with a *BusyError saying when to retry, never a
// context error; a caller's cancel stays a cancel. Nothing is left of them.
func TestSlotWaitEndsBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		hold := make(chan struct{})
		rt.startHold = hold
		m := newTestManager(t, rt, ManagerOptions{MaxConcurrentStarts: 1, MaxStartWait: 10 * time.Second})
		first := make(chan error, 1)
		go func() {
			_, err := m.Create(context.Background(), SessionOptions{})
			first <- err
		}()
		synctest.Wait() // it holds the only slot

		began := time.Now()
		_, err := m.Create(context.Background(), SessionOptions{})
		require.ErrorIs(t, err, ErrBusy)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 10*time.Second, time.Since(began), "MaxStartWait")
		assert.Contains(t, err.Error(), "all 1 start slots stayed taken for 10s")
		retry, ok := RetryAfter(err)
		require.True(t, ok)
		assert.GreaterOrEqual(t, retry, time.Second)

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		began = time.Now()
		_, err = m.Create(ctx, SessionOptions{})
		cancel()
		require.ErrorIs(t, err, ErrBusy, "the caller's deadline during the wait")
		assert.Equal(t, 2*time.Second, time.Since(began))

		ctx, cancel = context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		_, err = m.Create(ctx, SessionOptions{})
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, ErrBusy)

		assert.Len(t, m.List(), 1, "only the first create is listed")
		assert.Equal(t, [2]int{0, 0}, m.slots.waiting(), "nobody left in the queue")
		close(hold)
		require.NoError(t, <-first)
		assert.Equal(t, 1, rt.count())
	})
}

// A start's deadline grows with the editable paths it seeds; a start that
// runs past it is ErrBusy too (the engine is loaded), not a timeout.
func TestStartDeadlineScalesWithEditablePaths(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = 2500 * time.Millisecond
		m := newTestManager(t, rt, ManagerOptions{StartTimeout: time.Second, SeedAllowance: time.Second})
		assert.Equal(t, time.Second, m.startDeadline(SessionOptions{}))
		assert.Equal(t, 3*time.Second, m.startDeadline(SessionOptions{EditablePaths: []string{"/opt/a", "/opt/b"}}))

		began := time.Now()
		_, err := m.Create(context.Background(), SessionOptions{})
		require.ErrorIs(t, err, ErrBusy)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "did not start within its deadline of 1s (1s, plus 1s for each of its 0 editable paths)")
		assert.Equal(t, time.Second, time.Since(began))
		assert.Zero(t, rt.count(), "nothing left of it")
		assert.Empty(t, m.List())

		s, err := m.Create(context.Background(), SessionOptions{EditablePaths: []string{"/opt/a", "/opt/b"}})
		require.NoError(t, err, "2.5 s is within 1 s + 2 × 1 s")
		assert.Equal(t, "seeded", echo(t, s, "seeded"))
	})
}

// A waiter that gives up says how many of its kind were ahead of it: the
// busy creates of a burst retry spread out in their order.
func TestSlotsAhead(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newStartSlots(1)
		require.NoError(t, q.acquire(context.Background(), true))
		for range 2 {
			go func() { _ = q.acquire(t.Context(), true) }()
		}
		go func() { _ = q.acquire(t.Context(), false) }()
		synctest.Wait()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ahead, err := q.acquireAhead(ctx, true)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, 2, ahead, "two creates, not the refill")
		for range 3 {
			q.release()
		}
	})
}
