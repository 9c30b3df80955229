package core

import (
	"context"
	"errors"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
)

// A transfer is a chunked upload or download in progress: a pipe between the
// client's messages and one Session.Upload or Session.Download running in a
// goroutine, so no transfer is ever buffered whole. A transfer that sees no
// message for the idle time is aborted.
type transfer struct {
	id     string
	upload bool
	idle   atomic.Int64 // time.Duration; shortened when the server drains
	timer  *time.Timer
	cancel context.CancelFunc
	done   chan struct{} // the Upload/Download goroutine has returned
	err    error         // its error, once done
	// kept: a download that has sent its last chunk and is kept only so a
	// retry of that chunk finds it; the first to make room for a new one.
	kept atomic.Bool

	mu     sync.Mutex // serialises messages of one transfer
	offset int64      // bytes moved so far
	pw     *io.PipeWriter
	pr     *io.PipeReader
	// Downloads keep the last chunk so a retry at the same offset gets it again.
	lastOffset int64
	last       []byte
	eof        bool
}

// transfers are the transfers of one session.
type transfers struct {
	mu sync.Mutex
	m  map[string]*transfer
}

// errTooManyTransfers: a session has its maximum of transfers in progress.
func errTooManyTransfers(limit int) error {
	return apierr.New(apierr.Busy, "this session has %d transfers in progress; finish one (or let it idle out) and retry", limit)
}

func (ts *transfers) get(id string) (*transfer, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.m[id]
	if !ok {
		return nil, apierr.New(apierr.NotFound, "no transfer %q in this session (finished, aborted after being idle, or never started)", id)
	}
	return t, nil
}

func (ts *transfers) add(t *transfer) {
	ts.mu.Lock()
	if ts.m == nil {
		ts.m = map[string]*transfer{}
	}
	ts.m[t.id] = t
	ts.mu.Unlock()
}

func (ts *transfers) remove(t *transfer) {
	ts.mu.Lock()
	if ts.m[t.id] == t {
		delete(ts.m, t.id)
	}
	ts.mu.Unlock()
}

// abortAll ends every transfer (the session closed).
func (ts *transfers) abortAll() {
	ts.mu.Lock()
	all := make([]*transfer, 0, len(ts.m))
	for _, t := range ts.m {
		all = append(all, t)
	}
	clear(ts.m)
	ts.mu.Unlock()
	for _, t := range all {
		t.abort(errors.New("session closed"))
	}
}

// reserve makes room for a new transfer: under limit, or by dropping a
// finished download kept for retries. False: limit transfers are in progress.
func (ts *transfers) reserve(limit int) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if len(ts.m) < limit {
		return true
	}
	for id, t := range ts.m {
		if t.kept.Load() {
			delete(ts.m, id)
			t.abort(errors.New("dropped to make room for a new transfer"))
			return true
		}
	}
	return false
}

// transferSpec describes a transfer to start.
type transferSpec struct {
	upload bool
	idle   time.Duration // a transfer without a message for this long is aborted
	max    int           // transfers in progress at once in the session
	// run is the Upload or Download on one end of the transfer's pipe.
	run func(ctx context.Context, t *transfer) error
}

// start runs spec.run in a goroutine, under base. At most spec.max
// transfers run at once in a session: each holds a goroutine, a transfer in
// the sandbox and, for a download, its last chunk.
func (ts *transfers) start(base context.Context, spec transferSpec) (*transfer, error) {
	if !ts.reserve(spec.max) {
		return nil, errTooManyTransfers(spec.max)
	}
	ctx, cancel := context.WithCancel(base)
	t := &transfer{id: auth.NewToken()[:22], upload: spec.upload, cancel: cancel, done: make(chan struct{})}
	t.idle.Store(int64(spec.idle))
	t.pr, t.pw = io.Pipe()
	t.timer = time.AfterFunc(spec.idle, func() {
		ts.remove(t)
		t.abort(apierr.New(apierr.Timeout, "transfer idle for %v", time.Duration(t.idle.Load())))
	})
	ts.add(t)
	go func() {
		t.err = spec.run(ctx, t)
		close(t.done)
	}()
	return t, nil
}

func (t *transfer) touch() { t.timer.Reset(time.Duration(t.idle.Load())) }

// shorten lowers every transfer's idle time to at most d, counted from
// now: when the server drains, a transfer its client abandoned must not
// hold the drain for the whole idle time, while one still moving (a
// message every few milliseconds) finishes.
func (ts *transfers) shorten(d time.Duration) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.m {
		if time.Duration(t.idle.Load()) > d {
			t.idle.Store(int64(d))
			t.timer.Reset(d)
		}
	}
}

func (t *transfer) abort(err error) {
	t.timer.Stop()
	t.pw.CloseWithError(err)
	t.pr.CloseWithError(err)
	t.cancel()
}

// finish waits for the goroutine and releases the transfer.
func (t *transfer) finish(ctx context.Context) error {
	select {
	case <-t.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	t.timer.Stop()
	t.cancel()
	return t.err
}

// Upload extracts a tar stream under dir in the session's sandbox in one
// call (the MCP harness tool upload, tools/transfer): counted as a call in
// flight, so a drain waits for it and shutdown cancels it.
func (s *Session) Upload(parent context.Context, dir string, tar io.Reader) error {
	if err := s.c.beginCall(); err != nil {
		return err
	}
	defer s.c.endCall()
	ctx, cancel := s.c.callContext(parent)
	defer cancel()
	return s.sb.Upload(ctx, dir, tar)
}

// Download writes a tar of path in the session's sandbox to w in one call
// (the MCP harness tool download); like Upload, a call in flight.
func (s *Session) Download(parent context.Context, path string, w io.Writer) error {
	if err := s.c.beginCall(); err != nil {
		return err
	}
	defer s.c.endCall()
	ctx, cancel := s.c.callContext(parent)
	defer cancel()
	return s.sb.Download(ctx, path, w)
}
