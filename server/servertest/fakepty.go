package servertest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
)

// FakePTY is a PTY of a fake session. One that runs a command is an echoing
// terminal: input comes back as output, Ctrl-D ("\x04") ends it with exit
// code 0, a resize prints "[size RxC]\r\n", Close ends it as SIGHUP would
// (129). One that watches "terminal" shows each command of the fake
// terminal tool as "$ command" and its output. A fake session holds at most
// proto.DefaultMaxPTYs; its end ends them with an error, as a lost agent
// connection does.
type FakePTY struct {
	s     *FakeSandbox
	o     proto.PTYOptions
	h     agentclient.PTYHandler
	acked atomic.Int64

	mu    sync.Mutex // orders output and the end
	sent  int64
	ended bool
}

var _ core.PTY = (*FakePTY)(nil)

// OpenPTY implements core.Sandbox.
func (s *FakeSandbox) OpenPTY(ctx context.Context, o proto.PTYOptions, h agentclient.PTYHandler) (core.PTY, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("session %s: %w", s.id, errClosed)
	}
	if err := o.Validate(); err != nil {
		return nil, apierr.Wrap(apierr.InvalidParams, err, "invalid pty options")
	}
	if o.Watch != "" && o.Watch != "terminal" {
		return nil, apierr.New(apierr.InvalidParams, "tool %q cannot be followed", o.Watch)
	}
	p := &FakePTY{s: s, o: o, h: h}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ptys) >= proto.DefaultMaxPTYs {
		return nil, apierr.New(apierr.Busy, "%d ptys are open in this session (limit %d); close one first", len(s.ptys), proto.DefaultMaxPTYs)
	}
	s.ptys = append(s.ptys, p)
	return p, nil
}

// PTYs are the session's open PTYs, oldest first.
func (s *FakeSandbox) PTYs() []*FakePTY {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*FakePTY(nil), s.ptys...)
}

// Opened implements core.PTY: a made-up process id, and the argv asked
// for (the login shell: "sh -l"); nothing when watching.
func (p *FakePTY) Opened() proto.PTYOpened {
	switch {
	case p.o.Watch != "":
		return proto.PTYOpened{}
	case len(p.o.Command) > 0:
		return proto.PTYOpened{PID: 4242, Command: p.o.Command}
	}
	return proto.PTYOpened{PID: 4242, Command: []string{"/bin/sh", "-l"}}
}

// Options are the options the PTY was opened with.
func (p *FakePTY) Options() proto.PTYOptions { return p.o }

// Emit sends output as the PTY's program would print it.
func (p *FakePTY) Emit(b []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.ended && len(b) > 0 {
		p.sent += int64(len(b))
		p.h.Output(append([]byte(nil), b...))
	}
}

// Acked is how many output bytes the consumer has acknowledged.
func (p *FakePTY) Acked() int64 { return p.acked.Load() }

// Input implements core.PTY.
func (p *FakePTY) Input(_ context.Context, data []byte) error {
	if p.o.Watch != "" {
		return apierr.New(apierr.InvalidParams, "the pty watches a tool: it is read-only")
	}
	if err := p.live(); err != nil {
		return err
	}
	before, _, eof := strings.Cut(string(data), "\x04")
	p.Emit([]byte(before))
	if eof {
		p.end(proto.PTYExit{})
	}
	return nil
}

// Resize implements core.PTY.
func (p *FakePTY) Resize(_ context.Context, rows, cols int) error {
	if p.o.Watch != "" {
		return apierr.New(apierr.InvalidParams, "the pty watches a tool: its size is the tool's")
	}
	if err := p.live(); err != nil {
		return err
	}
	p.Emit(fmt.Appendf(nil, "[size %dx%d]\r\n", rows, cols))
	return nil
}

// Ack implements core.PTY.
func (p *FakePTY) Ack(n int) { p.acked.Add(int64(n)) }

// Close implements core.PTY.
func (p *FakePTY) Close(context.Context) (proto.PTYExit, error) {
	st := proto.PTYExit{ExitCode: 129, Signal: "SIGHUP"}
	if p.o.Watch != "" {
		st = proto.PTYExit{}
	}
	return p.end(st), nil
}

func (p *FakePTY) live() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended {
		return apierr.New(apierr.NotFound, "unknown pty: it ended")
	}
	return nil
}

// end ends the PTY once and returns how it ended.
func (p *FakePTY) end(st proto.PTYExit) proto.PTYExit {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return st
	}
	p.ended = true
	p.h.Exit(st)
	p.mu.Unlock()
	s := p.s
	s.mu.Lock()
	for i, q := range s.ptys {
		if q == p {
			s.ptys = append(s.ptys[:i], s.ptys[i+1:]...)
			break
		}
	}
	s.mu.Unlock()
	return st
}

// watchTerminal shows a terminal command and its output to the watchers.
func (s *FakeSandbox) watchTerminal(command, out string) {
	text := []byte("$ " + command + "\r\n" + strings.ReplaceAll(out, "\n", "\r\n"))
	for _, p := range s.PTYs() {
		if p.o.Watch == "terminal" {
			p.Emit(text)
		}
	}
}

// endPTYs ends the PTYs of a session that ended.
func (s *FakeSandbox) endPTYs() {
	for _, p := range s.PTYs() {
		p.end(proto.PTYExit{ExitCode: -1, Error: "agent connection ended: the session closed"})
	}
}
