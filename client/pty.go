package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/wsproto"
)

// PTYOptions are the options of a PTY (see wsproto.PTYOpenParams): Rows
// and Cols (1 to 1000) unless Follow; Command, the argv to run (default:
// the session user's login shell); Follow, a read-only view of the agent's
// terminal tool instead.
type PTYOptions struct {
	Rows, Cols int
	Command    []string
	Follow     bool
}

// ptyBuffer is how much output a PTY holds for its reader. Past it the
// client stops reading the connection until Read takes some: the server,
// then the program, wait (flow control), nothing is dropped. A PTY that is
// not read thus stalls the whole connection once it holds this much.
const ptyBuffer = 1 << 20

// ErrPTYEnded is what Write, Resize and Close return once the PTY has
// ended (its program exited, it was closed, or the connection was lost);
// Status says how.
var ErrPTYEnded = errors.New("the pty has ended")

// PTY is a PTY open in a session: a program on a pseudo-terminal of its own
// (beside the agent's terminal tool), or a follower of the agent's
// terminal. Read its output (raw terminal bytes) and Write its input; it is
// an io.ReadWriteCloser. It belongs to this client's connection: a lost
// connection ends it (it does not resume after a reconnect).
type PTY struct {
	c *Client
	// ID is the PTY's id on the connection; PID and Command say what it
	// runs in the sandbox (neither for a follower).
	ID      string
	PID     int
	Command []string

	wmu sync.Mutex // one Write at a time: inputs keep their order

	mu      sync.Mutex
	buf     []byte
	closing bool // Close was called: unread output is dropped, never waited for
	status  *wsproto.PTYStatus
	more    chan struct{} // capacity 1: output or the end arrived
	room    chan struct{} // capacity 1: Read took output
	done    chan struct{}
}

// OpenPTY opens a PTY in the session.
func (s *Session) OpenPTY(ctx context.Context, o PTYOptions) (*PTY, error) {
	p := &PTY{c: s.c, more: make(chan struct{}, 1), room: make(chan struct{}, 1), done: make(chan struct{})}
	var r wsproto.PTYOpenResult
	// The PTY is listed from the read loop, before the output that may
	// follow the answer at once.
	register := func(m wsproto.Message) {
		if m.Error != nil || json.Unmarshal(m.Result, &r) != nil || r.PTYID == "" {
			return
		}
		p.ID = r.PTYID
		s.c.mu.Lock()
		if s.c.ptys == nil {
			s.c.ptys = map[string]*PTY{}
		}
		s.c.ptys[r.PTYID] = p
		s.c.mu.Unlock()
	}
	_, err := s.c.callHook(ctx, s.c.newID(), wsproto.MethodPTYOpen, wsproto.PTYOpenParams{
		SessionRef: s.ref(), Rows: o.Rows, Cols: o.Cols, Command: o.Command, Follow: o.Follow,
	}, nil, register)
	if err != nil {
		if r.PTYID != "" { // answered after ctx ended: nobody would close it
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				_, _ = p.CloseContext(ctx) // best effort: the caller has its error
			}()
		}
		return nil, err
	}
	p.PID, p.Command = r.PID, r.Command
	return p, nil
}

// Read reads the PTY's output: raw terminal bytes, escape sequences
// included. After the end, once all output is read, it returns io.EOF.
func (p *PTY) Read(b []byte) (int, error) {
	for {
		p.mu.Lock()
		if len(p.buf) > 0 {
			n := copy(b, p.buf)
			p.buf = p.buf[n:]
			if len(p.buf) == 0 {
				p.buf = nil
			}
			p.mu.Unlock()
			signal(p.room)
			return n, nil
		}
		ended := p.status != nil
		p.mu.Unlock()
		if ended {
			return 0, io.EOF
		}
		<-p.more
	}
}

// Write sends b to the program as typed input, in pieces of at most
// wsproto.MaxPTYInput, each answered before the next is sent (concurrent
// Writes are serialised). It returns ErrPTYEnded after the end.
func (p *PTY) Write(b []byte) (int, error) {
	return p.WriteContext(context.Background(), b)
}

// WriteContext is Write bounded by ctx.
func (p *PTY) WriteContext(ctx context.Context, b []byte) (int, error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	n := 0
	for n < len(b) {
		piece := b[n:min(len(b), n+wsproto.MaxPTYInput)]
		if err := p.call(ctx, wsproto.MethodPTYInput, wsproto.PTYInputParams{PTYID: p.ID, Data: piece}, nil); err != nil {
			return n, err
		}
		n += len(piece)
	}
	return n, nil
}

// Resize sets the terminal's size (rows and cols, 1 to 1000); the program
// gets SIGWINCH.
func (p *PTY) Resize(ctx context.Context, rows, cols int) error {
	return p.call(ctx, wsproto.MethodPTYResize, wsproto.PTYResizeParams{PTYID: p.ID, Rows: rows, Cols: cols}, nil)
}

// Close ends the PTY (the program gets SIGHUP, then SIGKILL) and waits up
// to 30 s for its end.
func (p *PTY) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.CloseContext(ctx)
	return err
}

// CloseContext ends the PTY and returns how its program ended; output not
// read yet is dropped. Closing an ended PTY returns its status.
func (p *PTY) CloseContext(ctx context.Context) (wsproto.PTYStatus, error) {
	if st, ended := p.Status(); ended {
		return st, nil
	}
	p.mu.Lock()
	p.closing, p.buf = true, nil // the read loop must not wait for a Read now
	p.mu.Unlock()
	signal(p.room)
	var st wsproto.PTYStatus
	err := p.call(ctx, wsproto.MethodPTYClose, wsproto.PTYRef{PTYID: p.ID}, &st)
	if errors.Is(err, ErrPTYEnded) {
		st, _ = p.Status()
		return st, nil
	}
	return st, err
}

// Done is closed when the PTY has ended; its output may still be unread.
func (p *PTY) Done() <-chan struct{} { return p.done }

// Status says how the PTY ended, and whether it has.
func (p *PTY) Status() (wsproto.PTYStatus, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.status == nil {
		return wsproto.PTYStatus{}, false
	}
	return *p.status, true
}

// call makes a request about the PTY; a not-found answer after its end is
// ErrPTYEnded.
func (p *PTY) call(ctx context.Context, method string, params, out any) error {
	if _, ended := p.Status(); ended {
		return fmt.Errorf("%s: %w", method, ErrPTYEnded)
	}
	err := p.c.call(ctx, method, params, out)
	var e *wsproto.Error
	if errors.As(err, &e) && e.Code == wsproto.CodeNotFound {
		select {
		case <-p.done:
			return fmt.Errorf("%s: %w", method, ErrPTYEnded)
		case <-time.After(time.Second): // its pty.exit may be on its way
			if _, ended := p.Status(); ended {
				return fmt.Errorf("%s: %w", method, ErrPTYEnded)
			}
		}
	}
	return err
}

// output takes a pty.output (read loop). Past ptyBuffer it waits for Read
// to make room, or for the PTY's end.
func (p *PTY) output(data []byte) {
	for {
		p.mu.Lock()
		if p.closing {
			p.mu.Unlock()
			return
		}
		if len(p.buf) < ptyBuffer || p.status != nil {
			p.buf = append(p.buf, data...)
			p.mu.Unlock()
			signal(p.more)
			return
		}
		p.mu.Unlock()
		select {
		case <-p.room:
		case <-p.done:
		}
	}
}

// end records the PTY's end once.
func (p *PTY) end(st wsproto.PTYStatus) {
	p.mu.Lock()
	if p.status != nil {
		p.mu.Unlock()
		return
	}
	p.status = &st
	p.mu.Unlock()
	close(p.done)
	signal(p.more)
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// ptyNotify routes pty.output and pty.exit (read loop).
func (c *Client) ptyNotify(m wsproto.Message) {
	var ref wsproto.PTYRef
	if json.Unmarshal(m.Params, &ref) != nil {
		return
	}
	c.mu.Lock()
	p := c.ptys[ref.PTYID]
	if m.Method == wsproto.NotifyPTYExit {
		delete(c.ptys, ref.PTYID)
	}
	c.mu.Unlock()
	if p == nil {
		return
	}
	switch m.Method {
	case wsproto.NotifyPTYOutput:
		var o wsproto.PTYOutput
		if json.Unmarshal(m.Params, &o) == nil {
			p.output(o.Data)
		}
	case wsproto.NotifyPTYExit:
		var e wsproto.PTYExit
		if json.Unmarshal(m.Params, &e) == nil {
			p.end(e.PTYStatus)
		}
	}
}

// endPTYs ends every PTY of a connection that was lost.
func (c *Client) endPTYs(why string) {
	c.mu.Lock()
	ptys := c.ptys
	c.ptys = nil
	c.mu.Unlock()
	for _, p := range ptys {
		p.end(wsproto.PTYStatus{ExitCode: -1, Error: why})
	}
}

// Session returns a handle on session id, authorized by its token, without
// attaching to it: its methods (Call, OpenPTY, ...) work, but it receives
// no stream output and is not re-attached after a reconnect. For a client
// that only needs a PTY of the session (sandboxd shell).
func (c *Client) Session(id, token string) *Session { return newSession(c, id, token) }
