package sandbox

import (
	"context"
	"errors"
	"fmt"
)

// ErrPaused: the session is paused; calls wait for Resume (decision 0053).
var ErrPaused = errors.New("session is paused")

// PauseRuntime is implemented by runtimes that can freeze a sandbox in
// place: every process stopped, its memory kept, no CPU used (Docker: the
// cgroup freezer, `docker pause`). Pausing a paused sandbox or resuming a
// running one is no error.
type PauseRuntime interface {
	Pause(ctx context.Context, sessionID string) error
	Unpause(ctx context.Context, sessionID string) error
}

// Pause freezes the session's sandbox: its processes keep their memory and
// use no CPU until Resume, and the session is not idle meanwhile (the idle
// timeout counts again from Resume). Calls, transfers and new PTYs are
// refused with ErrPaused while it is paused; open PTYs and MCP sidecars are
// left as they are (a sidecar is not frozen). A session with a call in
// flight is not paused (ErrBusy: the call would freeze half-way and its
// timeouts fire at Resume). Pausing a paused session is no error.
func (s *Session) Pause(ctx context.Context) error {
	prt, err := s.pauseRuntime("pause")
	if err != nil {
		return err
	}
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	switch {
	case s.state == StatePaused:
		s.mu.Unlock()
		return nil
	case s.state != StateReady || s.lost != nil:
		err := s.unavailableLocked() // says why: starting, failed, closed, reconnecting
		s.mu.Unlock()
		return err
	case s.inflight.Load() > 0:
		n := s.inflight.Load()
		s.mu.Unlock()
		return fmt.Errorf("session %s: %w: %d call(s) running; cancel them or wait for them to end, then pause", s.id, ErrBusy, n)
	}
	s.state = StatePaused // from here on, no call begins
	s.mu.Unlock()
	if err := prt.Pause(ctx, s.id); err != nil {
		s.mu.Lock()
		if s.state == StatePaused {
			s.state = StateReady
		}
		s.mu.Unlock()
		return fmt.Errorf("session %s: pausing its sandbox: %w", s.id, err)
	}
	s.log.Info("session paused")
	return nil
}

// Resume thaws a paused session: its processes run on where they stopped,
// and its idle timeout counts from now. Resuming a session that is not
// paused is no error.
func (s *Session) Resume(ctx context.Context) error {
	prt, err := s.pauseRuntime("resume")
	if err != nil {
		return err
	}
	s.pauseMu.Lock()
	defer s.pauseMu.Unlock()
	s.mu.Lock()
	st := s.state
	err = s.unavailableLocked()
	s.mu.Unlock()
	switch st {
	case StatePaused:
	case StateReady:
		return nil
	default:
		return err
	}
	if err := prt.Unpause(ctx, s.id); err != nil {
		err = fmt.Errorf("session %s: resuming its sandbox: %w", s.id, err)
		if st, ierr := s.m.rt.Inspect(ctx, s.id); errors.Is(ierr, ErrNotFound) {
			s.fail(errors.New("its container was removed from outside sandboxd while it was paused"))
		} else if ierr == nil && !st.Running && !st.Paused {
			s.fail(errors.New(st.Describe()))
		}
		return err
	}
	c := s.currentClient()
	if c == nil || isDone(c.Done()) {
		// Adopted paused by a restarted daemon, or its stream ended while
		// frozen: reach the agent again through its socket.
		nc, err := s.m.connect(ctx, s.id, s.agentLog)
		if err != nil {
			err = fmt.Errorf("its agent could not be reached after it was resumed: %w", err)
			s.fail(err)
			return fmt.Errorf("session %s: %w", s.id, err)
		}
		s.mu.Lock()
		if s.state != StatePaused {
			err := s.unavailableLocked()
			s.mu.Unlock()
			nc.Close()
			return err
		}
		s.client, s.lost = nc, nil
		s.mu.Unlock()
		if c != nil {
			c.Close()
		}
		s.m.watch(s, nc)
	}
	s.touch()
	s.mu.Lock()
	if s.state == StatePaused {
		s.state = StateReady
	}
	s.mu.Unlock()
	s.log.Info("session resumed")
	return nil
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// Paused reports whether the session is paused.
func (s *Session) Paused() bool { return s.State() == StatePaused }

func (s *Session) pauseRuntime(what string) (PauseRuntime, error) {
	prt, ok := s.m.rt.(PauseRuntime)
	if !ok {
		return nil, &UnsupportedError{Runtime: fmt.Sprintf("%T", s.m.rt), Feature: what}
	}
	return prt, nil
}

// thawForTeardown resumes a paused sandbox before it is closed, so its
// agent can be asked to stop its tools and the engine can remove it; an
// error is logged (the removal that follows kills it anyway).
func (s *Session) thawForTeardown(ctx context.Context) {
	prt, ok := s.m.rt.(PauseRuntime)
	if !ok {
		return
	}
	if err := prt.Unpause(ctx, s.id); err != nil {
		s.log.Warn("resuming a paused sandbox to close it", "err", err)
	}
}

// adoptPaused adopts a session whose sandbox a previous daemon left paused:
// it stays paused, without a connection (the engine cannot exec in a
// frozen container); Resume thaws it and reaches its agent.
func (m *Manager) adoptPaused(id string, ctr *Resource, remove func(string) reclaimRow) reclaimRow {
	if _, ok := m.rt.(PauseRuntime); !ok {
		return remove("paused, on a runtime that cannot resume it")
	}
	opts, err := decodeOptions(ctr.Labels[LabelOptions])
	if err != nil {
		return remove(fmt.Sprintf("unreadable %s label: %v", LabelOptions, err))
	}
	s := m.adoptedSession(id, opts, ctr.Labels)
	close(s.started)
	s.state = StatePaused
	m.mu.Lock()
	m.sessions[id] = s
	m.mu.Unlock()
	return reclaimRow{id, "adopted", "paused: stays paused until resumed"}
}
