package sandbox

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Refill backoff after failed starts: 1s, 2s, 4s ... up to maxPoolBackoff.
const maxPoolBackoff = 30 * time.Second

// pool keeps up to size started sandboxes of one options key. A pooled
// session is fully started (its agent answered a ping), so handing one out
// costs a slice pop.
type pool struct {
	m    *Manager
	key  string
	opts SessionOptions
	size int
	log  *slog.Logger
	kick chan struct{}

	mu       sync.Mutex
	ready    []*Session
	starting int
	failures int
	retryAt  time.Time
	closed   bool
}

func newPool(m *Manager, key string, o SessionOptions, size int) *pool {
	return &pool{
		m: m, key: key, opts: o, size: size,
		log:  m.log.With("pool", key, "image", o.Image),
		kick: make(chan struct{}, 1),
	}
}

// take hands out the oldest ready session, or nil.
func (p *pool) take() *Session {
	var stale []*Session
	var got *Session
	p.mu.Lock()
	for len(p.ready) > 0 && got == nil {
		s := p.ready[0]
		p.ready = p.ready[1:]
		if s.State() == StateReady {
			got = s
		} else {
			stale = append(stale, s)
		}
	}
	p.mu.Unlock()
	for _, s := range stale {
		p.m.closeInBackground(s)
	}
	p.signal()
	return got
}

// add puts a started session in the pool; false if the pool is closed or
// full (then the caller closes it).
func (p *pool) add(s *Session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.ready) >= p.size {
		return false
	}
	p.ready = append(p.ready, s)
	return true
}

// remove takes s out of the pool; false if it was not in it.
func (p *pool) remove(s *Session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.ready {
		if r == s {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			return true
		}
	}
	return false
}

// room reports whether the pool wants another sandbox (for adoption).
func (p *pool) room() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && len(p.ready)+p.starting < p.size
}

// drain closes the pool and returns its sessions for the caller to close.
func (p *pool) drain() []*Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	out := p.ready
	p.ready = nil
	return out
}

func (p *pool) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run keeps the pool full until ctx ends.
func (p *pool) run(ctx context.Context) {
	for {
		p.mu.Lock()
		wait := time.Until(p.retryAt)
		p.mu.Unlock()
		if wait <= 0 {
			p.fill()
			wait = time.Hour // until kicked
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// fill starts as many sandboxes as the pool lacks; the manager's start
// slots bound how many run at once.
func (p *pool) fill() {
	p.mu.Lock()
	missing := p.size - len(p.ready) - p.starting
	if p.closed || missing <= 0 {
		p.mu.Unlock()
		return
	}
	p.starting += missing
	p.mu.Unlock()
	for range missing {
		if !p.m.goBackground(p.startOne) {
			p.mu.Lock()
			p.starting--
			p.mu.Unlock()
		}
	}
}

func (p *pool) startOne(ctx context.Context) {
	s, err := p.m.start(ctx, p.opts, p.key, CreateOptions{})
	p.mu.Lock()
	p.starting--
	if err != nil {
		if ctx.Err() == nil {
			p.failures++
			backoff := min(time.Second<<min(p.failures-1, 5), maxPoolBackoff)
			p.retryAt = time.Now().Add(backoff)
			p.log.Error("warm pool start failed", "err", err, "retry_in", backoff)
		}
		p.mu.Unlock()
		p.signal()
		return
	}
	p.failures = 0
	p.mu.Unlock()
	if !p.add(s) {
		_ = s.Close(context.Background()) // the pool closed meanwhile; teardown logs a failed removal
		return
	}
	p.log.Debug("warm sandbox ready", "session", s.id)
	p.signal()
}

// dropPooled removes a failed session from its pool and closes it.
func (m *Manager) dropPooled(s *Session) {
	for _, p := range m.pools {
		if p.remove(s) {
			m.closeInBackground(s)
			p.signal()
			return
		}
	}
}

// closeInBackground closes a session as tracked background work.
func (m *Manager) closeInBackground(s *Session) {
	// Close's error needs no handling here: teardown logs a failed removal.
	if !m.goBackground(func(context.Context) { _ = s.Close(context.Background()) }) {
		go func() { _ = s.Close(context.Background()) }() // Shutdown closes the rest and waits
	}
}

// PoolStat is the state of one warm pool.
type PoolStat struct {
	Key      string `json:"key"`
	Image    string `json:"image"`
	Size     int    `json:"size"`
	Ready    int    `json:"ready"`
	Starting int    `json:"starting"`
}

func (p *pool) stat() PoolStat {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStat{Key: p.key, Image: p.opts.Image, Size: p.size, Ready: len(p.ready), Starting: p.starting}
}

// Pools reports the warm pools (for metrics and readiness checks).
func (m *Manager) Pools() []PoolStat {
	out := make([]PoolStat, 0, len(m.pools))
	for _, p := range m.pools {
		out = append(out, p.stat())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
