package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

// handler is how the agent serves one method.
type handler struct {
	fn func(ctx context.Context, c *conn, f *proto.Frame) (any, error)
	// inline handlers are cheap and never block: they run on the read loop.
	inline bool
	// bounded handlers take a slot of the server's concurrency semaphore.
	bounded bool
	// after runs once the response is on the wire.
	after func(c *conn)
}

var handlers = map[string]handler{
	proto.MethodPing:          {fn: handlePing, inline: true},
	proto.MethodToolsList:     {fn: handleToolsList, inline: true},
	proto.MethodToolsCall:     {fn: handleToolsCall, bounded: true},
	proto.MethodUploadBegin:   {fn: handleUploadBegin, bounded: true},
	proto.MethodUploadChunk:   {fn: handleUploadChunk, bounded: true},
	proto.MethodUploadEnd:     {fn: handleUploadEnd, bounded: true},
	proto.MethodDownload:      {fn: handleDownloadBegin, bounded: true},
	proto.MethodDownloadRd:    {fn: handleDownloadRead, bounded: true},
	proto.MethodShutdown:      {fn: handleShutdown, after: func(c *conn) { c.s.closeConns() }},
	proto.MethodSkillsInstall: {fn: handleSkillsInstall, bounded: true},
	proto.MethodDirectDial:    {fn: handleDirectDial},
	// Input and resize run on the read loop, in the order they came: they
	// only queue bytes or set the size.
	proto.MethodPTYOpen:   {fn: handlePTYOpen},
	proto.MethodPTYInput:  {fn: handlePTYInput, inline: true},
	proto.MethodPTYResize: {fn: handlePTYResize, inline: true},
	proto.MethodPTYClose:  {fn: handlePTYClose},
}

// methodList names the methods for "method not found" errors.
var methodList = func() string {
	names := make([]string, 0, len(handlers))
	for n := range handlers {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}()

// decodeParams decodes f.Params into p, strictly: a misspelt field is an
// error the host's programmer sees at once.
func decodeParams(f *proto.Frame, p any) error {
	if len(f.Params) == 0 {
		return fmt.Errorf("%w: %s needs params", proto.ErrInvalidParams, f.Method)
	}
	dec := json.NewDecoder(bytes.NewReader(f.Params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return fmt.Errorf("%w for %s: %v", proto.ErrInvalidParams, f.Method, err)
	}
	return nil
}

func handlePing(context.Context, *conn, *proto.Frame) (any, error) { return struct{}{}, nil }

func handleToolsList(_ context.Context, c *conn, _ *proto.Frame) (any, error) {
	return c.s.opts.Toolset.Definitions(), nil
}

func handleToolsCall(ctx context.Context, c *conn, f *proto.Frame) (any, error) {
	var p proto.CallParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, fmt.Errorf("%w: tools/call needs the name of a tool", proto.ErrInvalidParams)
	}
	if p.Window < 0 {
		return nil, fmt.Errorf("%w: tools/call window must not be negative", proto.ErrInvalidParams)
	}
	if p.Stream {
		st := newStreamer(ctx, c, f.ID, p.Window)
		if p.Window > 0 {
			c.mu.Lock()
			c.streams[f.ID] = st
			c.mu.Unlock()
			defer func() {
				c.mu.Lock()
				delete(c.streams, f.ID)
				c.mu.Unlock()
			}()
		}
		ctx = tools.WithStream(ctx, st.send)
		defer st.finish() // before the reply: no chunk may follow the result
	}
	obs, err := c.s.opts.Toolset.Call(ctx, p.Name, p.Arguments)
	if err != nil {
		if errors.Is(err, tools.ErrClosed) {
			err = fmt.Errorf("%w: tool %q cannot run: %w", proto.ErrShuttingDown, p.Name, err)
		}
		return nil, err
	}
	if obs == nil {
		return nil, fmt.Errorf("%w: tool %q returned no observation and no error", proto.ErrInternal, p.Name)
	}
	return obs, nil
}

// streamChunkSize splits large stream chunks so each notification stays
// far below MaxFrameSize.
const streamChunkSize = 1 << 20

// streamer sends a call's output as "stream" notifications numbered from 1.
// It is safe for concurrent use; once finish has run (the call returned),
// late chunks are dropped so the result is always the last frame of a call.
//
// With a window (callParams.Window), send blocks while the host has not
// acknowledged window bytes: the tool's reader stops, its process blocks on
// a full terminal or pipe, and no buffer between the process and the host
// holds more than the window. The wait ends with an ack, the call's end
// (ctx: cancelled by the host, the connection or the server), or finish.
type streamer struct {
	c      *conn
	id     uint64
	ctx    context.Context
	window int64

	mu   sync.Mutex // one send at a time, in order
	seq  uint64
	done bool

	unacked atomic.Int64
	credit  chan struct{} // capacity 1: an ack arrived
	stop    chan struct{} // closed by finish
	once    sync.Once
}

func newStreamer(ctx context.Context, c *conn, id uint64, window int64) *streamer {
	return &streamer{c: c, id: id, ctx: ctx, window: window, credit: make(chan struct{}, 1), stop: make(chan struct{})}
}

func (st *streamer) send(chunk []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for !st.done && len(chunk) > 0 {
		n := min(len(chunk), streamChunkSize)
		if st.window > 0 {
			if !st.waitCredit() {
				return // the call ends; what it printed stays in its observation
			}
			n = min(n, int(max(st.window-st.unacked.Load(), 1)))
			st.unacked.Add(int64(n))
		}
		st.seq++
		if err := st.c.notify(proto.MethodStream, proto.StreamParams{ID: st.id, Seq: st.seq}, chunk[:n]); err != nil {
			return // the connection is gone; the call's ctx is being cancelled
		}
		chunk = chunk[n:]
	}
}

// waitCredit waits until the window has room; false when the call ends
// first.
func (st *streamer) waitCredit() bool {
	for st.unacked.Load() >= st.window {
		select {
		case <-st.credit:
		case <-st.stop:
			return false
		case <-st.ctx.Done():
			return false
		}
	}
	return true
}

// ack returns n bytes of window (on the connection's read loop).
func (st *streamer) ack(n int64) {
	if st.unacked.Add(-n) < 0 {
		st.unacked.Store(0) // a host acking more than it got: ignore the excess
	}
	select {
	case st.credit <- struct{}{}:
	default:
	}
}

// finish ends the stream: a send waiting for credit returns, later ones
// send nothing.
func (st *streamer) finish() {
	st.once.Do(func() { close(st.stop) })
	st.mu.Lock()
	st.done = true
	st.mu.Unlock()
}

// skillInstaller is an executor with dependency installers to run ahead of
// the first call: the skills' (tools/skill.Executor).
type skillInstaller interface {
	InstallAll(ctx context.Context) error
}

// handleSkillsInstall runs the installers of the session's skills that
// have not run yet; without skills it succeeds at once. A failed installer
// is ErrSkillInstall, whose message names each skill that failed, its
// installer, its exit status and its log's last lines.
func handleSkillsInstall(ctx context.Context, c *conn, _ *proto.Frame) (any, error) {
	var errs []error
	for _, e := range c.s.opts.Toolset.Executors() {
		if in, ok := e.(skillInstaller); ok {
			if err := in.InstallAll(ctx); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%w: %w", proto.ErrSkillInstall, err)
	}
	return struct{}{}, nil
}

func handleShutdown(_ context.Context, c *conn, _ *proto.Frame) (any, error) {
	c.log.Info("shutdown requested by the host")
	ctx, cancel := context.WithTimeout(context.Background(), c.s.opts.ShutdownGrace)
	defer cancel()
	if err := c.s.stop(ctx); err != nil {
		return nil, fmt.Errorf("%w: closing the toolset: %v", proto.ErrInternal, err)
	}
	return struct{}{}, nil
}
