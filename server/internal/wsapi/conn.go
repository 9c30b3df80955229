package wsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/wsproto"
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

	out        chan outMsg
	queued     atomic.Int64 // bytes in out
	inflight   chan struct{}
	inBytes    atomic.Int64 // bytes of the requests running
	handlers   sync.WaitGroup
	stage      atomic.Value  // string: what serve is doing (Shutdown reports it if it waits too long)
	closing    chan struct{} // closed by close: the writer flushes, then sends the close frame
	closeOnce  sync.Once
	closeCode  int
	closeWhy   string
	writerDone chan struct{}
	room       chan struct{} // capacity 1: the writer took a message (a waiting reply retries)
	drainedCh  chan struct{} // capacity 1: the writer found the queue drained (a paced call goes on)
	aliveAt    atomic.Int64  // unix nanoseconds of the last read deadline extension (alive)

	gmu      sync.Mutex
	gaps     map[string]*wsproto.StreamGap // by session: output withheld, notice not yet queued
	paced    map[pacedCall]int             // this connection's streaming calls in flight (with gmu)
	gapsOpen atomic.Int32                  // len(gaps), for the writer's cheap check
	dropping atomic.Bool                   // overloaded: being disconnected

	mu       sync.Mutex
	grants   map[string]*core.Session // sessions this connection may use
	attached map[string]*core.Session // sessions whose output it receives
	ptys     map[string]*wsPTY        // PTYs it opened (pty.go)
	ptySeq   uint64
	running  map[*wsproto.Request]struct{} // requests whose handler runs (Shutdown polls it and reports them; the WaitGroup is for serve)
}

// outMsg is a message of the outbound queue; written, if set, runs once the
// message is on the socket.
type outMsg struct {
	b       []byte
	written func()
}

func newConn(h *Handler, ws *websocket.Conn, p core.Principal, remote string) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	id := strconv.FormatUint(connSeq.Add(1), 10)
	return &conn{
		h: h, ws: ws, id: id, p: p, remote: remote,
		log:        h.log.With("conn", id),
		ctx:        ctx,
		cancel:     cancel,
		out:        make(chan outMsg, h.opts.QueueMessages),
		inflight:   make(chan struct{}, h.opts.MaxInFlight),
		writerDone: make(chan struct{}),
		closing:    make(chan struct{}),
		room:       make(chan struct{}, 1),
		drainedCh:  make(chan struct{}, 1),
		gaps:       map[string]*wsproto.StreamGap{},
		grants:     map[string]*core.Session{},
		attached:   map[string]*core.Session{},
		running:    map[*wsproto.Request]struct{}{},
	}
}

// serve runs the connection until it closes.
func (c *conn) serve() {
	go c.writeLoop()
	c.stage.Store("reading")
	c.readLoop()
	c.cancel()
	c.stage.Store("closing its PTYs")
	c.closePTYs()
	c.stage.Store("waiting for its requests")
	c.handlers.Wait()
	c.stage.Store("waiting for its writer")
	<-c.writerDone
	c.stage.Store("closed")
	_ = c.ws.Close()
	c.mu.Lock()
	for _, s := range c.attached {
		s.Detach(c)
	}
	c.mu.Unlock()
}

// alive extends the read deadline: the peer answered a ping, or took a
// message the writer wrote. A client that reads slowly may find a ping
// behind megabytes of output in the socket buffers and answer it late;
// its reading is proof enough that it is there.
func (c *conn) alive() {
	select {
	case <-c.closing: // keep the short deadline of the closing handshake
	default:
		now := time.Now()
		c.aliveAt.Store(now.UnixNano())
		_ = c.ws.SetReadDeadline(now.Add(2*c.h.opts.PingInterval + c.h.opts.WriteTimeout))
	}
}

// wroteAlive is alive for the writer, at most once a second: not a
// deadline update per message on the hot path.
func (c *conn) wroteAlive() {
	if time.Now().UnixNano()-c.aliveAt.Load() >= int64(time.Second) {
		c.alive()
	}
}

func (c *conn) readLoop() {
	c.ws.SetReadLimit(c.h.opts.MaxMessageBytes)
	c.alive()
	c.ws.SetPongHandler(func(string) error { c.alive(); return nil })
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
		c.alive()
		c.dispatch(msg)
	}
}

// ended records why the connection ended when the read side saw it end.
func (c *conn) ended(code int, why string) {
	c.closeOnce.Do(func() { c.closeCode, c.closeWhy = code, why })
	c.cancel()
}

// state says what the connection is doing, for Shutdown's report of the
// connections it still waits for: serve's stage, whether the writer has
// ended, and the requests whose handlers run.
func (c *conn) state() string {
	stage, _ := c.stage.Load().(string)
	if stage == "" {
		stage = "starting"
	}
	writer := "running"
	select {
	case <-c.writerDone:
		writer = "ended"
	default:
	}
	c.mu.Lock()
	reqs := make([]string, 0, len(c.running))
	for r := range c.running {
		reqs = append(reqs, r.Method+" (id "+string(r.ID)+")")
	}
	c.mu.Unlock()
	slices.Sort(reqs)
	if len(reqs) == 0 {
		reqs = append(reqs, "none")
	}
	return fmt.Sprintf("conn %s from %s: %s; writer %s, %d queued bytes; requests running: %s",
		c.id, c.remote, stage, writer, c.queued.Load(), strings.Join(reqs, ", "))
}

// busy says whether a request's handler runs.
func (c *conn) busy() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.running) > 0
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
	for c.busy() {
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
	// A message may take as long as a reply may wait for room: a client
	// that reads, however slowly, keeps its connection (its output is
	// paced by gaps); one that takes nothing for that long is dropped.
	writeTimeout := max(c.h.opts.WriteTimeout, c.h.opts.ReplyWait)
	write := func(msg outMsg) error {
		_ = c.ws.SetWriteDeadline(time.Now().Add(writeTimeout))
		err := c.ws.WriteMessage(websocket.TextMessage, msg.b)
		c.queued.Add(-int64(len(msg.b)))
		select {
		case c.room <- struct{}{}:
		default:
		}
		if err == nil {
			c.wroteAlive()
		}
		if err == nil && msg.written != nil {
			msg.written()
		}
		if err == nil && c.drained() {
			if c.gapsOpen.Load() > 0 {
				c.flushGaps("")
			}
			select {
			case c.drainedCh <- struct{}{}:
			default:
			}
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

// enqueue queues a message without ever blocking: for messages queued
// under a lock (a session's stream lock) and flow-controlled PTY output,
// which are few. A queue full even for them means the client reads nothing:
// it is disconnected (1008), which frees the queue and leaves every other
// client and the session untouched.
func (c *conn) enqueue(msg []byte) { c.enqueueThen(msg, nil) }

// enqueueThen is enqueue with a function to run once msg is on the socket
// (never, if the connection ends first). It must not block: it runs on the
// writer.
func (c *conn) enqueueThen(msg []byte, written func()) {
	if !c.tryEnqueue(msg, written, c.h.opts.QueueBytes) {
		c.overloaded("outbound queue full: client does not read")
	}
}

// tryEnqueue queues msg if the queue stays within limit bytes (a message
// alone in the queue always fits) and has a free slot.
func (c *conn) tryEnqueue(msg []byte, written func(), limit int64) bool {
	if c.ctx.Err() != nil {
		return true // the connection is gone: nothing to queue for
	}
	n := int64(len(msg))
	if q := c.queued.Add(n); q > limit && q != n {
		c.queued.Add(-n)
		return false
	}
	select {
	case c.out <- outMsg{b: msg, written: written}:
		return true
	default:
		c.queued.Add(-n)
		return false
	}
}

// enqueueReply queues a reply, after the notices of open gaps, waiting for
// room as long as ReplyWait:
// replies are never dropped, and a client that leaves one without room
// that long reads nothing (it is disconnected). Not under a lock.
func (c *conn) enqueueReply(msg []byte) {
	// A call's output precedes its answer: what of it was withheld is
	// announced first (the notices are small; output stays withheld).
	if c.gapsOpen.Load() > 0 {
		c.flushGaps("")
	}
	var timeout <-chan time.Time
	for !c.tryEnqueue(msg, nil, c.h.opts.QueueBytes) {
		if timeout == nil {
			t := time.NewTimer(c.h.opts.ReplyWait)
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-c.room:
		case <-c.ctx.Done():
			return
		case <-timeout:
			c.overloaded(fmt.Sprintf("a reply found no room in the outbound queue for %v: client does not read", c.h.opts.ReplyWait))
			return
		}
	}
	// Another reply may wait for the room this one did not need.
	select {
	case c.room <- struct{}{}:
	default:
	}
}

func (c *conn) overloaded(why string) {
	if !c.dropping.CompareAndSwap(false, true) {
		return // counted and dropped once
	}
	c.h.core.Metrics().SlowDisconnects.Inc()
	c.log.Warn("disconnecting a client that does not read", "why", why, "remote", c.remote)
	go c.abort(websocket.ClosePolicyViolation, why) // not under a stream lock
}

// drained: the queue is down to half the output budget, so a withheld
// range can be announced and output resumes.
func (c *conn) drained() bool {
	return c.queued.Load() <= c.h.opts.OutputBytes/2 && len(c.out) <= c.h.opts.OutputMessages/2
}

// pace holds back a streaming call of this connection (core.CallRequest.Pace)
// while the queue is not drained: the caller's own output is then never
// withheld, and the command prints at the pace its caller reads (decision
// 0038). Other connections of the session still get gaps, never a wait.
// It returns at once when the connection has ended: the call, detached
// from it, goes on unpaced.
func (c *conn) pace(ctx context.Context) {
	if c.drained() {
		return
	}
	// A fallback tick: a signal taken by another paced call of this
	// connection is passed on below, but a missed one must not stall.
	t := time.NewTicker(paceTick)
	defer t.Stop()
	for !c.drained() {
		select {
		case <-c.drainedCh:
		case <-t.C:
		case <-ctx.Done():
			return
		case <-c.ctx.Done():
			return
		}
	}
	select { // another paced call may wait for the same room
	case c.drainedCh <- struct{}{}:
	default:
	}
}

// pacedCall names a streaming call of this connection: its output is paced
// to the connection (pace), so Output gives it the whole queue rather
// than the output budget, never withholding it for want of budget.
type pacedCall struct{ session, call string }

// trackPaced registers a streaming call made on this connection until the
// returned func runs.
func (c *conn) trackPaced(sessionID string, callID json.RawMessage) (untrack func()) {
	k := pacedCall{sessionID, string(callID)}
	c.gmu.Lock()
	if c.paced == nil {
		c.paced = map[pacedCall]int{}
	}
	c.paced[k]++
	c.gmu.Unlock()
	return func() {
		c.gmu.Lock()
		if c.paced[k]--; c.paced[k] <= 0 {
			delete(c.paced, k)
		}
		c.gmu.Unlock()
	}
}

// paceTick bounds how long a paced call waits for a drain it missed.
const paceTick = 50 * time.Millisecond

// flushGaps queues the notices of the open gaps (of one session, or all
// for ""), in order behind what the connection already has of each.
func (c *conn) flushGaps(sessionID string) {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	for id, g := range c.gaps {
		if sessionID == "" || id == sessionID {
			c.queueGap(g)
		}
	}
}

// queueGap queues g's notice and closes it; with gmu held.
func (c *conn) queueGap(g *wsproto.StreamGap) {
	delete(c.gaps, g.SessionID)
	c.gapsOpen.Store(int32(len(c.gaps)))
	c.h.core.Metrics().StreamGaps.Inc()
	b, err := json.Marshal(&wsproto.Notification{JSONRPC: wsproto.Version, Method: wsproto.NotifyStreamGap, Params: g})
	if err == nil {
		c.enqueue(b)
	}
}

// send queues a notification without blocking (enqueue).
func (c *conn) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.log.Error("marshal", "err", err)
		return
	}
	c.enqueue(b)
}

// reply queues a result, waiting for room (enqueueReply).
func (c *conn) reply(id json.RawMessage, result any) {
	raw, err := json.Marshal(result)
	if err != nil {
		c.replyError(id, err)
		return
	}
	c.replyRaw(id, raw)
}

// replyLocked queues a result without waiting: for the answers of create
// and attach, made under the session's stream lock (one per request, so
// bounded by the requests in flight).
func (c *conn) replyLocked(id json.RawMessage, result any) {
	raw, err := json.Marshal(result)
	if err != nil {
		c.replyError(id, err)
		return
	}
	c.enqueue(envelope(id, raw))
}

// replyRaw sends a result that is already JSON. The envelope is written by
// hand: json.Marshal would re-scan (compact) a result of megabytes.
func (c *conn) replyRaw(id json.RawMessage, result json.RawMessage) {
	c.enqueueReply(envelope(id, result))
}

func envelope(id json.RawMessage, result json.RawMessage) []byte {
	b := make([]byte, 0, len(result)+len(id)+40)
	b = append(b, `{"jsonrpc":"2.0","id":`...)
	b = append(b, id...)
	b = append(b, `,"result":`...)
	b = append(b, result...)
	b = append(b, '}')
	return b
}

func (c *conn) replyError(id json.RawMessage, err error) {
	e := apierr.JSONRPC(err)
	c.h.core.Metrics().Error(apierr.KindOf(err).String(), "ws")
	if len(id) == 0 {
		id = json.RawMessage("null")
	}
	b, merr := json.Marshal(&wsproto.Response{JSONRPC: wsproto.Version, ID: id, Error: e})
	if merr != nil {
		c.log.Error("marshal", "err", merr)
		return
	}
	c.enqueueReply(b)
}

// Output implements core.Subscriber. It never blocks and never drops a
// chunk silently: output that finds the connection's output budget spent
// is withheld, and a stream.gap notice naming its seqs takes its place
// once the client has read the queue down (drained), before the next
// chunk sent; the client reads the range back from the ring (stream.read).
func (c *conn) Output(sessionID string, ch core.Chunk) {
	c.gmu.Lock()
	defer c.gmu.Unlock()
	g := c.gaps[sessionID]
	if g != nil {
		if !c.drained() {
			c.widen(g, ch)
			return
		}
		c.queueGap(g)
	}
	b, err := json.Marshal(&wsproto.Notification{JSONRPC: wsproto.Version, Method: wsproto.NotifyStreamOutput, Params: &wsproto.StreamOutput{
		SessionID: sessionID, CallID: ch.CallID, Seq: ch.Seq, Data: ch.Data,
	}})
	if err != nil {
		c.log.Error("marshal", "err", err)
		return
	}
	msgs, room := c.h.opts.OutputMessages, c.h.opts.OutputBytes
	if c.paced[pacedCall{sessionID, string(ch.CallID)}] > 0 {
		// Paced to this connection: at most one piece past the drain
		// pace waits for is ever queued.
		msgs, room = c.h.opts.QueueMessages, c.h.opts.QueueBytes
	}
	if len(c.out) >= msgs || !c.tryEnqueue(b, nil, room) {
		g = &wsproto.StreamGap{SessionID: sessionID, FromSeq: ch.Seq, CallIDs: []json.RawMessage{}}
		c.gaps[sessionID] = g
		c.gapsOpen.Store(int32(len(c.gaps)))
		c.widen(g, ch)
	}
}

// widen adds ch to the open gap g; with gmu held.
func (c *conn) widen(g *wsproto.StreamGap, ch core.Chunk) {
	g.ToSeq = ch.Seq
	g.Bytes += int64(len(ch.Data))
	for _, id := range g.CallIDs {
		if bytes.Equal(id, ch.CallID) {
			return
		}
	}
	if len(g.CallIDs) < wsproto.MaxGapCalls {
		g.CallIDs = append(g.CallIDs, ch.CallID)
	} else {
		g.MoreCalls = true
	}
}

// Closed implements core.Subscriber.
func (c *conn) Closed(sessionID, reason string) {
	c.flushGaps(sessionID) // the end comes after what was withheld
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
	if om, ok := orderedMethods[req.Method]; ok {
		c.h.core.Metrics().Requests.WithLabelValues(req.Method, "ws").Inc()
		om(c, &req, int64(len(msg)))
		return
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
	c.mu.Lock()
	c.running[&req] = struct{}{}
	c.mu.Unlock()
	go func() {
		defer c.handlers.Done()
		defer func() { c.mu.Lock(); delete(c.running, &req); c.mu.Unlock() }()
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
	// The client named the seq it has: the replay supersedes a gap not yet
	// announced.
	c.gmu.Lock()
	if g := c.gaps[s.ID()]; g != nil {
		delete(c.gaps, g.SessionID)
		c.gapsOpen.Store(int32(len(c.gaps)))
	}
	c.gmu.Unlock()
	s.Attach(c, lastSeq, before)
}
