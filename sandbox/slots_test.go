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
		case <-time.After(10 * time.Second):
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
