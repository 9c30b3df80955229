package sandbox

import (
	"context"
	"errors"
	"sync"
	"time"
)

// Claims of handed-out pooled sandboxes (Runtime.Claim: a rename on the
// engine) wait until hand-outs pause, then run a few at a time: in a burst
// of 100 hand-outs, 100 renames at once kept dockerd busy while the
// clients' first calls ran, and the burst's p99 time to interactive went
// from 0.61 s to 1.12 s (decision 0037). Until its claim lands, a
// sandbox's label still says pooled: a daemon that dies meanwhile has the
// next one recycle it, as it would a session nobody can reach any more.
const (
	// claimQuiet is how long hand-outs must pause before the claims run.
	claimQuiet = 250 * time.Millisecond
	// claimMaxWait bounds how long a claim waits for the pause.
	claimMaxWait = 3 * time.Second
	// claimConcurrency is how many claims run at once.
	claimConcurrency = 4
)

// claimer queues claims for its worker (runClaims).
type claimer struct {
	mu      sync.Mutex
	pending []claimReq
	stopped bool
	wake    chan struct{} // capacity 1
}

type claimReq struct {
	s      *Session
	queued time.Time
}

func newClaimer() *claimer { return &claimer{wake: make(chan struct{}, 1)} }

// add queues s's claim; false once the worker has stopped (Shutdown): the
// caller claims it itself.
func (c *claimer) add(s *Session) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return false
	}
	c.pending = append(c.pending, claimReq{s, time.Now()})
	select {
	case c.wake <- struct{}{}:
	default:
	}
	return true
}

// take returns what is queued; stop also refuses what comes later.
func (c *claimer) take(stop bool) []claimReq {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = c.stopped || stop
	got := c.pending
	c.pending = nil
	return got
}

// oldest is when the oldest queued claim came (zero: none).
func (c *claimer) oldest() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.pending) == 0 {
		return time.Time{}
	}
	return c.pending[0].queued
}

// runClaims is the claims' worker, until the manager's ctx ends; then it
// runs what is still queued (Shutdown waits for it: a session kept for
// adoption must be claimed before the next daemon lists it).
func (m *Manager) runClaims(ctx context.Context) {
	c := m.claims
	for {
		select {
		case <-c.wake:
		case <-ctx.Done():
			m.claimAll(c.take(true))
			return
		}
		// Wait for a pause in the hand-outs, at most claimMaxWait after
		// the oldest.
		quiet := time.NewTimer(claimQuiet)
	pause:
		for {
			select {
			case <-c.wake:
				if time.Since(c.oldest()) < claimMaxWait-claimQuiet {
					quiet.Reset(claimQuiet)
				}
			case <-quiet.C:
				break pause
			case <-ctx.Done():
				quiet.Stop()
				m.claimAll(c.take(true))
				return
			}
		}
		m.claimAll(c.take(false))
	}
}

// claimAll claims reqs, claimConcurrency at a time, on a context Shutdown
// does not cancel.
func (m *Manager) claimAll(reqs []claimReq) {
	sem := make(chan struct{}, claimConcurrency)
	var wg sync.WaitGroup
	for _, r := range reqs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			m.claim(r.s)
		})
	}
	wg.Wait()
}

// claim renames s as a session of its own (Runtime.Claim).
func (m *Manager) claim(s *Session) {
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.RemoveTimeout)
	defer cancel()
	if err := m.rt.Claim(ctx, s.id); err != nil && !errors.Is(err, ErrNotFound) { // gone: closed already
		s.log.Warn("claiming pooled sandbox", "err", err)
	}
}
