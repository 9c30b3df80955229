package sandbox

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Restore rolls a ready session back to a snapshot in place (decision
// 0052): the same id (so the same token), its filesystems exactly the
// snapshot's. The sandbox is made again from the snapshot's image, so its
// processes start afresh: the terminal's shell is a new one, background
// jobs and open PTYs end, and the calls in flight fail. While it is being
// restored its calls fail fast saying so (ErrReconnecting). A session with
// MCP sidecars cannot be restored (their state is theirs).
func (m *Manager) Restore(ctx context.Context, sessionID, ref string) (Snapshot, error) {
	if _, err := m.snapshotRuntime(); err != nil {
		return Snapshot{}, err
	}
	snap, err := m.FindSnapshot(ctx, ref)
	if err != nil {
		return Snapshot{}, err
	}
	s, err := m.Get(sessionID)
	if err != nil {
		return Snapshot{}, err
	}
	if len(s.opts.MCPServers) > 0 {
		return Snapshot{}, &UnsupportedError{Runtime: runtimeName(m.rt), Feature: "session.restore of a session with mcp_servers",
			Detail: "fork the snapshot into a new session instead"}
	}
	old, err := s.takeForRestore(snap.ID)
	if err != nil {
		return Snapshot{}, err
	}
	start := time.Now()
	if err := m.restore(ctx, s, old, snap); err != nil {
		if s.fail(fmt.Errorf("restoring it to snapshot %s failed: %w", snap.ID, err)) {
			m.removeQuietly(s.id)
		}
		return Snapshot{}, fmt.Errorf("session %s: restoring to snapshot %s: %w", s.id, snap.ID, err)
	}
	s.log.Info("session restored", "snapshot", snap.ID, "took", time.Since(start).Round(time.Millisecond))
	return snap, nil
}

// takeForRestore takes a ready session out of service for a restore:
// its calls fail fast with why, its client is returned and dropped (so
// the watcher and the health ping leave it alone).
func (s *Session) takeForRestore(snapID string) (AgentClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state == StatePaused:
		return nil, fmt.Errorf("session %s: %w: resume it first (session.resume, sandboxd resume)", s.id, ErrPaused)
	case s.state != StateReady:
		return nil, fmt.Errorf("session %s: %w", s.id, ErrNotReady)
	case s.lost != nil:
		return nil, s.lost
	}
	old := s.client
	s.client = nil
	s.lost = fmt.Errorf("session %s: %w: it is being restored to snapshot %s; retry once it is", s.id, ErrReconnecting, snapID)
	return old, nil
}

// restore replaces the sandbox of s with one from snap and hands s the new
// client.
func (m *Manager) restore(ctx context.Context, s *Session, old AgentClient, snap Snapshot) error {
	if old != nil {
		grace, cancel := context.WithTimeout(ctx, m.opts.ShutdownGrace)
		if err := old.Shutdown(grace); err != nil {
			s.log.Debug("agent shutdown before a restore", "err", err)
		}
		cancel()
		old.Close()
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.RemoveTimeout)
	err := m.rt.Remove(rctx, s.id)
	cancel()
	if err != nil {
		return fmt.Errorf("removing the sandbox: %w", err)
	}
	o := s.opts
	o.Image = snap.Image
	cmd, err := AgentCommand(o)
	if err != nil {
		return err
	}
	skills, err := m.skillMounts(o)
	if err != nil {
		return err
	}
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), m.startDeadline(o))
	defer scancel()
	conn, err := m.rt.Start(sctx, Spec{
		SessionID: s.id, Options: o, Skills: skills, Command: cmd,
		Labels: SessionLabels(s.id, o, "", s.created),
	})
	if err != nil {
		return err
	}
	c := m.opts.Dial(conn, s.agentLog)
	if err := c.Ping(sctx); err != nil {
		c.Close()
		return fmt.Errorf("its agent did not answer (%w); %s", err, m.describe(s.id))
	}
	c = m.offerDirect(sctx, s.id, c, s.agentLog)
	if !s.swapClient(c) {
		// Closed meanwhile: its teardown may have run before this start.
		c.Close()
		m.removeQuietly(s.id)
		return errors.Join(ErrClosed, errors.New("closed while it was being restored"))
	}
	s.touch()
	m.watch(s, c)
	return nil
}
