package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/internal/loglimit"
	"github.com/sandboxd/sandboxd/tools"
)

// errClientClosed is why a connection ended when the host closed it.
var errClientClosed = errors.New("the client was closed")

// invalidJSONError: params held a json.RawMessage (the tool arguments) that
// is not valid JSON, found while encoding the request.
type invalidJSONError struct{ err error }

func (e *invalidJSONError) Error() string { return "not valid JSON: " + e.err.Error() }

// ClientOption configures a Client.
type ClientOption func(*Client)

// WithLogger sets the client's logger (default slog.Default()). Everything
// the client logs is caused by what the agent's stream carries, which code
// in the sandbox may forge: the client truncates and rate-limits its
// records (package loglimit) unless l is already limited, e.g. one limiter
// per session shared by the session's successive connections.
func WithLogger(l *slog.Logger) ClientOption { return func(c *Client) { c.log = l } }

// Client is the host side of one agent connection. Its methods are safe for
// concurrent use; calls are multiplexed over the one stream and run
// concurrently on the agent.
type Client struct {
	rwc io.ReadWriteCloser
	log *slog.Logger

	// wq feeds the writer goroutine, the only one writing to rwc: a caller
	// never blocks on a stalled stream beyond its ctx.
	wq     chan outFrame
	nextID atomic.Uint64

	mu      sync.Mutex
	pending map[uint64]*pendingCall
	ptys    map[uint64]*PTY // open PTYs by id (client_pty.go)
	ptySeq  atomic.Uint64
	err     error // why the connection ended; set once

	done     chan struct{}  // closed when the connection has ended
	loopDone chan struct{}  // closed when the read loop has returned
	bg       sync.WaitGroup // the writer and queued notifications
}

// writeQueue is how many encoded frames may wait for the writer.
const writeQueue = 64

// CancelWait bounds how long a tool call whose ctx ended waits, after
// telling the agent to cancel it, for the agent's answer: the executor has
// then stopped (the terminal interrupts its command and waits up to 5 s
// for it to end), so the caller's next call does not find it still busy.
// It stays above the terminal's grace, with a second for the answer.
const CancelWait = 6 * time.Second

// outFrame is an encoded frame for the writer; sent, if set, is marked
// once the frame is written (the agent may be running the request).
type outFrame struct {
	buf  []byte
	sent *atomic.Bool
}

// pendingCall is a request waiting for its response. Stream chunks are
// queued here by the read loop and handed to the StreamFunc by the calling
// goroutine, so a slow StreamFunc never stalls other calls.
type pendingCall struct {
	resp chan *proto.Frame // capacity 1: the one response
	sent atomic.Bool       // the request is on the wire

	mu      sync.Mutex
	chunks  [][]byte
	lastSeq uint64
	notify  chan struct{} // capacity 1; nil when the call does not stream

	// A paced stream (window > 0): unacked counts the bytes received and
	// not yet acknowledged (delivered); overflow is set when the agent
	// sent past its window, and what came past it was dropped.
	c        *Client
	id       uint64
	window   int64
	unacked  int64
	overflow int64
}

// StreamWindow is how much of a tool call's streamed output may be on its
// way at once (decision 0038): the agent sends no more until the host has
// delivered some (stream/ack), so a slow StreamFunc slows the tool's
// process, as a slow terminal does, and the chunks queued here for the
// caller never exceed it.
const StreamWindow = 1 << 20

// NewClient starts a client on conn (an exec/attach stream, a pipe, a unix
// socket connection) and its read loop. Close it when done.
func NewClient(conn io.ReadWriteCloser, opts ...ClientOption) *Client {
	c := &Client{
		rwc:      conn,
		log:      slog.Default(),
		pending:  map[uint64]*pendingCall{},
		done:     make(chan struct{}),
		loopDone: make(chan struct{}),
		wq:       make(chan outFrame, writeQueue),
	}
	for _, o := range opts {
		o(c)
	}
	c.log = loglimit.NewLogger(c.log, loglimit.Options{}).With("component", "agent-client")
	c.bg.Add(1)
	go c.writeLoop()
	go c.readLoop()
	return c
}

// Done is closed when the connection has ended: the agent exited or
// crashed, the stream broke, or Close was called.
func (c *Client) Done() <-chan struct{} { return c.done }

// Err is nil while the connection is up; afterwards an error wrapping
// ErrDisconnected (and the cause) that says why it ended.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close ends the connection; pending calls fail with ErrDisconnected. It
// waits for the client's goroutines to end.
func (c *Client) Close() error {
	c.fail(errClientClosed)
	<-c.loopDone
	c.bg.Wait()
	return nil
}

// Ping checks that the agent answers.
func (c *Client) Ping(ctx context.Context) error {
	_, err := c.roundTrip(ctx, proto.MethodPing, struct{}{}, nil)
	return err
}

// ListTools returns the definitions of the agent's tools.
func (c *Client) ListTools(ctx context.Context) ([]tools.Definition, error) {
	raw, err := c.roundTrip(ctx, proto.MethodToolsList, struct{}{}, nil)
	if err != nil {
		return nil, err
	}
	var defs []tools.Definition
	if err := json.Unmarshal(raw, &defs); err != nil {
		return nil, &MethodError{Method: proto.MethodToolsList, Err: fmt.Errorf("decoding the result: %w", err)}
	}
	return defs, nil
}

// Call runs a tool on the agent. Output the tool produces while it runs is
// passed to stream (which may be nil) in order, on the calling goroutine,
// before Call returns. Failures the model should read (bad arguments, a
// missing file) are an Observation with IsError; an error means the call
// could not happen: ctx ended (ctx.Err(), returned once the agent has
// answered the cancel it is sent, so the tool has stopped, or after
// CancelWait; at once when the request never reached the agent), unknown tool (errors.Is tools.ErrUnknownTool), agent
// shutting down, or the connection ended (ErrDisconnected).
func (c *Client) Call(ctx context.Context, name string, args json.RawMessage, stream tools.StreamFunc) (*tools.Observation, error) {
	if len(args) > proto.MaxFrameSize {
		return nil, &MethodError{Method: proto.MethodToolsCall, Name: name, Err: fmt.Errorf("%w: %d bytes of arguments, the limit is %d", proto.ErrFrameTooLarge, len(args), proto.MaxFrameSize)}
	}
	cp := proto.CallParams{Name: name, Arguments: args, Stream: stream != nil}
	if cp.Stream {
		cp.Window = StreamWindow
	}
	raw, err := c.roundTrip(ctx, proto.MethodToolsCall, cp, stream)
	if ije := (*invalidJSONError)(nil); errors.As(err, &ije) {
		// Same contract as the tool framework: the model reads this.
		return tools.Errorf("Invalid arguments for tool %q: %v", name, ije), nil
	}
	if err != nil {
		return nil, err
	}
	var obs tools.Observation
	if err := json.Unmarshal(raw, &obs); err != nil {
		return nil, &MethodError{Method: proto.MethodToolsCall, Name: name, Err: fmt.Errorf("decoding the observation: %w", err)}
	}
	return &obs, nil
}

// Shutdown asks the agent to shut down: it cancels running calls, closes
// its tools (ending their processes) and answers before it closes the
// connection.
func (c *Client) Shutdown(ctx context.Context) error {
	_, err := c.roundTrip(ctx, proto.MethodShutdown, struct{}{}, nil)
	return err
}

// InstallSkills runs the dependency installers of the session's skills
// that have not run yet, ordered by priority, and returns when all have
// ended (a no-op without skills). A failure is an error wrapping
// ErrSkillInstall whose message names each failed skill, its installer,
// exit status and log tail; those skills' calls fail for the session, the
// rest work. Installers may take long (30 minutes each by default): ctx
// bounds the wait, and the agent stops waiting (the installer itself runs
// to its own timeout) when it is cancelled.
func (c *Client) InstallSkills(ctx context.Context) error {
	_, err := c.roundTrip(ctx, proto.MethodSkillsInstall, struct{}{}, nil)
	return err
}

// roundTrip sends one request and waits for its result.
func (c *Client) roundTrip(ctx context.Context, method string, params any, stream tools.StreamFunc) (json.RawMessage, error) {
	f, err := c.exchange(ctx, method, params, nil, stream)
	if err != nil {
		return nil, err
	}
	return f.Result, nil
}

// exchange sends one request with an optional binary payload and returns
// its successful response frame.
func (c *Client) exchange(ctx context.Context, method string, params any, data []byte, stream tools.StreamFunc) (*proto.Frame, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(params)
	if err != nil {
		var me *json.MarshalerError
		if errors.As(err, &me) {
			// Only a json.RawMessage can fail to marshal here: the tool
			// arguments, which are not valid JSON.
			return nil, &invalidJSONError{me.Unwrap()}
		}
		return nil, &MethodError{Method: method, Err: fmt.Errorf("encoding params: %w", err)}
	}
	id := c.nextID.Add(1)
	p := &pendingCall{resp: make(chan *proto.Frame, 1), c: c, id: id}
	if stream != nil {
		p.notify = make(chan struct{}, 1)
		if cp, ok := params.(proto.CallParams); ok && cp.Window > 0 {
			p.window = cp.Window
		}
	}
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, &MethodError{Method: method, Err: err}
	}
	c.pending[id] = p
	c.mu.Unlock()

	if err := c.sendTracked(ctx, &proto.Frame{ID: id, Method: method, Params: raw, Data: data}, &p.sent); err != nil {
		c.forget(id)
		if ctx.Err() != nil {
			return nil, ctx.Err() // never queued: nothing to cancel
		}
		return nil, &MethodError{Method: method, Err: err}
	}
	for {
		select {
		case f := <-p.resp:
			return p.finish(method, f, stream)
		case <-p.notify:
			p.deliver(stream)
		case <-ctx.Done():
			c.cancelAsync(id)
			if method == proto.MethodToolsCall && p.sent.Load() {
				c.awaitCancelled(p, stream)
			}
			c.forget(id)
			return nil, ctx.Err()
		case <-c.done:
			select {
			case f := <-p.resp: // answered just before the end
				return p.finish(method, f, stream)
			default:
			}
			return nil, &MethodError{Method: method, Err: c.Err()}
		}
	}
}

// awaitCancelled waits, after a cancel, for the agent's answer to p (the
// executor has stopped), the end of the connection, or CancelWait. Output
// the call printed meanwhile still reaches stream.
func (c *Client) awaitCancelled(p *pendingCall, stream tools.StreamFunc) {
	t := time.NewTimer(CancelWait)
	defer t.Stop()
	for {
		select {
		case <-p.resp:
			p.deliver(stream)
			return
		case <-p.notify:
			p.deliver(stream)
		case <-c.done:
			return
		case <-t.C:
			c.log.Debug("no answer to a cancel", "wait", CancelWait)
			return
		}
	}
}

func (p *pendingCall) finish(method string, f *proto.Frame, stream tools.StreamFunc) (*proto.Frame, error) {
	p.deliver(stream) // every chunk came before the response
	if f.Error != nil {
		return nil, &MethodError{Method: method, Err: remoteError{f.Error}}
	}
	p.mu.Lock()
	over := p.overflow
	p.mu.Unlock()
	if over > 0 {
		return nil, &MethodError{Method: method, Err: fmt.Errorf("%w: %d bytes past its window of %d were dropped", ErrStreamWindow, over, p.window)}
	}
	return f, nil
}

// deliver hands queued stream chunks to stream, in order.
func (p *pendingCall) deliver(stream tools.StreamFunc) {
	if stream == nil {
		return
	}
	for {
		p.mu.Lock()
		chunks := p.chunks
		p.chunks = nil
		p.mu.Unlock()
		if len(chunks) == 0 {
			return
		}
		// What queued up while stream was busy goes on as one piece
		// (at most the window): a caller that is slow now and then gets
		// fewer, larger pieces, not the tool's many small reads.
		data := chunks[0]
		if len(chunks) > 1 {
			data = bytes.Join(chunks, nil)
		}
		stream(data)
		p.ack(int64(len(data)))
	}
}

// ack returns n delivered bytes of a paced call's window to the agent.
func (p *pendingCall) ack(n int64) {
	if p.window == 0 || n == 0 {
		return
	}
	p.mu.Lock()
	p.unacked -= n
	p.mu.Unlock()
	raw, _ := json.Marshal(proto.StreamAckParams{ID: p.id, Bytes: n})
	p.c.notifyAsync(&proto.Frame{Method: proto.MethodStreamAck, Params: raw})
}

// cancelAsync tells the agent to cancel request id without making the
// caller wait for the write (the stream may be busy with a large frame).
func (c *Client) cancelAsync(id uint64) {
	raw, _ := json.Marshal(proto.CancelParams{ID: id})
	c.notifyAsync(&proto.Frame{Method: proto.MethodCancel, Params: raw})
}

func (c *Client) notifyAsync(f *proto.Frame) {
	buf, err := proto.EncodeFrame(f)
	if err != nil {
		c.log.Debug("notification not sent", "method", f.Method, "err", err)
		return
	}
	select {
	case c.wq <- outFrame{buf: buf}:
		return
	case <-c.done:
		return
	default: // the queue is full: do not make the caller wait
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		select {
		case c.wq <- outFrame{buf: buf}:
		case <-c.done:
		}
	}()
}

func (c *Client) forget(id uint64) {
	c.mu.Lock()
	delete(c.pending, id)
	c.mu.Unlock()
}

// sendTracked encodes a frame and queues it for the writer, and marks sent
// (if not nil) once the frame is written. A frame too large is refused
// before anything is written (the connection stays usable). It returns
// once the frame is queued, ctx ends, or the connection ends; a write
// error later ends the connection, which pending calls see.
func (c *Client) sendTracked(ctx context.Context, f *proto.Frame, sent *atomic.Bool) error {
	buf, err := proto.EncodeFrame(f)
	if err != nil {
		return err
	}
	select {
	case c.wq <- outFrame{buf: buf, sent: sent}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.done:
		return c.Err()
	}
}

func (c *Client) writeLoop() {
	defer c.bg.Done()
	for {
		select {
		case f := <-c.wq:
			if _, err := c.rwc.Write(f.buf); err != nil {
				c.fail(fmt.Errorf("write: %w", err))
				return
			}
			if f.sent != nil {
				f.sent.Store(true)
			}
		case <-c.done:
			return
		}
	}
}

// fail ends the connection once, recording why; pending calls see c.done.
func (c *Client) fail(cause error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return
	}
	switch {
	case errors.Is(cause, io.EOF) || errors.Is(cause, io.ErrUnexpectedEOF):
		c.err = fmt.Errorf("%w: the agent closed the stream (it exited, crashed or its container stopped): %w", proto.ErrDisconnected, cause)
	default:
		c.err = fmt.Errorf("%w: %w", proto.ErrDisconnected, cause)
	}
	c.pending = map[uint64]*pendingCall{}
	err := c.err
	c.mu.Unlock()
	close(c.done)
	_ = c.rwc.Close() // the connection is over; why is in c.err
	c.endPTYs(err)
}

func (c *Client) readLoop() {
	defer close(c.loopDone)
	r := bufio.NewReaderSize(c.rwc, 64<<10)
	var hdr [proto.HeaderSize]byte
	for {
		body, data, err := proto.ReadFrame(r, &hdr)
		if err != nil {
			c.fail(err)
			return
		}
		var f proto.Frame
		if err := json.Unmarshal(body, &f); err != nil {
			// The agent is our own code: bad JSON means a corrupt stream
			// (something else wrote to the agent's stdout). The stream is
			// hostile input: the error quotes none of its bytes beyond
			// what the decoder says.
			c.fail(fmt.Errorf("the agent sent a frame that is not valid JSON: %w", err))
			return
		}
		f.Data = data
		switch {
		case f.ID != 0 && f.Method == "":
			c.mu.Lock()
			p := c.pending[f.ID]
			delete(c.pending, f.ID)
			c.mu.Unlock()
			if p == nil {
				c.log.Debug("response to a request nobody waits for (cancelled)", "id", f.ID)
				continue
			}
			p.resp <- &f
		case f.Method == proto.MethodStream:
			c.stream(&f)
		case f.Method == proto.MethodPTYOutput:
			c.ptyOutput(&f)
		case f.Method == proto.MethodPTYExit:
			c.ptyExit(&f)
		case f.ID == 0 && f.Error != nil:
			c.log.Warn("the agent reported a protocol error", "code", f.Error.Code, "err", f.Error.Message)
		default:
			c.log.Debug("ignoring an unexpected frame", "id", f.ID, "method", f.Method)
		}
	}
}

func (c *Client) stream(f *proto.Frame) {
	var sp proto.StreamParams
	if err := json.Unmarshal(f.Params, &sp); err != nil {
		c.log.Warn("ignoring a stream notification with bad params", "err", err)
		return
	}
	c.mu.Lock()
	p := c.pending[sp.ID]
	c.mu.Unlock()
	if p == nil || p.notify == nil {
		return // the call was cancelled, or did not ask for a stream
	}
	p.mu.Lock()
	if sp.Seq != p.lastSeq+1 {
		c.log.Warn("stream chunks out of order", "id", sp.ID, "seq", sp.Seq, "expected", p.lastSeq+1)
	}
	p.lastSeq = sp.Seq
	data := f.Data
	if data == nil {
		data = sp.Data
	}
	if p.window > 0 && p.unacked+int64(len(data)) > p.window {
		// The agent is ours, but what comes out of a sandbox is hostile:
		// its memory here stays bounded, and the call fails.
		if p.overflow == 0 {
			c.log.Warn("the agent streamed past a call's window; dropping", "id", sp.ID, "window", p.window)
		}
		p.overflow += int64(len(data))
		p.mu.Unlock()
		return
	}
	p.unacked += int64(len(data))
	p.chunks = append(p.chunks, data)
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
}
