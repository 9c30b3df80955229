package wsapi

import (
	"context"
	"encoding/json"
	"strconv"
	"sync"
	"time"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/wsproto"
)

// PTYs of a connection (pty.open, pty.input, pty.resize, pty.close). A PTY
// belongs to the connection that opened it and is closed when it ends.
//
// Order: pty.input and pty.resize are ordered methods: the read loop hands
// them to their PTY's queue as they arrive, and one goroutine per PTY runs
// them in that order (the agent applies them in the order it gets them).
//
// Flow control, end to end: the agent sends at most proto.PTYWindow bytes
// of output ahead of acknowledgements; a PTY here has at most one
// pty.output in the connection's queue and acknowledges its bytes to the
// agent once the socket took it. So a client that reads slowly slows the
// program down (its writes block, as on a slow terminal) and no buffer on
// the way holds more than the window.

// ptyOutputChunk is the most one pty.output carries.
const ptyOutputChunk = 64 << 10

// ptyQueue bounds the inputs and resizes waiting for a PTY (a client may
// send them without waiting for answers); more are refused as busy. Their
// bytes count against the connection's bound of requests in flight.
const ptyQueue = 256

// ptyCloseTimeout bounds the close of a connection's PTYs when it ends.
const ptyCloseTimeout = 10 * time.Second

// orderedMethods run on the read loop, in arrival order. They must not
// block: they queue their work and answer from elsewhere.
var orderedMethods = map[string]func(c *conn, req *wsproto.Request, size int64){
	wsproto.MethodPTYInput:  ptyInput,
	wsproto.MethodPTYResize: ptyResize,
}

// wsPTY is one PTY of the connection.
type wsPTY struct {
	id string
	c  *conn
	p  core.PTY // set once open returns, before output is sent or w is listed

	ops chan ptyOp // inputs and resizes, in order

	mu       sync.Mutex
	opened   bool   // the open's answer is queued: output may follow
	buf      []byte // output not yet queued
	inFlight int    // bytes of the pty.output in the queue (0: none)
	seq      uint64
	exited   *proto.PTYExit // the PTY ended; pty.exit goes after buf
	ended    bool           // pty.exit is queued
	noOps    bool           // runOps has stopped: ops are refused
	done     chan struct{}  // closed with ended
}

// ptyOp is a queued pty.input or pty.resize.
type ptyOp struct {
	req        *wsproto.Request
	size       int64 // admitted bytes, released when done
	data       []byte
	rows, cols int
	resize     bool
}

func (c *conn) newPTYID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ptySeq++
	return "pty-" + c.id + "-" + strconv.FormatUint(c.ptySeq, 10)
}

func ptyOpen(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.PTYOpenParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	o := proto.PTYOptions{Rows: p.Rows, Cols: p.Cols, Command: p.Command}
	if p.Follow {
		if len(p.Command) > 0 {
			return nil, apierr.New(apierr.InvalidParams, "follow opens a view of the agent's terminal: it takes no command")
		}
		o = proto.PTYOptions{Watch: "terminal"}
	}
	if err := o.Validate(); err != nil {
		return nil, apierr.Wrap(apierr.InvalidParams, err, "invalid params for "+req.Method)
	}
	s, err := c.session(p.SessionRef)
	if err != nil {
		return nil, err
	}
	w := &wsPTY{id: c.newPTYID(), c: c, ops: make(chan ptyOp, ptyQueue), done: make(chan struct{})}
	// Output may come before OpenPTY returns: w holds it until the answer
	// is queued.
	pt, err := s.OpenPTY(c.ctx, o, agentclient.PTYHandler{Output: w.output, Exit: w.exit})
	if err != nil {
		return nil, err
	}
	w.p = pt
	c.mu.Lock()
	if c.ctx.Err() != nil {
		// The connection ended while the PTY opened; its closePTYs may
		// have run already (it lists the PTYs after the cancel).
		c.mu.Unlock()
		closePTY(pt)
		return nil, c.ctx.Err()
	}
	if c.ptys == nil {
		c.ptys = map[string]*wsPTY{}
	}
	c.ptys[w.id] = w
	c.mu.Unlock()
	go w.runOps()
	op := pt.Opened()
	w.mu.Lock()
	c.reply(req.ID, &wsproto.PTYOpenResult{PTYID: w.id, PID: op.PID, Command: op.Command}) // output and the end follow the answer
	w.opened = true
	w.pump()
	w.mu.Unlock()
	return nil, errResponded
}

func (c *conn) forgetPTY(w *wsPTY) {
	c.mu.Lock()
	if c.ptys[w.id] == w {
		delete(c.ptys, w.id)
	}
	c.mu.Unlock()
}

func (c *conn) lookupPTY(id string) (*wsPTY, error) {
	if id == "" {
		return nil, apierr.New(apierr.InvalidParams, "pty_id is required")
	}
	c.mu.Lock()
	w := c.ptys[id]
	c.mu.Unlock()
	if w == nil {
		return nil, apierr.New(apierr.NotFound, "pty %q: no such pty on this connection (it ended, or another connection opened it)", id)
	}
	return w, nil
}

// output takes a chunk of the PTY's output (the agent client's read loop).
func (w *wsPTY) output(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	w.pump()
}

// exit takes the PTY's end; pty.exit follows the output still held.
func (w *wsPTY) exit(st proto.PTYExit) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.exited = &st
	w.pump()
}

// pump queues the next pty.output, or the pty.exit once all output is
// out; called with mu held. One message at a time is in the queue: the
// next goes when the socket took it (written).
func (w *wsPTY) pump() {
	if !w.opened || w.inFlight > 0 || w.ended {
		return
	}
	if len(w.buf) == 0 {
		if w.exited != nil {
			w.ended = true
			st := *w.exited
			w.c.send(&wsproto.Notification{JSONRPC: wsproto.Version, Method: wsproto.NotifyPTYExit, Params: &wsproto.PTYExit{
				PTYID: w.id, PTYStatus: wsproto.PTYStatus{ExitCode: st.ExitCode, Signal: st.Signal, Error: st.Error},
			}})
			w.c.forgetPTY(w)
			close(w.done)
		}
		return
	}
	n := min(len(w.buf), ptyOutputChunk)
	w.seq++
	msg, err := json.Marshal(&wsproto.Notification{JSONRPC: wsproto.Version, Method: wsproto.NotifyPTYOutput, Params: &wsproto.PTYOutput{
		PTYID: w.id, Seq: w.seq, Data: w.buf[:n],
	}})
	if err != nil { // cannot happen: bytes and strings
		w.c.log.Error("marshal pty output", "err", err)
		return
	}
	w.buf = w.buf[n:]
	if len(w.buf) == 0 {
		w.buf = nil // let a burst's memory go
	}
	w.inFlight = n
	w.c.enqueueThen(msg, w.written)
}

// written runs on the connection's writer once a pty.output is on the
// socket: its bytes go back to the agent's window, and the next follows.
func (w *wsPTY) written() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.p.Ack(w.inFlight)
	w.inFlight = 0
	w.pump()
}

// runOps runs the queued inputs and resizes in order until the PTY ends;
// what is queued then is answered with not found.
func (w *wsPTY) runOps() {
	for {
		select {
		case op := <-w.ops:
			w.do(op)
		case <-w.done:
			w.drainOps()
			return
		case <-w.c.ctx.Done():
			w.drainOps()
			return
		}
	}
}

func (w *wsPTY) drainOps() {
	w.mu.Lock()
	w.noOps = true
	w.mu.Unlock()
	for {
		select {
		case op := <-w.ops:
			w.c.replyError(op.req.ID, apierr.New(apierr.NotFound, "pty %q ended", w.id))
			w.c.release(op.size)
		default:
			return
		}
	}
}

func (w *wsPTY) do(op ptyOp) {
	defer w.c.release(op.size)
	var err error
	if op.resize {
		err = w.p.Resize(w.c.ctx, op.rows, op.cols)
	} else {
		err = w.p.Input(w.c.ctx, op.data)
	}
	if err != nil {
		w.c.replyError(op.req.ID, err)
		return
	}
	w.c.reply(op.req.ID, struct{}{})
}

// queuePTYOp hands an op to its PTY, or answers at once why it cannot.
func (c *conn) queuePTYOp(id string, op ptyOp) {
	w, err := c.lookupPTY(id)
	if err != nil {
		c.replyError(op.req.ID, err)
		return
	}
	if err := c.admit(op.size); err != nil {
		c.replyError(op.req.ID, err)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.noOps {
		c.release(op.size)
		c.replyError(op.req.ID, apierr.New(apierr.NotFound, "pty %q ended", id))
		return
	}
	select {
	case w.ops <- op:
	default:
		c.release(op.size)
		c.replyError(op.req.ID, apierr.New(apierr.Busy, "pty %q has %d inputs and resizes waiting; retry when they are answered", id, ptyQueue))
	}
}

func ptyInput(c *conn, req *wsproto.Request, size int64) {
	var p wsproto.PTYInputParams
	if err := decode(req, &p); err != nil {
		c.replyError(req.ID, err)
		return
	}
	if len(p.Data) > wsproto.MaxPTYInput {
		c.replyError(req.ID, apierr.New(apierr.InvalidParams, "pty.input carries %d bytes; the limit is %d: send a paste in pieces", len(p.Data), wsproto.MaxPTYInput))
		return
	}
	c.queuePTYOp(p.PTYID, ptyOp{req: req, size: size, data: p.Data})
}

func ptyResize(c *conn, req *wsproto.Request, size int64) {
	var p wsproto.PTYResizeParams
	if err := decode(req, &p); err != nil {
		c.replyError(req.ID, err)
		return
	}
	if p.Rows < 1 || p.Rows > proto.MaxPTYSize || p.Cols < 1 || p.Cols > proto.MaxPTYSize {
		c.replyError(req.ID, apierr.New(apierr.InvalidParams, "rows and cols must be 1 to %d, got %dx%d", proto.MaxPTYSize, p.Rows, p.Cols))
		return
	}
	c.queuePTYOp(p.PTYID, ptyOp{req: req, size: size, rows: p.Rows, cols: p.Cols, resize: true})
}

func ptyClose(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.PTYRef
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	w, err := c.lookupPTY(p.PTYID)
	if err != nil {
		return nil, err
	}
	st, err := w.p.Close(c.ctx)
	if err != nil {
		return nil, err
	}
	select { // the answer comes after the PTY's pty.exit
	case <-w.done:
	case <-c.ctx.Done():
	}
	return &wsproto.PTYStatus{ExitCode: st.ExitCode, Signal: st.Signal, Error: st.Error}, nil
}

// closePTYs closes every PTY of a connection that ended.
func (c *conn) closePTYs() {
	c.mu.Lock()
	ws := make([]*wsPTY, 0, len(c.ptys))
	for _, w := range c.ptys {
		ws = append(ws, w)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { closePTY(w.p) })
	}
	wg.Wait()
}

func closePTY(p core.PTY) {
	ctx, cancel := context.WithTimeout(context.Background(), ptyCloseTimeout)
	defer cancel()
	_, _ = p.Close(ctx) // the connection is gone: nobody to tell how it ended
}
