package fileeditor

import (
	"context"
	"sync"
)

// pathLocks serialises calls on one file while calls on different files run
// in parallel. Entries are reference-counted so the map does not grow with
// every path ever touched. A lock is a one-slot channel so a waiting call can
// give up when its context ends.
type pathLocks struct {
	mu    sync.Mutex
	locks map[string]*pathLock
}

type pathLock struct {
	ch   chan struct{}
	refs int
}

func (p *pathLocks) lock(ctx context.Context, key string) (unlock func(), err error) {
	p.mu.Lock()
	if p.locks == nil {
		p.locks = map[string]*pathLock{}
	}
	l := p.locks[key]
	if l == nil {
		l = &pathLock{ch: make(chan struct{}, 1)}
		p.locks[key] = l
	}
	l.refs++
	p.mu.Unlock()

	release := func() {
		p.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(p.locks, key)
		}
		p.mu.Unlock()
	}
	select {
	case l.ch <- struct{}{}:
		return func() { <-l.ch; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}
