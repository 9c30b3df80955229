package wsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/core"
	"github.com/sandboxd/sandboxd/server/wsproto"
)

var connSeq atomic.Uint64

// conn is one client connection. One goroutine reads (and starts a goroutine
// per request), one writes everything from the bounded queue; gorilla allows
// exactly one of each. Close frames go through WriteControl, which may run
// alongside the writer.
type conn struct {
	h      *Handler
	ws     *websocket.Conn
	id     string
	p      core.Principal
	remote string
	log    *slog.Logger

	ctx    context.Context // ends when the connection closes
	cancel context.CancelFunc

	out        chan []byte
	room       chan struct{} // capacity 1: the writer took a message from out
	queued     atomic.Int64  // bytes in out
	inflight   chan struct{}
	inBytes    atomic.Int64 // bytes of the requests running
	handlers   sync.WaitGroup
	active     atomic.Int64  // handlers running (Shutdown polls it; the WaitGroup is for serve)
	closing    chan struct{} // closed by close: the writer flushes, then sends the close frame
	closeOnce  sync.Once
	closeCode  int
	closeWhy   string
	writerDone chan struct{}

	mu       sync.Mutex
	grants   map[string]*core.Session // sessions this connection may use
	attached map[string]*core.Session // sessions whose output it receives
}

func newConn(h *Handler, ws *websocket.Conn, p core.Principal, remote string) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	id := strconv.FormatUint(connSeq.Add(1), 10)
	return &conn{
		h: h, ws: ws, id: id, p: p, remote: remote,
		log:        h.log.With("conn", id),
		ctx:        ctx,
		cancel:     cancel,
		out:        make(chan []byte, h.opts.QueueMessages),
		room:       make(chan struct{}, 1),
		inflight:   make(chan struct{}, h.opts.MaxInFlight),
		writerDone: make(chan struct{}),
		closing:    make(chan struct{}),
		grants:     map[string]*core.Session{},
		attached:   map[string]*core.Session{},
	}
}

// serve runs the connection until it closes.
func (c *conn) serve() {
	go c.writeLoop()
	c.readLoop()
	c.cancel()
	c.handlers.Wait()
	<-c.writerDone
	_ = c.ws.Close()
	c.mu.Lock()
	for _, s := range c.attached {
		s.Detach(c)
	}
	c.mu.Unlock()
}

func (c *conn) readLoop() {
	c.ws.SetReadLimit(c.h.opts.MaxMessageBytes)
	deadline := func() {
		select {
		case <-c.closing: // keep the short deadline of the closing handshake
		default:
			_ = c.ws.SetReadDeadline(time.Now().Add(2*c.h.opts.PingInterval + c.h.opts.WriteTimeout))
		}
	}
	deadline()
	c.ws.SetPongHandler(func(string) error { deadline(); return nil })
	for {
		kind, msg, err := c.ws.ReadMessage()
		if err == nil && kind == websocket.TextMessage && !utf8.Valid(msg) {
			// RFC 6455 8.1: a text frame that is not UTF-8 fails the
			// connection with 1007 (gorilla leaves the check to us).
			c.h.core.Metrics().Error("invalid_utf8", "ws")
			c.abort(websocket.CloseInvalidFramePayloadData, "text frame is not valid UTF-8")
			return
		}
		if err != nil {
			var ce *websocket.CloseError
			switch {
			case errors.Is(err, websocket.ErrReadLimit):
				// gorilla has sent 1009. Read what the client still sends
				// (the rest of the message, its close frame) for a moment,
				// so closing does not reset the connection under it and
				// destroy the close frame before the client reads it.
				c.h.core.Metrics().Error("message_too_big", "ws")
				c.ended(websocket.CloseMessageTooBig, "message too big")
				nc := c.ws.UnderlyingConn()
				_ = nc.SetReadDeadline(time.Now().Add(closeGrace))
				_, _ = io.Copy(io.Discard, io.LimitReader(nc, 2*c.h.opts.MaxMessageBytes))
			case errors.As(err, &ce):
				c.ended(ce.Code, ce.Text)
			default:
				c.ended(websocket.CloseAbnormalClosure, err.Error())
			}
			return
		}
		deadline()
		c.dispatch(msg)
	}
}

// ended records why the connection ended when the read side saw it end.
func (c *conn) ended(code int, why string) {
	c.closeOnce.Do(func() { c.closeCode, c.closeWhy = code, why })
	c.cancel()
}

func (c *conn) closeReason() string {
	return strconv.Itoa(c.closeCode) + " " + c.closeWhy
}

// close closes gracefully: the writer sends what is queued, then the close
// frame, and the read loop waits a moment for the client's.
func (c *conn) close(code int, why string) {
	c.closeOnce.Do(func() {
		c.closeCode, c.closeWhy = code, why
		close(c.closing)
	})
}

// abort drops the connection now (a client too slow to take more): a close
// frame if the socket takes one within closeGrace, then the socket closes.
func (c *conn) abort(code int, why string) {
	c.closeOnce.Do(func() {
		c.closeCode, c.closeWhy = code, why
		c.cancel()
		_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, why), time.Now().Add(closeGrace))
		_ = c.ws.Close()
	})
}

// shutdown lets the requests of this connection answer (their calls are
// done or cancelled by now), then closes it with 1001.
func (c *conn) shutdown(ctx context.Context) {
	wait := time.NewTimer(closeGrace)
	defer wait.Stop()
	for c.active.Load() > 0 {
		select {
		case <-ctx.Done():
		case <-wait.C:
		case <-time.After(5 * time.Millisecond):
			continue
		}
		break
	}
	c.close(websocket.CloseGoingAway, "server shutting down")
}

func (c *conn) writeLoop() {
	defer close(c.writerDone)
	ping := time.NewTicker(c.h.opts.PingInterval)
	defer ping.Stop()
	write := func(msg []byte) error {
		_ = c.ws.SetWriteDeadline(time.Now().Add(c.h.opts.WriteTimeout))
		err := c.ws.WriteMessage(websocket.TextMessage, msg)
		c.queued.Add(-int64(len(msg)))
		select {
		case c.room <- struct{}{}:
		default:
		}
		return err
	}
	for {
		select {
		case <-c.ctx.Done():
			return
		case msg := <-c.out:
			if err := write(msg); err != nil {
				c.abort(websocket.ClosePolicyViolation, "write failed: client too slow or gone")
				return
			}
		case <-ping.C:
			if err := c.ws.WriteControl(websocket.PingMessage, nil, time.Now().Add(c.h.opts.WriteTimeout)); err != nil {
				c.abort(websocket.CloseGoingAway, "ping failed")
				return
			}
		case <-c.closing:
			for flushing := true; flushing; {
				select {
				case msg := <-c.out:
					if write(msg) != nil {
						flushing = false
					}
				default:
					flushing = false
				}
			}
			_ = c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(c.closeCode, c.closeWhy), time.Now().Add(closeGrace))
			_ = c.ws.SetReadDeadline(time.Now().Add(closeGrace))
			c.cancel()
			return
		}
	}
}

// enqueue queues a message without ever blocking. A full queue means the
// client does not read: it is disconnected (1008), which frees the queue and
// leaves every other client and the session untouched.
func (c *conn) enqueue(msg []byte) {
	if c.ctx.Err() != nil {
		return
	}
	n := int64(len(msg))
	if q := c.queued.Add(n); q > c.h.opts.QueueBytes && q != n {
		c.queued.Add(-n)
		c.overloaded()
		return
	}
	select {
	case c.out <- msg:
	default:
		c.queued.Add(-n)
		c.overloaded()
	}
}

// enqueueWait queues session output, waiting while the queue is full for
// the client to read: output is paced to the slowest reader of the session
// (the sandbox's command waits, as on a slow pipe) rather than lost. Only a
// client that takes nothing for WriteTimeout is disconnected (1008).
func (c *conn) enqueueWait(msg []byte) {
	n := int64(len(msg))
	var timer *time.Timer
	for {
		if c.ctx.Err() != nil {
			return
		}
		if q := c.queued.Add(n); q <= c.h.opts.QueueBytes || q == n {
			select {
			case c.out <- msg:
				if timer != nil {
					timer.Stop()
				}
				return
			default:
			}
		}
		c.queued.Add(-n)
		if timer == nil {
			timer = time.NewTimer(c.h.opts.WriteTimeout)
			defer timer.Stop()
		}
		select {
		case <-c.room:
		case <-c.ctx.Done():
			return
		case <-timer.C:
			c.overloaded()
			return
		}
	}
}

func (c *conn) overloaded() {
	c.h.core.Metrics().SlowDisconnects.Inc()
	c.log.Warn("disconnecting slow client: outbound queue full", "remote", c.remote)
	go c.abort(websocket.ClosePolicyViolation, "outbound queue full: client too slow") // not under a stream lock
}

func (c *conn) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.log.Error("marshal", "err", err)
		return
	}
	c.enqueue(b)
}

func (c *conn) reply(id json.RawMessage, result any) {
	raw, err := json.Marshal(result)
	if err != nil {
		c.replyError(id, err)
		return
	}
	c.replyRaw(id, raw)
}

// replyRaw sends a result that is already JSON. The envelope is written by
// hand: json.Marshal would re-scan (compact) a result of megabytes.
func (c *conn) replyRaw(id json.RawMessage, result json.RawMessage) {
	b := make([]byte, 0, len(result)+len(id)+40)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	b = append(b, '}')
	c.enqueue(b)
}

func (c *conn) replyError(id json.RawMessage, err error) {
	e := apierr.JSONRPC(err)
	c.h.core.Metrics().Error(apierr.KindOf(err).String(), "ws")
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	c.send(&wsproto.Response{JSONRPC: wsproto.Version, ID: id, Error: e})
}

// Output implements core.Subscriber.
func (c *conn) Output(sessionID string, ch core.Chunk) {
	b, err := json.Marshal(&wsproto.Notification{JSONRPC: wsproto.Version, Method: wsproto.NotifyStreamOutput, Params: &wsproto.StreamOutput{
		SessionID: sessionID, CallID: ch.CallID, Seq: ch.Seq, Data: ch.Data,
	}})
	if err != nil {
		c.log.Error("marshal", "err", err)
		return
	}
	c.enqueueWait(b)
}

// Closed implements core.Subscriber.
func (c *conn) Closed(sessionID, reason string) {
	c.mu.Lock()
	delete(c.attached, sessionID)
	delete(c.grants, sessionID)
	c.mu.Unlock()
	c.send(&wsproto.Notification{JSONRPC: wsproto.Version, Method: wsproto.NotifySessionClosed, Params: &wsproto.SessionClosed{
		SessionID: sessionID, Reason: reason,
	}})
}

// dispatch parses one message and runs it in its own goroutine.
func (c *conn) dispatch(msg []byte) {
	trimmed := bytes.TrimSpace(msg)
	if len(trimmed) > 0 && trimmed[0] == '[' {
		c.replyError(nil, apierr.New(apierr.InvalidRequest, "batch requests are not supported; send one request per message"))
		return
	}
	var req wsproto.Request
	if err := json.Unmarshal(msg, &req); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) || !json.Valid(msg) {
			c.replyError(nil, apierr.New(apierr.ParseError, "parse error: %v", err))
			return
		}
		c.replyError(nil, apierr.New(apierr.InvalidRequest, "not a JSON-RPC request: %v", err))
		return
	}
	if len(req.ID) > wsproto.MaxIDBytes {
		c.replyError(nil, apierr.New(apierr.InvalidRequest, "the request id is longer than %d bytes", wsproto.MaxIDBytes))
		return
	}
	if req.JSONRPC != wsproto.Version || req.Method == "" || !validID(req.ID) {
		c.replyError(req.ID, apierr.New(apierr.InvalidRequest, `a request needs "jsonrpc":"2.0", a method, and an id that is a string or a number`))
		return
	}
	if len(req.ID) == 0 {
		return // a notification: the protocol defines none from clients; ignore
	}
	m, ok := methods[req.Method]
	if !ok {
		c.replyError(req.ID, apierr.New(apierr.MethodNotFound, "method %q not found", req.Method))
		return
	}
	select {
	case c.inflight <- struct{}{}:
	default:
		c.replyError(req.ID, apierr.New(apierr.Busy, "%d requests are already running on this connection", c.h.opts.MaxInFlight))
		return
	}
	size := int64(len(msg))
	if err := c.admit(size); err != nil {
		<-c.inflight
		c.replyError(req.ID, err)
		return
	}
	c.h.core.Metrics().Requests.WithLabelValues(req.Method, "ws").Inc()
	c.handlers.Add(1)
	c.active.Add(1)
	go func() {
		defer c.handlers.Done()
		defer c.active.Add(-1)
		defer func() { <-c.inflight }()
		defer c.release(size)
		result, err := m(c, &req)
		switch {
		case errors.Is(err, errResponded):
		case err != nil:
			c.replyError(req.ID, err)
		case result != nil:
			if raw, ok := result.(json.RawMessage); ok {
				c.replyRaw(req.ID, raw)
			} else {
				c.reply(req.ID, result)
			}
		}
	}()
}

// admit reserves n bytes of running requests on this connection and on
// the handler: a running request keeps its params (up to a message each),
// so without a byte bound a few connections with slow calls of big
// messages could pin gigabytes.
func (c *conn) admit(n int64) error {
	if q := c.inBytes.Add(n); q > c.h.opts.MaxInFlightBytes && q != n {
		c.inBytes.Add(-n)
		return apierr.New(apierr.Busy, "the requests running on this connection hold %d bytes (limit %d); retry when some finish", q-n, c.h.opts.MaxInFlightBytes)
	}
	if q := c.h.inflightBytes.Add(n); q > c.h.opts.MaxTotalInFlightBytes {
		c.h.inflightBytes.Add(-n)
		c.inBytes.Add(-n)
		return apierr.New(apierr.Busy, "the server holds its limit of %d bytes of running requests; retry later", c.h.opts.MaxTotalInFlightBytes)
	}
	return nil
}

func (c *conn) release(n int64) {
	c.inBytes.Add(-n)
	c.h.inflightBytes.Add(-n)
}

// validID accepts what JSON-RPC allows an id to be here: absent (a
// notification), a string or a number. null is refused: it cannot key
// idempotent retries.
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return true
	}
	switch id[0] {
	case '"', '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
		return true
	}
	return false
}

// grant records that this connection may use s.
func (c *conn) grant(s *core.Session) {
	c.mu.Lock()
	c.grants[s.ID()] = s
	c.mu.Unlock()
}

// session authorizes a session-scoped request.
func (c *conn) session(ref wsproto.SessionRef) (*core.Session, error) {
	if ref.SessionID == "" {
		return nil, apierr.New(apierr.InvalidParams, "session_id is required")
	}
	c.mu.Lock()
	_, granted := c.grants[ref.SessionID]
	c.mu.Unlock()
	s, err := c.h.core.Authorize(c.p, ref.SessionID, ref.SessionToken, granted)
	if err != nil {
		return nil, err
	}
	c.grant(s)
	return s, nil
}

// attach subscribes the connection to s's output after lastSeq; before
// queues the response under the stream lock, ahead of the replay.
func (c *conn) attach(s *core.Session, lastSeq uint64, before func(core.ReplayInfo)) {
	c.mu.Lock()
	if _, ok := c.attached[s.ID()]; ok {
		s.Detach(c)
	}
	c.attached[s.ID()] = s
	c.mu.Unlock()
	s.Attach(c, lastSeq, before)
}
