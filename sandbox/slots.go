package sandbox

import (
	"context"
	"slices"
	"sync"
)

// startSlots bounds the sandboxes being started at once
// (ManagerOptions.MaxConcurrentStarts). A start a client waits for (Create)
// takes the next free slot before any pool refill that is waiting: a burst
// of hand-outs queues one refill per sandbox taken, and in first-come order
// the creates of the next burst, which found the pool empty, waited for the
// whole pool to be refilled before their own starts began: with a pool a
// second burst was slower than without one. Refills get the slots clients
// leave.
type startSlots struct {
	mu         sync.Mutex
	size, free int
	urgent     []chan struct{} // waiting creates, oldest first; closed to hand over a slot
	background []chan struct{} // waiting refills, oldest first
}

func newStartSlots(n int) *startSlots { return &startSlots{size: n, free: n} }

// acquire waits for a slot; urgent waiters are served before the others.
func (q *startSlots) acquire(ctx context.Context, urgent bool) error {
	_, err := q.acquireAhead(ctx, urgent)
	return err
}

// acquireAhead is acquire; when it gives up it also says how many waiters
// of its kind were still ahead of it (what a busy create's retry time is
// estimated from).
func (q *startSlots) acquireAhead(ctx context.Context, urgent bool) (ahead int, err error) {
	q.mu.Lock()
	if q.free > 0 { // free slots mean nobody waits: release hands slots to waiters
		q.free--
		q.mu.Unlock()
		return 0, nil
	}
	if err := ctx.Err(); err != nil {
		ahead = len(q.urgent)
		if !urgent {
			ahead = len(q.background)
		}
		q.mu.Unlock()
		return ahead, err
	}
	ch := make(chan struct{})
	if urgent {
		q.urgent = append(q.urgent, ch)
	} else {
		q.background = append(q.background, ch)
	}
	q.mu.Unlock()
	select {
	case <-ch:
		return 0, nil
	case <-ctx.Done():
		q.mu.Lock()
		if urgent {
			ahead = slices.Index(q.urgent, ch)
		} else {
			ahead = slices.Index(q.background, ch)
		}
		n := len(q.urgent) + len(q.background)
		q.urgent = slices.DeleteFunc(q.urgent, func(c chan struct{}) bool { return c == ch })
		q.background = slices.DeleteFunc(q.background, func(c chan struct{}) bool { return c == ch })
		granted := n == len(q.urgent)+len(q.background) // no longer queued: the slot was handed over
		q.mu.Unlock()
		if granted {
			q.release()
		}
		return max(ahead, 0), ctx.Err()
	}
}

// release frees a slot, or hands it to the first waiter.
func (q *startSlots) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case len(q.urgent) > 0:
		close(q.urgent[0])
		q.urgent = q.urgent[1:]
	case len(q.background) > 0:
		close(q.background[0])
		q.background = q.background[1:]
	default:
		q.free++
	}
}

// queuedCreates is how many creates wait for a slot now (refills not counted:
// creates go first).
func (q *startSlots) queuedCreates() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.urgent)
}
