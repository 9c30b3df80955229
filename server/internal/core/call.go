package core

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/tools"
)

// CallRequest is one tool call of a session.
type CallRequest struct {
	// Transport is what the call came by (metrics.TransportWS,
	// metrics.TransportMCP), for the call metrics.
	Transport string
	// CallID is the request's id, by which Cancel finds the call and the
	// stream tags its output; empty: the call cannot be cancelled by id.
	CallID json.RawMessage
	Name   string
	Args   json.RawMessage
	// Stream sends the output to the session's numbered stream (and from
	// there to every attached client).
	Stream bool
	// Extra, if not nil, also receives the output.
	Extra tools.StreamFunc
	// Pace, if not nil, runs after each piece of output is handed on and
	// may block until the caller has taken it: the tool's process waits
	// meanwhile (the agent streams within a window, decision 0038). It
	// must return when ctx ends.
	Pace func(ctx context.Context)
}

// runningCall is a call Cancel can stop; done closes when Call returns.
type runningCall struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// cancelWait bounds how long Cancel waits for the cancelled call to end:
// the agent's client waits up to agentclient.CancelWait (6 s: the
// terminal's 5 s grace for an interrupted command, and a second) for the
// agent's answer; 2 s more for a loaded host.
const cancelWait = 8 * time.Second

// Call runs a tool. It is detached from the caller: parent carries values
// and cancellation (MCP's notifications/cancelled), the core adds shutdown.
func (s *Session) Call(parent context.Context, r CallRequest) (*tools.Observation, error) {
	if err := s.c.beginCall(); err != nil {
		return nil, err
	}
	defer s.c.endCall()
	ctx, cancel := s.c.callContext(parent)
	defer cancel()
	if key := string(bytes.TrimSpace(r.CallID)); key != "" {
		defer s.track(key, cancel)()
	}

	var sink tools.StreamFunc
	var carry utf8Carry
	deliver := func(b []byte) {
		if len(b) == 0 {
			return
		}
		if r.Stream {
			s.stream.publish(r.CallID, b)
		}
		if r.Extra != nil {
			r.Extra(b)
		}
		if r.Pace != nil {
			r.Pace(ctx)
		}
	}
	if r.Stream || r.Extra != nil {
		sink = func(b []byte) { deliver(carry.take(b)) }
	}
	start := time.Now()
	obs, err := s.sb.Call(ctx, r.Name, r.Args, sink)
	deliver(carry.flush())
	// Tool names come from clients: only calls a tool answered get a
	// series (an unknown or empty name must not make one); failures are
	// counted by kind elsewhere.
	if err == nil {
		s.c.opts.Metrics.ObserveCall(r.Name, r.Transport, time.Since(start))
	}
	if err == nil && obs == nil {
		err = apierr.New(apierr.Internal, "tool %q returned no observation", r.Name)
	}
	if err != nil && s.c.base.Err() != nil && parent.Err() == nil {
		// Not a bare "context canceled": say who cancelled it.
		err = apierr.New(apierr.Cancelled, "the call was cancelled: the server is shutting down and the drain of calls in flight has ended (%v)", err)
	}
	return obs, err
}

// track registers a running call under key for Cancel; the returned
// function unregisters it and tells a waiting Cancel the call ended.
func (s *Session) track(key string, cancel context.CancelFunc) (untrack func()) {
	rc := &runningCall{cancel: cancel, done: make(chan struct{})}
	s.mu.Lock()
	s.calls[key] = rc
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.calls[key] == rc {
			delete(s.calls, key)
		}
		s.mu.Unlock()
		close(rc.done)
	}
}

// Cancel cancels a running call by its call id; false if none runs. It
// returns once the call has ended (the tool stopped it), or after
// cancelWait, so a client's next call does not find the tool still busy.
func (s *Session) Cancel(callID json.RawMessage) bool {
	s.mu.Lock()
	rc, ok := s.calls[string(bytes.TrimSpace(callID))]
	s.mu.Unlock()
	if !ok {
		return false
	}
	rc.cancel()
	t := time.NewTimer(cancelWait)
	defer t.Stop()
	select {
	case <-rc.done:
	case <-t.C:
	}
	return true
}
