package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// reaper closes sessions that had no call for their idle timeout. Failed
// sessions count as idle too, so their leftovers go the same way.
func (m *Manager) reaper(ctx context.Context) {
	t := time.NewTicker(m.opts.ReapInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			m.reapIdle(now)
			m.checkHealth()
		}
	}
}

func (m *Manager) reapIdle(now time.Time) {
	for _, s := range m.List() {
		st := s.State()
		if st != StateReady && st != StateFailed {
			continue
		}
		idle, ok := s.idleFor(now)
		timeout := s.idleTimeout()
		if !ok || idle < timeout {
			continue
		}
		s.log.Info("closing idle session", "idle", idle.Round(time.Millisecond), "idle_timeout", timeout, "state", st)
		if st == StateReady {
			s.mu.Lock()
			s.reaped = fmt.Sprintf("idle timeout: no call for %v", timeout)
			s.mu.Unlock()
		}
		m.closeInBackground(s)
	}
}

// checkHealth pings the agent of every ready session, one ping per session
// at a time, and fails a session whose agent does not answer within
// HealthTimeout. The ping does not count as activity. A lost connection
// is not its business: the watcher handles that (and may reconnect).
func (m *Manager) checkHealth() {
	for _, s := range m.List() {
		c := s.currentClient()
		if c == nil || s.State() != StateReady || !s.checking.CompareAndSwap(false, true) {
			continue
		}
		started := m.goBackground(func(ctx context.Context) {
			defer s.checking.Store(false)
			pctx, cancel := context.WithTimeout(ctx, m.opts.HealthTimeout)
			err := c.Ping(pctx)
			cancel()
			if err == nil || ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) || s.currentClient() != c {
				return
			}
			if s.fail(fmt.Errorf("its agent did not answer a ping within %v: it was stopped (SIGSTOP, a debugger) or hung", m.opts.HealthTimeout)) {
				m.dropPooled(s)
				c.Close() // the calls waiting on it fail with the reason
			}
		})
		if !started {
			s.checking.Store(false)
		}
	}
}
