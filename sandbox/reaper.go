package sandbox

import (
	"context"
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
		if !ok || idle < s.opts.IdleTimeout {
			continue
		}
		s.log.Info("closing idle session", "idle", idle.Round(time.Millisecond), "idle_timeout", s.opts.IdleTimeout, "state", st)
		if st == StateReady {
			s.mu.Lock()
			s.reaped = fmt.Sprintf("idle timeout: no call for %v", s.opts.IdleTimeout)
			s.mu.Unlock()
		}
		m.closeInBackground(s)
	}
}
