package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime/debug"
	"sync"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// conn is the agent side of one connection: a read loop that dispatches
// frames, a goroutine per request, and one lock that serialises writes.
type conn struct {
	s   *Server
	rwc io.ReadWriteCloser
	log *slog.Logger

	ctx    context.Context // ends when the connection or the server ends
	cancel context.CancelFunc

	wmu  sync.Mutex // one frame at a time on the wire
	werr error

	mu        sync.Mutex
	calls     map[uint64]context.CancelFunc // requests in flight, by id
	transfers map[string]transfer
	ptys      map[uint64]*agentPTY // nil while one starts
	streams   map[uint64]*streamer // paced streaming calls, by id

	wg        sync.WaitGroup // request goroutines
	closeOnce sync.Once
}

// transfer is an upload or download in progress on a connection.
type transfer interface{ abort(error) }

func newConn(s *Server, rwc io.ReadWriteCloser) *conn {
	// ctx is made here, not in serve: the server lists the conn (and a
	// shutdown may close it) before serve runs.
	ctx, cancel := context.WithCancel(s.baseCtx)
	return &conn{
		s:         s,
		rwc:       rwc,
		log:       s.log.With("conn", s.connSeq.Add(1)),
		ctx:       ctx,
		cancel:    cancel,
		calls:     map[uint64]context.CancelFunc{},
		transfers: map[string]transfer{},
		streams:   map[uint64]*streamer{},
	}
}

func (c *conn) close() {
	c.closeOnce.Do(func() {
		c.cancel()
		// Closing is how the read loop is stopped; an error (already
		// closed, or the peer gone) changes nothing.
		_ = c.rwc.Close()
	})
}

func (c *conn) serve(ctx context.Context) (err error) {
	stopAfter := context.AfterFunc(ctx, c.close)
	c.log.Info("connection opened")
	defer func() {
		stopAfter()
		c.close()
		c.wg.Wait()
		c.endPTYs()
		c.abortTransfers(proto.ErrDisconnected)
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		c.log.Info("connection closed", "err", err)
	}()

	r := bufio.NewReaderSize(c.rwc, 64<<10)
	var hdr [proto.HeaderSize]byte
	for {
		body, data, rerr := proto.ReadFrame(r, &hdr)
		if rerr != nil {
			switch {
			case errors.Is(rerr, proto.ErrParse): // a whole frame was read: still in sync
				c.log.Warn("ignoring a malformed frame", "err", rerr)
				c.send(&proto.Frame{Error: codes.Wire(rerr)})
				continue
			case c.ctx.Err() != nil:
				return nil // closed by us: shutdown or the caller's ctx
			case errors.Is(rerr, io.EOF), errors.Is(rerr, io.ErrClosedPipe), errors.Is(rerr, net.ErrClosed):
				return nil // the host closed the stream, or someone closed ours
			case errors.Is(rerr, proto.ErrFrameTooLarge):
				// Tell the host why before hanging up: the stream is out
				// of sync and cannot be read any further.
				c.send(&proto.Frame{Error: codes.Wire(rerr)})
				c.log.Error("closing connection: bad frame header", "err", rerr)
				return rerr
			}
			return fmt.Errorf("agent: reading from the connection: %w", rerr)
		}
		var f proto.Frame
		if jerr := json.Unmarshal(body, &f); jerr != nil {
			// The length prefix was fine, so the stream is still in sync:
			// report and go on.
			c.log.Warn("ignoring a frame that is not valid JSON", "err", jerr, "bytes", len(body))
			c.send(&proto.Frame{Error: &proto.Error{Code: proto.CodeParse, Message: fmt.Sprintf(
				"%v: %v (a frame of %d bytes was ignored)", proto.ErrParse, jerr, len(body))}})
			continue
		}
		f.Data = data
		c.dispatch(&f)
	}
}

// dispatch handles one decoded frame. It never blocks on a tool: requests
// that do real work run on their own goroutine, so the read loop stays free
// to receive cancel notifications.
func (c *conn) dispatch(f *proto.Frame) {
	switch {
	case f.ID == 0 && f.Method != "":
		c.notification(f)
		return
	case f.ID == 0 || f.Method == "":
		c.log.Warn("ignoring a frame that is neither request nor notification", "id", f.ID)
		c.send(&proto.Frame{ID: f.ID, Error: &proto.Error{Code: proto.CodeInvalidRequest, Message: fmt.Sprintf(
			"%v: frames sent to the agent must be requests (id and method) or notifications (method only)", proto.ErrInvalidRequest)}})
		return
	}
	h, ok := handlers[f.Method]
	if !ok {
		c.reply(f.ID, nil, &proto.Error{Code: proto.CodeMethodNotFound, Message: fmt.Sprintf(
			"%v: %q; the agent knows %s", proto.ErrMethodNotFound, f.Method, methodList)})
		return
	}
	if h.inline {
		c.run(context.Background(), f, h) // cheap and non-blocking: answer from the read loop
		return
	}
	if f.Method != proto.MethodShutdown && !c.s.beginWork() {
		c.reply(f.ID, nil, fmt.Errorf("%w: request %q refused", proto.ErrShuttingDown, f.Method))
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	c.mu.Lock()
	if _, dup := c.calls[f.ID]; dup {
		c.mu.Unlock()
		cancel()
		c.endWork(f.Method)
		c.reply(f.ID, nil, &proto.Error{Code: proto.CodeInvalidRequest, Message: fmt.Sprintf(
			"%v: id %d is already in flight on this connection; ids must be unique", proto.ErrInvalidRequest, f.ID)})
		return
	}
	c.calls[f.ID] = cancel
	c.mu.Unlock()

	if n := c.s.queued.Add(1); n > int64(c.s.opts.MaxQueuedRequests) {
		c.s.queued.Add(-1)
		c.forget(f.ID)
		cancel()
		c.endWork(f.Method)
		c.reply(f.ID, nil, fmt.Errorf("%w: %d requests are already queued (limit %d); retry later", proto.ErrBusy, n-1, c.s.opts.MaxQueuedRequests))
		return
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		defer c.endWork(f.Method)
		defer c.s.queued.Add(-1)
		defer cancel()
		if h.bounded {
			select {
			case c.s.sem <- struct{}{}:
				defer func() { <-c.s.sem }()
			case <-ctx.Done():
				c.forget(f.ID)
				c.reply(f.ID, nil, ctx.Err())
				return
			}
		}
		c.run(ctx, f, h)
	}()
}

func (c *conn) endWork(method string) {
	if method != proto.MethodShutdown {
		c.s.work.Done()
	}
}

// run calls the handler with panic recovery and sends the one response.
func (c *conn) run(ctx context.Context, f *proto.Frame, h handler) {
	result, err := c.safeCall(ctx, f, h)
	c.forget(f.ID)
	if h.after != nil {
		defer h.after(c) // after the reply is on the wire
	}
	c.reply(f.ID, result, err)
}

func (c *conn) safeCall(ctx context.Context, f *proto.Frame, h handler) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			what := "method " + f.Method
			if f.Method == proto.MethodToolsCall {
				var cp proto.CallParams
				_ = json.Unmarshal(f.Params, &cp)
				what = fmt.Sprintf("tool %q", cp.Name)
			}
			c.log.Error("recovered a panic", "what", what, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			result, err = nil, fmt.Errorf("%w: %s panicked: %v (the agent recovered and keeps serving)", proto.ErrInternal, what, p)
		}
	}()
	return h.fn(ctx, c, f)
}

func (c *conn) forget(id uint64) {
	c.mu.Lock()
	delete(c.calls, id)
	c.mu.Unlock()
}

func (c *conn) notification(f *proto.Frame) {
	switch f.Method {
	case proto.MethodCancel:
		var p proto.CancelParams
		if err := json.Unmarshal(f.Params, &p); err != nil {
			c.log.Warn("ignoring a cancel with bad params", "err", err)
			return
		}
		c.mu.Lock()
		cancel := c.calls[p.ID]
		c.mu.Unlock()
		if cancel != nil {
			c.log.Debug("request cancelled by the host", "id", p.ID)
			cancel()
		}
	case proto.MethodAbort:
		var p proto.TransferParams
		if err := json.Unmarshal(f.Params, &p); err != nil {
			c.log.Warn("ignoring an abort with bad params", "err", err)
			return
		}
		if t := c.takeTransfer(p.Transfer); t != nil {
			t.abort(fmt.Errorf("transfer %s aborted by the host", p.Transfer))
		}
	case proto.MethodPTYAck:
		c.ptyAck(f)
	case proto.MethodStreamAck:
		var p proto.StreamAckParams
		if err := json.Unmarshal(f.Params, &p); err != nil || p.Bytes <= 0 {
			c.log.Warn("ignoring a stream ack with bad params", "params", string(f.Params))
			return
		}
		c.mu.Lock()
		st := c.streams[p.ID]
		c.mu.Unlock()
		if st != nil {
			st.ack(p.Bytes)
		}
	default:
		c.log.Warn("ignoring an unknown notification", "method", f.Method)
	}
}

// withData is a handler result whose payload travels as the response
// frame's binary data.
type withData struct {
	result any
	data   []byte
}

// reply sends the response of request id: the result, or err as a protocol
// error. A result too large for a frame becomes an error response, so the
// host always gets its one answer.
func (c *conn) reply(id uint64, result any, err error) {
	f := &proto.Frame{ID: id}
	if wd, ok := result.(withData); ok {
		result, f.Data = wd.result, wd.data
	}
	if err == nil {
		raw, merr := json.Marshal(result)
		if merr != nil {
			err = fmt.Errorf("%w: encoding the result: %v", proto.ErrInternal, merr)
		} else {
			f.Result = raw
		}
	}
	if err != nil {
		f.Result, f.Data, f.Error = nil, nil, codes.Wire(err)
	}
	if werr := c.write(f); errors.Is(werr, proto.ErrFrameTooLarge) {
		c.send(&proto.Frame{ID: id, Error: codes.Wire(fmt.Errorf("the result does not fit in a frame: %w", werr))})
	}
}

// notify sends a notification (no id) with an optional binary payload.
func (c *conn) notify(method string, params any, data []byte) error {
	raw, err := json.Marshal(params)
	if err != nil {
		return err
	}
	return c.write(&proto.Frame{Method: method, Params: raw, Data: data})
}

// send writes a frame nobody waits on the outcome of (an error report, a
// response). Its error needs no handling here: a failed write has already
// closed the connection (see write), which ends the read loop and fails
// what is pending; an unencodable frame has been logged.
func (c *conn) send(f *proto.Frame) {
	_ = c.write(f)
}

// write sends one frame. A write error means the peer is gone: the
// connection is closed so the read loop ends too.
func (c *conn) write(f *proto.Frame) error {
	buf, err := proto.EncodeFrame(f)
	if err != nil {
		c.log.Error("cannot encode a frame", "id", f.ID, "method", f.Method, "err", err)
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return c.werr
	}
	if _, err := c.rwc.Write(buf); err != nil {
		c.werr = fmt.Errorf("%w: write: %v", proto.ErrDisconnected, err)
		c.close()
		return c.werr
	}
	return nil
}

func (c *conn) addTransfer(id string, t transfer) {
	c.mu.Lock()
	c.transfers[id] = t
	c.mu.Unlock()
}

func (c *conn) takeTransfer(id string) transfer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.transfers[id]
	delete(c.transfers, id)
	return t
}

func (c *conn) lookupTransfer(id string) (transfer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t, ok := c.transfers[id]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("%w %q: it finished, was aborted, or belongs to another connection", proto.ErrUnknownTransfer, id)
}

func (c *conn) abortTransfers(err error) {
	c.mu.Lock()
	ts := c.transfers
	c.transfers = map[string]transfer{}
	c.mu.Unlock()
	for _, t := range ts {
		t.abort(err)
	}
}
