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

	"github.com/sandboxd/sandboxd/tools"
)

// handler is how the agent serves one method.
type handler struct {
	fn func(ctx context.Context, c *conn, f *frame) (any, error)
	// inline handlers are cheap and never block: they run on the read loop.
	inline bool
	// bounded handlers take a slot of the server's concurrency semaphore.
	bounded bool
	// after runs once the response is on the wire.
	after func(c *conn)
}

var handlers = map[string]handler{
	MethodPing:          {fn: handlePing, inline: true},
	MethodToolsList:     {fn: handleToolsList, inline: true},
	MethodToolsCall:     {fn: handleToolsCall, bounded: true},
	MethodUploadBegin:   {fn: handleUploadBegin, bounded: true},
	MethodUploadChunk:   {fn: handleUploadChunk, bounded: true},
	MethodUploadEnd:     {fn: handleUploadEnd, bounded: true},
	MethodDownload:      {fn: handleDownloadBegin, bounded: true},
	MethodDownloadRd:    {fn: handleDownloadRead, bounded: true},
	MethodShutdown:      {fn: handleShutdown, after: func(c *conn) { c.s.closeConns() }},
	MethodSkillsInstall: {fn: handleSkillsInstall, bounded: true},
	MethodDirectDial:    {fn: handleDirectDial},
	// Input and resize run on the read loop, in the order they came: they
	// only queue bytes or set the size.
	MethodPTYOpen:   {fn: handlePTYOpen},
	MethodPTYInput:  {fn: handlePTYInput, inline: true},
	MethodPTYResize: {fn: handlePTYResize, inline: true},
	MethodPTYClose:  {fn: handlePTYClose},
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
func decodeParams(f *frame, p any) error {
	if len(f.Params) == 0 {
		return fmt.Errorf("%w: %s needs params", ErrInvalidParams, f.Method)
	}
	dec := json.NewDecoder(bytes.NewReader(f.Params))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p); err != nil {
		return fmt.Errorf("%w for %s: %v", ErrInvalidParams, f.Method, err)
	}
	return nil
}

func handlePing(context.Context, *conn, *frame) (any, error) { return struct{}{}, nil }

func handleToolsList(_ context.Context, c *conn, _ *frame) (any, error) {
	return c.s.opts.Toolset.Definitions(), nil
}

func handleToolsCall(ctx context.Context, c *conn, f *frame) (any, error) {
	var p callParams
	if err := decodeParams(f, &p); err != nil {
		return nil, err
	}
	if p.Name == "" {
		return nil, fmt.Errorf("%w: tools/call needs the name of a tool", ErrInvalidParams)
	}
	var st *streamer
	if p.Stream {
		st = &streamer{c: c, id: f.ID}
		ctx = tools.WithStream(ctx, st.send)
		defer st.finish() // before the reply: no chunk may follow the result
	}
	obs, err := c.s.opts.Toolset.Call(ctx, p.Name, p.Arguments)
	if err != nil {
		if errors.Is(err, tools.ErrClosed) {
			err = fmt.Errorf("%w: tool %q cannot run: %w", ErrShuttingDown, p.Name, err)
		}
		return nil, err
	}
	if obs == nil {
		return nil, fmt.Errorf("%w: tool %q returned no observation and no error", ErrInternal, p.Name)
	}
	return obs, nil
}

// streamChunkSize splits large stream chunks so each notification stays
// far below MaxFrameSize.
const streamChunkSize = 1 << 20

// streamer sends a call's output as "stream" notifications numbered from 1.
// It is safe for concurrent use; once finish has run (the call returned),
// late chunks are dropped so the result is always the last frame of a call.
type streamer struct {
	c    *conn
	id   uint64
	mu   sync.Mutex
	seq  uint64
	done bool
}

func (st *streamer) send(chunk []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for !st.done && len(chunk) > 0 {
		n := min(len(chunk), streamChunkSize)
		st.seq++
		if err := st.c.notify(MethodStream, streamParams{ID: st.id, Seq: st.seq}, chunk[:n]); err != nil {
			return // the connection is gone; the call's ctx is being cancelled
		}
		chunk = chunk[n:]
	}
}

func (st *streamer) finish() {
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
func handleSkillsInstall(ctx context.Context, c *conn, _ *frame) (any, error) {
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
		return nil, fmt.Errorf("%w: %w", ErrSkillInstall, err)
	}
	return struct{}{}, nil
}

func handleShutdown(_ context.Context, c *conn, _ *frame) (any, error) {
	c.log.Info("shutdown requested by the host")
	ctx, cancel := context.WithTimeout(context.Background(), c.s.opts.ShutdownGrace)
	defer cancel()
	if err := c.s.stop(ctx); err != nil {
		return nil, fmt.Errorf("%w: closing the toolset: %v", ErrInternal, err)
	}
	return struct{}{}, nil
}
