package sandbox

import (
	"context"
	"errors"
	"time"
)

// Starts kept for a retry (decision 0041). A cold create whose caller's
// deadline passed while its sandbox was being made (seeding editable paths
// under load can take a minute) returns a *BusyError at once, and the start
// goes on: the sandbox is kept, unlisted, under the create's pool id (its
// profile and resolved options: poolID), and the next create of the same
// profile and options takes it, waiting for the start if it is still
// under way. A kept sandbox nobody takes is removed KeepStarted after it
// became ready; Shutdown removes every one. Nothing else refers to it, so
// nothing leaks: it is in exactly one of Manager.sessions, Manager.kept, or
// closed.

// kept is one kept start.
type kept struct {
	s    *Session
	gone chan struct{} // closed when it leaves Manager.kept (under Manager.mu)
}

// keep moves a registered session whose start is under way to the kept
// starts of pool id; false if the manager is shutting down or the session
// was closed meanwhile (then the caller cancels the start).
func (m *Manager) keep(s *Session, id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shutdown || m.sessions[s.id] != s {
		return false
	}
	delete(m.sessions, s.id)
	k := &kept{s: s, gone: make(chan struct{})}
	m.kept[id] = append(m.kept[id], k)
	m.bg.Add(1) // as goBackground does, under mu
	go func() {
		defer m.bg.Done()
		m.expire(id, k)
	}()
	return true
}

// expire removes k KeepStarted after its start ended, unless a retry took
// it first (or its start failed, or the manager shut down: Shutdown closes
// what is kept).
func (m *Manager) expire(id string, k *kept) {
	select {
	case <-k.s.started:
	case <-k.gone:
		return
	case <-m.ctx.Done():
		return
	}
	t := time.NewTimer(m.opts.KeepStarted)
	defer t.Stop()
	select {
	case <-t.C:
	case <-k.gone:
		return
	case <-m.ctx.Done():
		return
	}
	if m.unkeep(id, k) {
		k.s.log.Info("kept sandbox removed: no retry of its create came", "kept_for", m.opts.KeepStarted)
		_ = k.s.Close(context.Background()) // teardown logs a failed removal
	}
}

// unkeep takes k out of the kept starts of id; false if it was not there
// (taken, dropped or forgotten already).
func (m *Manager) unkeep(id string, k *kept) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.unkeepLocked(id, k.s)
}

func (m *Manager) unkeepLocked(id string, s *Session) bool {
	list := m.kept[id]
	for i, k := range list {
		if k.s == s {
			close(k.gone)
			if len(list) == 1 {
				delete(m.kept, id)
			} else {
				m.kept[id] = append(list[:i:i], list[i+1:]...)
			}
			return true
		}
	}
	return false
}

// forgetKeptLocked drops s from whichever kept starts hold it.
func (m *Manager) forgetKeptLocked(s *Session) {
	for id, list := range m.kept {
		for _, k := range list {
			if k.s == s {
				m.unkeepLocked(id, s)
				return
			}
		}
	}
}

// oldestKept is the oldest kept start of id, or nil.
func (m *Manager) oldestKept(id string) *kept {
	m.mu.Lock()
	defer m.mu.Unlock()
	if list := m.kept[id]; len(list) > 0 {
		return list[0]
	}
	return nil
}

// dropKept empties the kept starts (Shutdown) and returns their sessions
// for the caller to close.
func (m *Manager) dropKept() []*Session {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []*Session
	for id, list := range m.kept {
		for _, k := range list {
			close(k.gone)
			out = append(out, k.s)
		}
		delete(m.kept, id)
	}
	return out
}

// retake hands a create the start kept for it (pool id own), waiting for
// the start if it is still under way and wait is set: within ctx, whose
// deadline is a *BusyError again (the start stays kept). ok is false when
// nothing is kept for own (or nothing ready, without wait), or what was
// kept failed: then the create goes on as usual.
func (m *Manager) retake(ctx context.Context, own string, co CreateOptions, wait bool) (s *Session, ok bool, err error) {
	for {
		k := m.oldestKept(own)
		if k == nil {
			return nil, false, nil
		}
		if !wait {
			select {
			case <-k.s.started:
			default:
				return nil, false, nil
			}
		}
		select {
		case <-k.s.started:
		case <-k.gone: // taken by another retry, or failed
			continue
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, true, busy(m.avgStartCost(), "the sandbox kept for this create is still starting; a retry gets it")
			}
			return nil, true, ctx.Err()
		}
		if !m.unkeep(own, k) {
			continue
		}
		s = k.s
		if s.State() != StateReady { // it failed while kept
			m.closeInBackground(s)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, handOutPing)
		err := s.Ping(pctx)
		cancel()
		if err != nil {
			s.log.Warn("kept sandbox did not answer; discarding it", "err", err)
			m.closeInBackground(s)
			continue
		}
		m.mu.Lock()
		if m.shutdown {
			m.mu.Unlock()
			_ = s.Close(context.Background()) // teardown logs a failed removal
			return nil, true, ErrManagerClosed
		}
		m.sessions[s.id] = s
		m.mu.Unlock()
		// This create's idle timeout, not the one that gave up's.
		s.idle.Store(int64(s.opts.IdleTimeout))
		s.setIdleTimeout(co.IdleTimeout)
		s.touch()
		m.installEager(ctx, s)
		s.log.Info("kept sandbox handed to a retry of its create", "waited", time.Since(s.created).Round(time.Millisecond))
		return s, true, nil
	}
}
