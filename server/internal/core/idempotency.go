package core

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/server/internal/apierr"
)

// idempotency remembers the results of recent requests by key (a request id
// within a session, or a create's idempotency key within a token), so that a
// client retrying after a lost connection gets the first run's result instead
// of a second run. A retry that arrives while the first run is in flight
// joins it. Only successes are kept: an error means the request did not (fully)
// happen, and running it again is what the client wants.
//
// Memory is bounded three ways: entries, bytes of stored results, and age.
type idempotency struct {
	maxEntries int
	maxBytes   int64
	ttl        time.Duration
	now        func() time.Time

	// unclaimed, if set, is told of a run that succeeded while nobody
	// waited for it: every caller had stopped waiting (a create whose
	// client left). A later do with the key claims the result.
	unclaimed func(key string, result json.RawMessage)

	mu      sync.Mutex
	entries map[string]*idemEntry
	order   []string // keys of finished entries, oldest first
	bytes   int64
}

type idemEntry struct {
	fingerprint [32]byte // method and params: a reused id with other params is a client bug
	done        chan struct{}
	result      json.RawMessage
	err         error
	finished    time.Time
	waiters     int  // callers waiting for the run
	claimed     bool // a caller got the result
}

func newIdempotency(maxEntries int, maxBytes int64, ttl time.Duration) *idempotency {
	return &idempotency{maxEntries: maxEntries, maxBytes: maxBytes, ttl: ttl, now: time.Now, entries: map[string]*idemEntry{}}
}

// errReused is do's answer to a key seen before with another fingerprint;
// callers say what the key was (a request id, a create's key) in their
// own words, which must not quote a secret key back.
var errReused = apierr.New(apierr.Conflict, "this key was already used for a different request")

// fingerprint identifies a request's content.
func fingerprint(method string, params []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write(params)
	var f [32]byte
	h.Sum(f[:0])
	return f
}

// do runs fn once per key: a concurrent or later request with the same key
// and fingerprint gets the same result; the same key with another
// fingerprint is a Conflict. wait bounds only this caller's waiting (a
// disconnected client stops waiting; the run goes on).
func (c *idempotency) do(wait context.Context, key string, fp [32]byte, fn func() (json.RawMessage, error)) (json.RawMessage, error) {
	c.mu.Lock()
	c.expire()
	e, ok := c.entries[key]
	if ok {
		if e.fingerprint != fp {
			c.mu.Unlock()
			return nil, errReused
		}
		select {
		case <-e.done:
			e.claimed = true
			c.mu.Unlock()
			return e.result, e.err
		default:
		}
		e.waiters++
		c.mu.Unlock()
		return c.await(wait, e)
	}
	e = &idemEntry{fingerprint: fp, done: make(chan struct{}), waiters: 1}
	c.entries[key] = e
	c.mu.Unlock()

	// The run continues even if this caller stops waiting: a retry joins it.
	go func() {
		res, err := fn()
		c.mu.Lock()
		e.result, e.err, e.finished = res, err, c.now()
		if err != nil || int64(len(res)) > c.maxBytes {
			delete(c.entries, key) // not kept: a retry runs again
		} else {
			c.order = append(c.order, key)
			c.bytes += int64(len(res))
			c.evict()
		}
		// Closed under mu: a waiter that gives up decides under mu too,
		// so it either counts among the waiters that get the result or
		// has left before.
		e.claimed = e.waiters > 0
		abandoned := err == nil && !e.claimed && c.unclaimed != nil
		close(e.done)
		c.mu.Unlock()
		if abandoned {
			c.unclaimed(key, res)
		}
	}()
	return c.await(wait, e)
}

// await waits for e's run, or until wait ends (the caller stops waiting;
// a result that is there already is still returned).
func (c *idempotency) await(wait context.Context, e *idemEntry) (json.RawMessage, error) {
	select {
	case <-e.done:
		return e.result, e.err
	case <-wait.Done():
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-e.done:
		return e.result, e.err
	default:
		e.waiters--
		return nil, wait.Err()
	}
}

// claimed says whether a caller got the result of key's run. A result not
// (or no longer) kept counts as claimed: nothing is left to hand out.
func (c *idempotency) claimed(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	return !ok || e.claimed
}

// unclaim marks key's result as not handed out after all (its caller
// returned it to a client that had gone), so that claimed reports false
// until a retry takes it.
func (c *idempotency) unclaim(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[key]; ok {
		e.claimed = false
	}
}

// expire drops finished entries older than the TTL. Caller holds mu.
func (c *idempotency) expire() {
	cutoff := c.now().Add(-c.ttl)
	n := 0
	for n < len(c.order) && c.entries[c.order[n]].finished.Before(cutoff) {
		c.drop(c.order[n])
		n++
	}
	c.order = c.order[n:]
}

// evict drops the oldest finished entries beyond the bounds. Caller holds mu.
func (c *idempotency) evict() {
	n := 0
	for n < len(c.order) && (len(c.order)-n > c.maxEntries || c.bytes > c.maxBytes) {
		c.drop(c.order[n])
		n++
	}
	c.order = c.order[n:]
}

func (c *idempotency) drop(key string) {
	if e, ok := c.entries[key]; ok {
		c.bytes -= int64(len(e.result))
		delete(c.entries, key)
	}
}
