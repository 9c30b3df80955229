package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// start creates a sandbox and waits until its agent answers. A session for
// a pool (poolKey set: the pool's id) is returned unregistered and marked
// pooled; any other is registered at once (with co applied), so that it is
// listed while starting and a Close or Shutdown can cancel the start.
//
// A start has two phases (decision 0041). The wait for a start slot
// (takeSlot) is bounded by the caller's ctx and, for a client's create, by
// MaxStartWait: a wait that ends without a slot is a *BusyError, unless the
// caller cancelled. The start proper then runs on a context of its own
// with its own deadline (startDeadline), ended by Close and Shutdown and by
// the caller's cancel (its client left: decision 0029) but not by the
// caller's deadline: a caller whose deadline passes gets a *BusyError, and
// the start goes on and is kept under keepID for a retry of the same
// create (kept.go), so the work it did is not thrown away.
func (m *Manager) start(ctx context.Context, o SessionOptions, poolKey string, co CreateOptions, keepID string) (*Session, error) {
	s := newSession(m, uuid.NewString(), o)
	s.pooled = poolKey != ""
	register := poolKey == ""
	if register {
		s.setIdleTimeout(co.IdleTimeout)
	}
	sctx, cancel := context.WithCancel(context.Background())
	stopShutdown := context.AfterFunc(m.ctx, cancel) // Shutdown cancels starts
	release := func() { stopShutdown(); cancel() }
	s.startCancel = cancel
	if register {
		m.mu.Lock()
		if m.shutdown {
			m.mu.Unlock()
			release()
			return nil, ErrManagerClosed
		}
		m.sessions[s.id] = s
		m.mu.Unlock()
	}
	if err := m.takeSlot(ctx, sctx, s, register); err != nil {
		m.endStart(s, err)
		release()
		return nil, err
	}
	began := time.Now()
	done := make(chan error, 1)
	go func() { // ends with the start; Close and Shutdown end the start
		defer release()
		deadline := m.startDeadline(o)
		dctx, dcancel := context.WithTimeout(sctx, deadline)
		err := m.startSandbox(dctx, s, poolKey)
		if err != nil && errors.Is(dctx.Err(), context.DeadlineExceeded) && sctx.Err() == nil {
			s.log.Warn("start ran past its deadline", "deadline", deadline, "err", err)
			err = busy(m.slotRetry(m.slots.queuedCreates()), "the sandbox did not start within its deadline of %v (%v, plus %v for each of its %d editable paths): %v",
				deadline, m.opts.StartTimeout, m.opts.SeedAllowance, len(o.EditablePaths), err)
		}
		dcancel()
		m.slots.release()
		if err == nil {
			m.recordStartCost(time.Since(began))
		}
		m.endStart(s, err)
		done <- err
	}()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		if register && errors.Is(ctx.Err(), context.DeadlineExceeded) && m.keep(s, keepID) {
			took := time.Since(began).Round(time.Second)
			s.log.Info("create gave up waiting; the start goes on, kept for a retry", "so_far", took)
			return nil, fmt.Errorf("session %s: %w", s.id, busy(m.avgStartCost()-time.Since(began),
				"the sandbox is still starting (%v so far); the start goes on and a retry of this create gets it", took))
		}
		cancel()
		err = <-done
	}
	if err != nil {
		if m.ctx.Err() != nil && sctx.Err() != nil {
			return nil, fmt.Errorf("session %s: %w", s.id, ErrManagerClosed)
		}
		return nil, err
	}
	m.installEager(ctx, s)
	return s, nil
}

// endStart records the end of a start attempt; a failed one leaves the
// session closed (nothing is left in the engine: startSandbox cleans up)
// for anyone who saw it.
func (m *Manager) endStart(s *Session, err error) {
	s.mu.Lock()
	s.startCancel = nil
	s.mu.Unlock()
	close(s.started)
	if err == nil {
		return
	}
	s.closeOnce.Do(func() { close(s.closed) })
	s.mu.Lock()
	s.state = StateClosed
	s.mu.Unlock()
	s.markDone()
	m.forget(s)
}

// takeSlot waits for a start slot: a client's create (urgent) at most
// MaxStartWait and as long as its caller waits, a pool refill until the
// manager shuts down. A wait that ends without a slot is a *BusyError
// saying when a slot is likely free, unless the caller cancelled or the
// session was closed (sctx).
func (m *Manager) takeSlot(ctx, sctx context.Context, s *Session, urgent bool) error {
	var (
		wctx   context.Context
		cancel context.CancelFunc
	)
	if urgent {
		wctx, cancel = context.WithTimeout(ctx, m.opts.MaxStartWait)
	} else {
		wctx, cancel = context.WithCancel(ctx)
	}
	defer cancel()
	stop := context.AfterFunc(sctx, cancel)
	defer stop()
	began := time.Now()
	ahead, err := m.slots.acquireAhead(wctx, urgent)
	switch {
	case err == nil:
		return nil
	case sctx.Err() != nil && m.ctx.Err() != nil:
		return fmt.Errorf("session %s: %w", s.id, ErrManagerClosed)
	case sctx.Err() != nil:
		return fmt.Errorf("session %s: %w while it waited for a start slot", s.id, ErrClosed)
	case errors.Is(ctx.Err(), context.Canceled):
		return fmt.Errorf("session %s: waiting for a start slot: %w", s.id, ctx.Err())
	}
	waited := time.Since(began).Round(time.Second)
	return fmt.Errorf("session %s: %w", s.id, busy(m.slotRetry(ahead),
		"all %d start slots stayed taken for %v (%d creates were ahead of this one)", m.slots.size, waited, ahead))
}

// startDeadline bounds a start once it has its slot: StartTimeout, plus
// SeedAllowance for each editable path, which the runtime seeds from the
// image before the container starts (decision 0041), and one more for a
// fork, whose workspace the runtime seeds from its snapshot (0052).
func (m *Manager) startDeadline(o SessionOptions) time.Duration {
	seeded := len(o.EditablePaths)
	if IsSnapshotImage(o.Image) {
		seeded++
	}
	return m.opts.StartTimeout + time.Duration(seeded)*m.opts.SeedAllowance
}

// avgStartCost is the moving average of a start's time once it had a slot.
func (m *Manager) avgStartCost() time.Duration { return time.Duration(m.startCost.Load()) }

// recordStartCost adds a start's time to the moving average.
func (m *Manager) recordStartCost(d time.Duration) {
	for {
		old := m.startCost.Load()
		if m.startCost.CompareAndSwap(old, (3*old+int64(d))/4) {
			return
		}
	}
}

// slotRetry estimates when a create that gets no slot now, with ahead
// creates before it, would get one: half a start's time (the starts under
// way are half done, on average) and a start's time for each round of
// MaxConcurrentStarts creates ahead. Creates that give up together so
// come back spread out in their order, not all at once to an idle engine.
func (m *Manager) slotRetry(ahead int) time.Duration {
	cost := m.avgStartCost()
	return cost/2 + time.Duration(ahead/m.slots.size)*cost
}

// installEager runs the installers of a session whose skills say
// SkillsInstallEager, before the session is handed out: bounded by each
// installer's own timeout (not StartTimeout) and by the caller, and ended
// by Shutdown. A failure is logged, not fatal: that skill's calls fail with
// the installer's error, everything else works.
func (m *Manager) installEager(ctx context.Context, s *Session) {
	if len(s.opts.Skills) == 0 || s.opts.SkillsInstall != SkillsInstallEager {
		return
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.ctx, cancel)
	defer stop()
	began := time.Now()
	if err := s.InstallSkills(ctx); err != nil {
		s.log.Warn("skill installers failed; those skills' calls will say why", "err", err)
		return
	}
	s.log.Info("skill installers done", "took", time.Since(began).Round(time.Millisecond))
}

// startSandbox starts the sandbox (its caller holds a start slot) and
// pings its agent. On failure it removes whatever was made.
func (m *Manager) startSandbox(ctx context.Context, s *Session, poolKey string) error {
	if oc, ok := m.rt.(OptionsChecker); ok {
		if err := oc.CheckOptions(s.opts); err != nil {
			return fmt.Errorf("session %s: %w: %w", s.id, ErrStart, err)
		}
	}
	cmd, err := AgentCommand(s.opts)
	if err != nil {
		return fmt.Errorf("session %s: %w: %w", s.id, ErrStart, err)
	}
	skills, err := m.skillMounts(s.opts)
	if err != nil {
		return fmt.Errorf("session %s: %w", s.id, err)
	}
	spec := Spec{
		SessionID: s.id,
		Options:   s.opts,
		Skills:    skills,
		Labels:    SessionLabels(s.id, s.opts, poolKey, s.created),
		Command:   cmd,
		Pooled:    poolKey != "",
	}
	// The eager sidecars start beside the sandbox (after it, when one
	// mounts its workspace).
	var (
		sidecarErr   chan error
		afterSandbox chan struct{}
		sandboxUp    atomic.Bool
	)
	if len(s.opts.MCPServers) > 0 {
		srt, ok := m.rt.(SidecarRuntime)
		if !ok {
			return fmt.Errorf("session %s: %w: this runtime cannot run MCP sidecars (mcp_servers)", s.id, ErrStart)
		}
		s.sidecars = newSidecars(s, srt)
		sidecarErr = make(chan error, 1)
		afterSandbox = make(chan struct{})
		go func() {
			if needWorkspace(s.opts.MCPServers) { // its volume comes with the sandbox
				<-afterSandbox
				if !sandboxUp.Load() {
					sidecarErr <- nil
					return
				}
			}
			sidecarErr <- s.sidecars.StartEager(ctx)
		}()
	}
	conn, err := m.rt.Start(ctx, spec)
	if sidecarErr != nil {
		sandboxUp.Store(err == nil)
		close(afterSandbox)
		serr := <-sidecarErr
		if err == nil && serr != nil {
			conn.Close()
			s.sidecars.Close()
			m.removeQuietly(s.id)
			return fmt.Errorf("session %s: %w: %w", s.id, ErrStart, serr)
		}
		if err != nil {
			s.sidecars.Close()
			m.removeQuietly(s.id) // a sidecar made after the runtime's rollback
		}
	}
	if err != nil {
		if errors.Is(err, ErrInvalidOptions) {
			return fmt.Errorf("session %s: %w", s.id, err)
		}
		if !errors.Is(err, ErrImageNotFound) {
			// The runtime rolls back what it made, unless the engine went
			// away in the middle: then it is removed when it is back.
			m.removeLater(s.id)
		}
		return fmt.Errorf("session %s: %w: %w", s.id, ErrStart, err)
	}
	c := m.opts.Dial(conn, s.agentLog)
	if err := c.Ping(ctx); err != nil {
		c.Close()
		why := m.describe(s.id)
		if s.sidecars != nil {
			s.sidecars.Close()
		}
		m.removeQuietly(s.id)
		return fmt.Errorf("session %s: %w: its agent did not answer (%v); %s", s.id, ErrStart, err, why)
	}
	c = m.offerDirect(ctx, s.id, c, s.agentLog)
	// The idle clock starts now, not when the start began: a start slower
	// than the idle timeout would otherwise be reaped at the reaper's next
	// tick, before its creator made a call.
	s.touch()
	if !s.setReady(c) { // Close came first; its teardown removes the sandbox
		c.Close()
		if s.sidecars != nil {
			s.sidecars.Close()
		}
		return fmt.Errorf("session %s: %w while it was starting", s.id, ErrClosed)
	}
	m.watch(s, c)
	return nil
}

// describe says what state a session's sandbox is in, for error messages.
func (m *Manager) describe(id string) string {
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.ProbeTimeout)
	defer cancel()
	st, err := m.rt.Inspect(ctx, id)
	if err != nil {
		return fmt.Sprintf("inspecting it failed: %v", err)
	}
	return st.Describe()
}

// removeQuietly removes a session's resources with a fresh deadline,
// logging a failure (the reclaim of the next start would catch leftovers).
func (m *Manager) removeQuietly(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.RemoveTimeout)
	defer cancel()
	if err := m.rt.Remove(ctx, id); err != nil {
		m.log.Error("removing sandbox after a failed start", "session", id, "err", err)
		m.removeLater(id)
	}
}

// removeLater retries, in the background, the removal of a sandbox that
// could not be removed (the engine did not answer), backing off from 1 s
// to 30 s, until it succeeds or the manager shuts down; a last attempt is
// made then. What is still left, the next daemon's reclaim removes.
func (m *Manager) removeLater(id string) {
	m.goBackground(func(ctx context.Context) {
		delay := time.Second
		for {
			last := false
			select {
			case <-ctx.Done():
				last = true
			case <-time.After(delay):
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.RemoveTimeout)
			err := m.rt.Remove(rctx, id)
			cancel()
			switch {
			case err == nil:
				m.log.Info("sandbox removed after an earlier failure", "session", id)
				return
			case last:
				m.log.Warn("sandbox left behind: the next start's reclaim removes it", "session", id, "err", err)
				return
			}
			delay = min(2*delay, 30*time.Second)
		}
	})
}

// connect opens a new client to a running sandbox's agent, pings it and
// offers it a direct path.
func (m *Manager) connect(ctx context.Context, id string, log *slog.Logger) (AgentClient, error) {
	ctx, cancel := context.WithTimeout(ctx, m.opts.ProbeTimeout)
	defer cancel()
	conn, err := m.rt.Connect(ctx, id)
	if err != nil {
		return nil, err
	}
	c := m.opts.Dial(conn, log)
	if err := c.Ping(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("agent did not answer: %w", err)
	}
	return m.offerDirect(ctx, id, c, log), nil
}

// watch notices the end of a session's connection.
func (m *Manager) watch(s *Session, c AgentClient) {
	m.goBackground(func(ctx context.Context) {
		select {
		case <-c.Done():
			m.onDisconnect(ctx, s, c)
		case <-ctx.Done():
		}
	})
}

// onDisconnect runs when a ready session's connection ends without Close:
// if the sandbox still runs, it reconnects through the agent's socket;
// otherwise the session fails with what happened to its container.
func (m *Manager) onDisconnect(ctx context.Context, s *Session, c AgentClient) {
	if !servesOrPaused(s.State()) || s.currentClient() != c {
		return // closing, or already replaced
	}
	cause := c.Err()
	st, err := m.inspectThroughOutage(ctx, s, c, cause)
	if !servesOrPaused(s.State()) || s.currentClient() != c {
		return // closed while the engine was away
	}
	if err == nil && st.Paused {
		// A frozen sandbox's stream ended (an engine restart): Resume
		// reconnects once it runs again.
		s.log.Warn("agent stream ended while the sandbox is paused; resume reconnects", "cause", cause)
		return
	}
	ctx, cancel := context.WithTimeout(ctx, m.opts.ProbeTimeout)
	defer cancel()
	if err == nil && st.Running {
		nc, cerr := m.connect(ctx, s.id, s.agentLog)
		if cerr == nil {
			if s.swapClient(nc) {
				s.log.Warn("agent stream ended; reconnected through the agent socket", "cause", cause)
				c.Close() // its connection is gone; this releases its goroutines
				m.watch(s, nc)
				return
			}
			nc.Close()
			return
		}
		// A dying container still reads as running for a moment.
		st, err = m.waitStopped(ctx, s.id)
		if err == nil && st.Running {
			s.log.Warn("agent unreachable in a running container", "cause", cause, "connect", cerr)
		}
	}
	if ctx.Err() != nil && m.ctx.Err() != nil {
		return // shutting down: not a failure of the session
	}
	var reason string
	switch {
	case errors.Is(err, ErrNotFound):
		reason = "its container was removed from outside sandboxd"
	case err != nil:
		reason = fmt.Sprintf("the agent connection ended (%v) and the container engine did not answer for %v: %v", cause, m.opts.EngineOutage, err)
	default:
		reason = st.Describe()
	}
	if s.fail(errors.New(reason)) {
		m.dropPooled(s)
	}
}

func servesOrPaused(st State) bool { return st == StateReady || st == StatePaused }

// inspectThroughOutage inspects the sandbox of a session whose client c
// broke. While the engine does not answer (any error but ErrNotFound) it
// retries, backing off up to 2 s, for up to EngineOutage, with the session
// marked as reconnecting so its calls fail fast saying why; it stops early
// if the session is closed meanwhile.
func (m *Manager) inspectThroughOutage(ctx context.Context, s *Session, c AgentClient, cause error) (Status, error) {
	deadline := time.Now().Add(m.opts.EngineOutage)
	delay := 250 * time.Millisecond
	for {
		ictx, cancel := context.WithTimeout(ctx, m.opts.ProbeTimeout)
		st, err := m.rt.Inspect(ictx, s.id)
		cancel()
		if err == nil || errors.Is(err, ErrNotFound) || ctx.Err() != nil || time.Now().After(deadline) {
			return st, err
		}
		lost := fmt.Errorf("session %s: %w: its agent connection ended (%v) and the container engine does not answer (%v); it reconnects when the engine is back, or fails after %v",
			s.id, ErrReconnecting, cause, err, m.opts.EngineOutage)
		if first := s.lostErr() == nil; !s.setLost(c, lost) {
			return st, err
		} else if first {
			s.log.Warn("agent stream ended and the engine does not answer; waiting for it", "cause", cause, "err", err, "for", m.opts.EngineOutage)
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// waitStopped polls a sandbox for up to two seconds until it is not running.
func (m *Manager) waitStopped(ctx context.Context, id string) (Status, error) {
	deadline := time.Now().Add(2 * time.Second)
	for {
		st, err := m.rt.Inspect(ctx, id)
		if err != nil || !st.Running || time.Now().After(deadline) {
			return st, err
		}
		select {
		case <-ctx.Done():
			return st, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
