package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// PTYHandler receives a PTY's output and its end, on the client's read loop
// (Exit also on the goroutine that ends a lost connection): they must not
// block. Output's data is the handler's to keep. The agent sends at most
// PTYWindow bytes ahead of the host's acknowledgements: the handler calls
// PTY.Ack(len(data)) once it has passed the bytes on (written them to its
// client), so a slow consumer slows the program instead of growing a
// buffer. Exit comes once, after the last Output.
type PTYHandler struct {
	Output func(data []byte)
	Exit   func(proto.PTYExit)
}

// PTY is a PTY open on the agent: a program on a pseudo-terminal of its
// own (beside the terminal tool, not inside it), or a read-only view of a
// tool's output. It ends when its program exits, on Close, or when the
// connection ends (the agent then ends its process group).
type PTY struct {
	c      *Client
	id     uint64
	h      PTYHandler
	opened proto.PTYOpened

	once sync.Once
	done chan struct{}
	exit proto.PTYExit
}

// OpenPTY opens a PTY; h receives its output and end, which may come before
// OpenPTY returns.
func (c *Client) OpenPTY(ctx context.Context, o proto.PTYOptions, h PTYHandler) (*PTY, error) {
	if err := o.Validate(); err != nil {
		return nil, &MethodError{Method: proto.MethodPTYOpen, Err: err}
	}
	if h.Output == nil || h.Exit == nil {
		return nil, &MethodError{Method: proto.MethodPTYOpen, Err: errors.New("the handler needs Output and Exit")}
	}
	p := &PTY{c: c, id: c.ptySeq.Add(1), h: h, done: make(chan struct{})}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, &MethodError{Method: proto.MethodPTYOpen, Err: err}
	}
	if c.ptys == nil {
		c.ptys = map[uint64]*PTY{}
	}
	c.ptys[p.id] = p // before the request: output may precede the answer
	c.mu.Unlock()
	raw, err := c.roundTrip(ctx, proto.MethodPTYOpen, proto.PTYOpenParams{PTY: p.id, PTYOptions: o}, nil)
	if err != nil {
		c.forgetPTY(p.id)
		if ctx.Err() != nil {
			// The agent may have started it after all: nobody would
			// close it until the connection ends.
			c.notifyCloseAsync(p.id)
		}
		return nil, err
	}
	if err := json.Unmarshal(raw, &p.opened); err != nil {
		c.forgetPTY(p.id)
		c.notifyCloseAsync(p.id)
		return nil, &MethodError{Method: proto.MethodPTYOpen, Err: fmt.Errorf("decoding the result: %w", err)}
	}
	return p, nil
}

// Opened says what the PTY runs: its process id in the sandbox and argv.
func (p *PTY) Opened() proto.PTYOpened { return p.opened }

// Done is closed once the PTY has ended (after its handler's Exit).
func (p *PTY) Done() <-chan struct{} { return p.done }

// Input sends bytes to the program, as typed. Inputs reach it in the order
// of the calls that sent them: a caller that needs an order calls Input
// from one goroutine. A program that does not read its input makes the
// agent refuse more past a bound (ErrBusy).
func (p *PTY) Input(ctx context.Context, data []byte) error {
	if len(data) == 0 {
		return nil
	}
	_, err := p.c.exchange(ctx, proto.MethodPTYInput, proto.PTYRef{PTY: p.id}, data, nil)
	return err
}

// Resize sets the terminal's size; the program gets SIGWINCH.
func (p *PTY) Resize(ctx context.Context, rows, cols int) error {
	_, err := p.c.roundTrip(ctx, proto.MethodPTYResize, proto.PTYResizeParams{PTY: p.id, Rows: rows, Cols: cols}, nil)
	return err
}

// Close ends the PTY: its session's processes get SIGHUP, then SIGKILL
// after a grace period. It returns how the program ended, after the
// handler's Exit.
func (p *PTY) Close(ctx context.Context) (proto.PTYExit, error) {
	select {
	case <-p.done:
		return p.exit, nil
	default:
	}
	raw, err := p.c.roundTrip(ctx, proto.MethodPTYClose, proto.PTYRef{PTY: p.id}, nil)
	if err != nil {
		select {
		case <-p.done: // it ended meanwhile (unknown pty)
			return p.exit, nil
		default:
		}
		return proto.PTYExit{}, err
	}
	var st proto.PTYExit
	if err := json.Unmarshal(raw, &st); err != nil {
		return proto.PTYExit{}, &MethodError{Method: proto.MethodPTYClose, Err: fmt.Errorf("decoding the result: %w", err)}
	}
	return st, nil
}

// Ack returns n bytes of the PTY's output window to the agent (see
// PTYHandler). It never blocks.
func (p *PTY) Ack(n int) {
	if n <= 0 {
		return
	}
	raw, _ := json.Marshal(proto.PTYAckParams{PTY: p.id, Bytes: n})
	p.c.notifyAsync(&proto.Frame{Method: proto.MethodPTYAck, Params: raw})
}

// ended delivers the PTY's end once.
func (p *PTY) ended(st proto.PTYExit) {
	p.once.Do(func() {
		p.exit = st
		p.h.Exit(st)
		close(p.done)
	})
}

func (c *Client) forgetPTY(id uint64) {
	c.mu.Lock()
	delete(c.ptys, id)
	c.mu.Unlock()
}

func (c *Client) lookupPTY(id uint64) *PTY {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ptys[id]
}

// notifyCloseAsync closes a PTY nobody holds, without waiting: a
// pty/close request whose answer nobody reads.
func (c *Client) notifyCloseAsync(id uint64) {
	raw, _ := json.Marshal(proto.PTYRef{PTY: id})
	c.notifyAsync(&proto.Frame{ID: c.nextID.Add(1), Method: proto.MethodPTYClose, Params: raw})
}

// ptyOutput routes a pty/output notification (read loop).
func (c *Client) ptyOutput(f *proto.Frame) {
	var op proto.PTYOutputParams
	if err := json.Unmarshal(f.Params, &op); err != nil {
		c.log.Warn("ignoring a pty/output notification with bad params", "err", err)
		return
	}
	p := c.lookupPTY(op.PTY)
	if p == nil {
		return // closed meanwhile
	}
	data := f.Data
	if data == nil {
		data = op.Data
	}
	p.h.Output(data)
}

// ptyExit routes a pty/exit notification (read loop).
func (c *Client) ptyExit(f *proto.Frame) {
	var ep proto.PTYExitParams
	if err := json.Unmarshal(f.Params, &ep); err != nil {
		c.log.Warn("ignoring a pty/exit notification with bad params", "err", err)
		return
	}
	c.mu.Lock()
	p := c.ptys[ep.PTY]
	delete(c.ptys, ep.PTY)
	c.mu.Unlock()
	if p != nil {
		p.ended(ep.PTYExit)
	}
}

// endPTYs ends every PTY of a connection that ended.
func (c *Client) endPTYs(why error) {
	c.mu.Lock()
	ptys := c.ptys
	c.ptys = nil
	c.mu.Unlock()
	for _, p := range ptys {
		p.ended(proto.PTYExit{ExitCode: -1, Error: why.Error()})
	}
}
