package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/internal/loglimit"
	"github.com/sandboxd/sandboxd/sandbox/sidecar"
	"github.com/sandboxd/sandboxd/tools"
)

// failureSettle is how long a call that lost its connection waits for the
// session's watcher to say why (container died, agent crashed), so that it
// returns that reason rather than a bare "connection ended".
const failureSettle = 3 * time.Second

// Session is one sandbox and the connection to its agent. Its methods are
// safe for concurrent use; calls run concurrently on one stream.
type Session struct {
	id   string
	opts SessionOptions
	m    *Manager
	log  *slog.Logger
	// agentLog logs what the agent's streams carry (hostile input): the
	// session's logger, truncated and rate-limited once for all of the
	// session's connections.
	agentLog *slog.Logger

	mu      sync.Mutex
	state   State
	err     error       // why it failed; kept through Close
	reaped  string      // why the manager closed it itself (idle timeout)
	lost    error       // set while its stream is broken and the engine away (wraps ErrReconnecting)
	client  AgentClient // nil until ready
	pooled  bool        // waiting in a warm pool, not handed out
	created time.Time

	idle       atomic.Int64                       // the idle timeout in force (opts', or CreateOptions.IdleTimeout)
	lastActive atomic.Int64                       // the end of the last call, as nanoseconds since monoBase (monotonic)
	inflight   atomic.Int64                       // calls running now; a busy session is never idle
	checking   atomic.Bool                        // a health ping is in flight
	pauseMu    sync.Mutex                         // one Pause or Resume at a time
	lastTools  atomic.Pointer[[]tools.Definition] // what Tools last answered, for a paused session

	sidecars *sidecar.Set // its MCP servers; nil without any

	startCancel context.CancelFunc // cancels a start in progress
	started     chan struct{}      // closed when the start attempt has ended

	doneOnce sync.Once
	done     chan struct{} // closed when the session leaves service

	closeOnce sync.Once
	closed    chan struct{} // closed when teardown has finished
	closeErr  error
}

func newSession(m *Manager, id string, o SessionOptions) *Session {
	s := &Session{
		id:       id,
		opts:     o,
		m:        m,
		log:      m.log.With("session", id),
		agentLog: loglimit.NewLogger(m.log.With("session", id), loglimit.Options{}),
		state:    StateStarting,
		created:  time.Now(),
		started:  make(chan struct{}),
		done:     make(chan struct{}),
		closed:   make(chan struct{}),
	}
	s.idle.Store(int64(o.IdleTimeout))
	s.touch()
	return s
}

// ID is the session's id (a UUID).
func (s *Session) ID() string { return s.id }

// Options are the resolved options the session runs with, with the idle
// timeout in force (see CreateOptions.IdleTimeout).
func (s *Session) Options() SessionOptions {
	o := s.opts
	o.IdleTimeout = s.idleTimeout()
	return o
}

// idleTimeout is the idle timeout in force.
func (s *Session) idleTimeout() time.Duration { return time.Duration(s.idle.Load()) }

// setIdleTimeout replaces the idle timeout in force; zero keeps it.
func (s *Session) setIdleTimeout(d time.Duration) {
	if d != 0 {
		s.idle.Store(int64(d))
	}
}

// State is where the session is in its life.
func (s *Session) State() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state
}

// Err says why the session failed; nil unless it did.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// EndReason says why the session left service, for people: why it failed,
// or that the idle timeout closed it; "" when it was closed by its owner
// (or still serves).
func (s *Session) EndReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err.Error()
	}
	return s.reaped
}

// Done is closed when the session leaves service: it failed, was closed, or
// was detached by Shutdown.
func (s *Session) Done() <-chan struct{} { return s.done }

// LastActive is when the last call ended (or the session was handed out).
func (s *Session) LastActive() time.Time {
	return monoBase.Add(time.Duration(s.lastActive.Load()))
}

// Ping checks that the session's agent answers. It does not count as
// activity, so health checks do not keep an idle session alive.
func (s *Session) Ping(ctx context.Context) error {
	c, err := s.begin()
	if err != nil {
		return err
	}
	defer s.inflight.Add(-1)
	return s.callErr(ctx, "ping", c.Ping(ctx))
}

// InstallSkills runs the dependency installers of the session's skills
// that have not run yet (each once per session, in priority order). An
// installer's failure is the error, and that skill's calls fail with it;
// the rest of the session works.
func (s *Session) InstallSkills(ctx context.Context) error {
	c, err := s.begin()
	if err != nil {
		return err
	}
	defer s.inflight.Add(-1)
	return s.callErr(ctx, "skills/install", c.InstallSkills(ctx))
}

// WatchTools calls fn (which must not block) whenever the session's tool
// list changes after it started: one of its MCP sidecars announced
// notifications/tools/list_changed (the list is read again first), or came
// back from a restart listing other tools. stop ends the watch. Without
// sidecars the tools never change and fn is never called.
func (s *Session) WatchTools(fn func()) (stop func()) {
	if s.sidecars == nil {
		return func() {}
	}
	return s.sidecars.Watch(fn)
}

// Tools lists the tools the session's agent serves. A paused session
// answers with the list it last gave (a client attaching to it), or
// ErrPaused if it never gave one (adopted paused by a restarted daemon).
func (s *Session) Tools(ctx context.Context) ([]tools.Definition, error) {
	c, err := s.begin()
	if errors.Is(err, ErrPaused) {
		if defs := s.lastTools.Load(); defs != nil {
			return *defs, nil
		}
	}
	if err != nil {
		return nil, err
	}
	defer s.end()
	defs, err := c.ListTools(ctx)
	if err != nil {
		return nil, s.callErr(ctx, "listing tools", err)
	}
	if s.sidecars != nil {
		if defs, err = s.sidecars.Tools(ctx, defs); err != nil {
			return nil, err
		}
	}
	s.lastTools.Store(&defs)
	return defs, nil
}

// Call runs a tool in the sandbox. stream (may be nil) receives output as
// the tool produces it. A failure the model should read is an Observation
// with IsError; an error means the call could not run.
func (s *Session) Call(ctx context.Context, name string, args json.RawMessage, stream tools.StreamFunc) (*tools.Observation, error) {
	c, err := s.begin()
	if err != nil {
		return nil, err
	}
	defer s.end()
	if s.sidecars != nil && s.sidecars.Owns(name) {
		return s.sidecars.Call(ctx, name, args)
	}
	obs, err := c.Call(ctx, name, args, stream)
	return obs, s.callErr(ctx, "calling "+name, err)
}

// Upload extracts a tar stream into destDir inside the sandbox. The agent
// does the extraction, as the session user, confined to the workspace: no
// path is ever resolved on the host.
func (s *Session) Upload(ctx context.Context, destDir string, tarStream io.Reader) error {
	c, err := s.begin()
	if err != nil {
		return err
	}
	defer s.end()
	return s.callErr(ctx, "uploading to "+destDir, c.Upload(ctx, destDir, tarStream))
}

// Download writes a tar stream of path (a file or directory inside the
// workspace) to w. Like Upload, it runs inside the sandbox.
func (s *Session) Download(ctx context.Context, path string, w io.Writer) error {
	c, err := s.begin()
	if err != nil {
		return err
	}
	defer s.end()
	return s.callErr(ctx, "downloading "+path, c.Download(ctx, path, w))
}

// OpenPTY opens a PTY in the sandbox (see agentclient.Client.OpenPTY): a program
// on a pseudo-terminal of its own, or a read-only view of a tool. It ends
// with the agent connection that opened it (a reconnect ends it). While it
// is open it counts as a call in flight: the session does not idle out.
func (s *Session) OpenPTY(ctx context.Context, o proto.PTYOptions, h agentclient.PTYHandler) (*agentclient.PTY, error) {
	c, err := s.begin()
	if err != nil {
		return nil, err
	}
	var once sync.Once
	release := func() { once.Do(s.end) }
	exit := h.Exit
	h.Exit = func(st proto.PTYExit) {
		if exit != nil {
			exit(st)
		}
		release()
	}
	p, err := c.OpenPTY(ctx, o, h)
	if err != nil {
		release()
		return nil, s.callErr(ctx, "opening a pty", err)
	}
	return p, nil
}

// begin admits a call: it returns the client of a ready session and counts
// the call as in flight, or fails fast with why the session cannot serve.
func (s *Session) begin() (AgentClient, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.unavailableLocked(); err != nil {
		return nil, err
	}
	s.inflight.Add(1)
	return s.client, nil
}

// unavailableLocked says why the session cannot serve a call now; nil when
// it can. s.mu is held.
func (s *Session) unavailableLocked() error {
	switch s.state {
	case StateReady:
		return s.lost // nil unless its stream is broken
	case StatePaused:
		return fmt.Errorf("session %s: %w: resume it first (session.resume, sandboxd resume)", s.id, ErrPaused)
	case StateStarting:
		return fmt.Errorf("session %s: %w", s.id, ErrNotReady)
	case StateFailed:
		return s.err
	default:
		if s.err != nil {
			return fmt.Errorf("session %s: %w (it had failed: %v)", s.id, ErrClosed, s.err)
		}
		return fmt.Errorf("session %s: %w", s.id, ErrClosed)
	}
}

func (s *Session) end() {
	s.touch()
	s.inflight.Add(-1)
}

func (s *Session) touch() { s.lastActive.Store(int64(time.Since(monoBase))) }

// monoBase anchors the sessions' activity times on the monotonic clock: a
// step of the wall clock (a fresh VM's first time sync) must not make a
// session idle early (a stateless sandbox was reaped 2.2 s into a 3 s idle
// timeout in CI) or keep one for ever. Times read from it carry the
// monotonic reading, so durations between them and time.Now ignore steps.
var monoBase = time.Now()

// callErr turns a lost connection into the session's failure when the
// watcher finds one shortly, so a caller learns "the container was killed",
// not only "connection ended".
func (s *Session) callErr(ctx context.Context, what string, err error) error {
	if err == nil || !errors.Is(err, proto.ErrDisconnected) {
		return err
	}
	if errors.Is(err, errDirectBroken) {
		// The agent answers on the stream: nothing for the watcher to find.
		return fmt.Errorf("session %s: %s: %w", s.id, what, err)
	}
	t := time.NewTimer(failureSettle)
	defer t.Stop()
	select {
	case <-s.done:
		if ferr := s.Err(); ferr != nil {
			return ferr
		}
		return fmt.Errorf("session %s: %s: %w", s.id, what, ErrClosed)
	case <-ctx.Done():
	case <-t.C:
	}
	if lost := s.lostErr(); lost != nil {
		return lost
	}
	return fmt.Errorf("session %s: %s: %w", s.id, what, err)
}

// setReady moves a starting session to ready with its client.
func (s *Session) setReady(c AgentClient) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !canMove(s.state, StateReady) {
		return false
	}
	s.state, s.client = StateReady, c
	return true
}

// swapClient replaces the client of a ready session after a reconnect.
func (s *Session) swapClient(c AgentClient) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StateReady {
		return false
	}
	s.client, s.lost = c, nil
	return true
}

// setLost marks a ready session whose client c broke as waiting for the
// engine: calls fail fast with err (which wraps ErrReconnecting). It
// reports false if the session moved on (closing, or reconnected).
func (s *Session) setLost(c AgentClient, err error) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != StateReady || s.client != c {
		return false
	}
	s.lost = err
	return true
}

func (s *Session) lostErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// currentClient returns the session's client (nil before ready).
func (s *Session) currentClient() AgentClient {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.client
}

// fail records err as why the session stopped serving. It wraps ErrFailed.
func (s *Session) fail(err error) bool {
	s.mu.Lock()
	if !canMove(s.state, StateFailed) {
		s.mu.Unlock()
		return false
	}
	s.state = StateFailed
	s.err = fmt.Errorf("session %s: %w: %v", s.id, ErrFailed, err)
	s.mu.Unlock()
	s.log.Warn("session failed", "err", err)
	s.markDone()
	return true
}

func (s *Session) markDone() { s.doneOnce.Do(func() { close(s.done) }) }

// Close ends the session: the agent is asked to stop its tools, then the
// container, its volumes and networks are removed. It returns once all is
// gone. It is idempotent, and concurrent calls all wait for the one
// teardown, which runs to completion even if ctx ends first.
func (s *Session) Close(ctx context.Context) error {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		if s.state == StateClosed { // detached by Shutdown: nothing is ours to remove
			s.mu.Unlock()
			close(s.closed)
			return
		}
		paused := s.state == StatePaused
		s.state = StateClosing
		cancelStart := s.startCancel
		s.mu.Unlock()
		if cancelStart != nil {
			cancelStart()
		}
		s.markDone()
		go s.teardown(paused)
	})
	select {
	case <-s.closed:
		return s.closeErr
	case <-ctx.Done():
		return fmt.Errorf("session %s: waiting for close: %w", s.id, ctx.Err())
	}
}

// teardown removes everything of the session. It has its own deadline. A
// paused sandbox is resumed first, so its agent can stop its tools.
func (s *Session) teardown(paused bool) {
	<-s.started // a start in progress returns quickly once cancelled
	m := s.m
	ctx, cancel := context.WithTimeout(context.Background(), m.opts.ShutdownGrace+m.opts.RemoveTimeout)
	defer cancel()
	if paused {
		s.thawForTeardown(ctx)
	}
	if s.sidecars != nil {
		s.sidecars.Close()
	}
	if c := s.currentClient(); c != nil {
		grace, cancelGrace := context.WithTimeout(ctx, m.opts.ShutdownGrace)
		select {
		case <-c.Done(): // the agent is gone already
		default:
			if err := c.Shutdown(grace); err != nil && !errors.Is(err, proto.ErrDisconnected) {
				s.log.Debug("agent shutdown", "err", err)
			}
		}
		cancelGrace()
		c.Close()
	}
	err := m.rt.Remove(ctx, s.id)
	if err != nil {
		err = fmt.Errorf("session %s: removing its sandbox: %w", s.id, err)
		s.log.Error("close", "err", err)
		m.removeLater(s.id)
	}
	s.mu.Lock()
	s.state = StateClosed
	s.closeErr = err
	s.mu.Unlock()
	m.forget(s)
	s.log.Info("session closed")
	close(s.closed)
}

// detach drops the connection and leaves the sandbox running for the next
// daemon to adopt (Shutdown with keepSessions).
func (s *Session) detach() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.state = StateClosed
		c := s.client
		cancelStart := s.startCancel
		s.mu.Unlock()
		if cancelStart != nil {
			cancelStart()
		}
		s.markDone()
		if c != nil {
			c.Close()
		}
		if s.sidecars != nil {
			s.sidecars.Close() // the containers stay; the next daemon replaces them
		}
		close(s.closed)
	})
}

// idleFor reports how long the session has had no call, and whether it is
// subject to the idle reaper at all.
func (s *Session) idleFor(now time.Time) (time.Duration, bool) {
	if s.idleTimeout() <= 0 || s.inflight.Load() > 0 {
		return 0, false
	}
	return now.Sub(s.LastActive()), true
}
