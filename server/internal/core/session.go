package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"

	"github.com/sandboxd/sandboxd/sandbox/egress"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/tools"
)

// Session is a session as the API layers use it: the backend's Sandbox plus
// its capability, output stream, idempotency cache, calls and transfers.
type Session struct {
	c     *Core
	sb    Sandbox
	id    string
	token auth.Digest
	api   string
	// profile is the profile it was created with ("" adopted, or none):
	// its snapshots' retention (Options.SnapshotRetention).
	profile string
	stream  *stream
	idem    *idempotency
	xfers   transfers

	mu    sync.Mutex
	calls map[string]*runningCall // running calls by call id, for Cancel

	// forgotten is closed once the core no longer counts the session
	// (Core.forget), so that Close returns with its slot free.
	forgotten chan struct{}
}

func newSession(c *Core, sb Sandbox, token auth.Digest, api string) *Session {
	o := c.opts
	return &Session{
		c: c, sb: sb, id: sb.ID(), token: token, api: api,
		stream: newStream(sb.ID(), o.RingBytes, o.RingChunks),
		idem:   newIdempotency(o.IdemEntries, o.IdemBytes, o.IdemTTL),
		calls:  map[string]*runningCall{},

		forgotten: make(chan struct{}),
	}
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// API is the API that created the session (APIWebSocket, APIMCP).
func (s *Session) API() string { return s.api }

// Info describes the session now.
func (s *Session) Info() Info { return s.sb.Info() }

// Done is closed when the session leaves service.
func (s *Session) Done() <-chan struct{} { return s.sb.Done() }

// Tools lists the session's tools.
func (s *Session) Tools(ctx context.Context) ([]tools.Definition, error) {
	return s.sb.Tools(ctx)
}

// EgressDenials lists the sandbox's recent egress denials (none when its
// runtime runs no egress proxy).
func (s *Session) EgressDenials() []egress.Denial {
	if e, ok := s.sb.(interface{ EgressDenials() []egress.Denial }); ok {
		return e.EgressDenials()
	}
	return nil
}

// WatchTools calls fn (which must not block) whenever the sandbox's tool
// list changes after it started: an MCP sidecar announced a change, or
// came back from a restart with other tools. stop ends the watch. A
// sandbox whose tools cannot change never calls fn.
func (s *Session) WatchTools(fn func()) (stop func()) {
	if w, ok := s.sb.(interface{ WatchTools(func()) func() }); ok {
		return w.WatchTools(fn)
	}
	return func() {}
}

// Idempotent runs fn once per request id: see idempotency. method and
// params fingerprint the request, so a reused id with other content is a
// Conflict instead of a wrong answer.
func (s *Session) Idempotent(wait context.Context, id json.RawMessage, method string, params []byte, fn func() (json.RawMessage, error)) (json.RawMessage, error) {
	key := string(bytes.TrimSpace(id))
	res, err := s.idem.do(wait, key, fingerprint(method, params), fn)
	if errors.Is(err, errReused) {
		err = apierr.New(apierr.Conflict, "request id %s was already used in this session for a different request; ids are idempotency keys, use a new one", key)
	}
	return res, err
}

// Attach subscribes sub to the session's output from after lastSeq; see
// stream.subscribe for the ordering guarantee.
func (s *Session) Attach(sub Subscriber, lastSeq uint64, before func(ReplayInfo)) {
	s.stream.subscribe(sub, lastSeq, before)
}

// Detach unsubscribes sub.
func (s *Session) Detach(sub Subscriber) { s.stream.unsubscribe(sub) }

// Close closes the session; idempotent.
func (s *Session) Close(ctx context.Context) error {
	if err := s.sb.Close(ctx); err != nil {
		return err
	}
	// The session's slot is free when Close returns: a create right after
	// (at --max-sessions) must not find it still counted.
	select {
	case <-s.forgotten:
	case <-ctx.Done():
	}
	return nil
}

// Pauser is a Sandbox that can be frozen in place (a sandbox.Session on a
// runtime with the engine's pause).
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Pause freezes the session's sandbox until Resume (sandbox.Session.Pause).
func (s *Session) Pause(ctx context.Context) error {
	p, ok := s.sb.(Pauser)
	if !ok {
		return apierr.New(apierr.InvalidParams, "pause is not supported by this server's sessions")
	}
	return p.Pause(ctx)
}

// Resume thaws a paused session (sandbox.Session.Resume).
func (s *Session) Resume(ctx context.Context) error {
	p, ok := s.sb.(Pauser)
	if !ok {
		return apierr.New(apierr.InvalidParams, "resume is not supported by this server's sessions")
	}
	return p.Resume(ctx)
}

// ReadOutput returns the session's output chunks from..to that its replay
// ring still holds (a client refilling a gap of its stream), at most
// maxBytes of data but at least one chunk; see ReadResult.
func (s *Session) ReadOutput(from, to uint64, maxBytes int) ReadResult {
	return s.stream.read(from, to, maxBytes)
}
