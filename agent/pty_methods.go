package agent

import (
	"context"
	"fmt"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// The handlers of the pty/* methods and notifications (see package proto).

func handlePTYOpen(_ context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.PTYOpenParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	if p.PTY == 0 {
		return nil, fmt.Errorf("%w: pty/open needs a pty id (not 0)", proto.ErrInvalidParams)
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	t := &agentPTY{
		id: p.PTY, c: c, log: c.log.With("pty", p.PTY),
		credit: make(chan struct{}, 1), inputReq: make(chan struct{}, 1),
		exited: make(chan struct{}), drainBy: make(chan struct{}),
		pumpDone: make(chan struct{}), done: make(chan struct{}),
	}
	if err := c.s.reservePTY(c, t.id); err != nil {
		return nil, err
	}
	opened, err := t.start(p.PTYOptions)
	if err != nil {
		c.s.releasePTY(c, t.id)
		return nil, err
	}
	c.addPTY(t)
	c.log.Info("pty opened", "pty", t.id, "pid", opened.PID, "command", opened.Command, "watch", p.Watch)
	return opened, nil
}

func handlePTYInput(_ context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.PTYInputParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	t, err := c.lookupPTY(p.PTY)
	if err != nil {
		return nil, err
	}
	data := f.Data // readFrame allocates each frame: the bytes may be kept
	if data == nil {
		data = p.Data
	}
	return struct{}{}, t.addInput(data)
}

func handlePTYResize(_ context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.PTYResizeParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	t, err := c.lookupPTY(p.PTY)
	if err != nil {
		return nil, err
	}
	return struct{}{}, t.resize(p.Rows, p.Cols)
}

func handlePTYClose(_ context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.PTYRef
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	t, err := c.lookupPTY(p.PTY)
	if err != nil {
		return nil, err
	}
	t.end()
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.status, nil
}

// ptyAck handles a pty/ack notification.
func (c *conn) ptyAck(f *proto.Frame) {
	var p proto.PTYAckParams
	if err := decodeParams(f, &p); err != nil {
		c.log.Warn("ignoring a pty/ack with bad params", "err", err)
		return
	}
	if t, err := c.lookupPTY(p.PTY); err == nil && p.Bytes > 0 {
		t.ack(p.Bytes)
	}
}
