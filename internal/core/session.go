package core

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/tools"
)

// Session is a session as the API layers use it: the backend's Sandbox plus
// its capability, output stream, idempotency cache, calls and transfers.
type Session struct {
	c      *Core
	sb     Sandbox
	id     string
	token  auth.Digest
	api    string
	stream *stream
	idem   *idempotency
	xfers  transfers

	mu    sync.Mutex
	calls map[string]*runningCall // running calls by call id, for Cancel
}

// runningCall is a call Cancel can stop; done closes when Call returns.
type runningCall struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// cancelWait bounds how long Cancel waits for the cancelled call to end
// (the agent confirms within its own grace of two seconds).
const cancelWait = 3 * time.Second

func newSession(c *Core, sb Sandbox, token auth.Digest, api string) *Session {
	o := c.opts
	return &Session{
		c: c, sb: sb, id: sb.ID(), token: token, api: api,
		stream: newStream(sb.ID(), o.RingBytes, o.RingChunks),
		idem:   newIdempotency(o.IdemEntries, o.IdemBytes, o.IdemTTL),
		calls:  map[string]*runningCall{},
	}
}

// ID is the session's id.
func (s *Session) ID() string { return s.id }

// API is the API that created the session (APIWebSocket, APIMCP).
func (s *Session) API() string { return s.api }

// Info describes the session now.
func (s *Session) Info() Info { return s.sb.Info() }

// Done is closed when the session leaves service.
func (s *Session) Done() <-chan struct{} { return s.sb.Done() }

// Tools lists the session's tools.
func (s *Session) Tools(ctx context.Context) ([]tools.Definition, error) {
	return s.sb.Tools(ctx)
}

// Idempotent runs fn once per request id: see idempotency. method and
// params fingerprint the request, so a reused id with other content is a
// Conflict instead of a wrong answer.
func (s *Session) Idempotent(wait context.Context, id json.RawMessage, method string, params []byte, fn func() (json.RawMessage, error)) (json.RawMessage, error) {
	key := string(bytes.TrimSpace(id))
	res, err := s.idem.do(wait, key, fingerprint(method, params), fn)
	if errors.Is(err, errReused) {
		err = apierr.New(apierr.Conflict, "request id %s was already used in this session for a different request; ids are idempotency keys, use a new one", key)
	}
	return res, err
}

// Call runs a tool. It is detached from the caller: parent carries values
// and cancellation (MCP's notifications/cancelled), the core adds shutdown.
// With stream, output goes to the session's numbered stream (and from there
// to every attached client); extra (may be nil) also receives it.
func (s *Session) Call(parent context.Context, transport string, callID json.RawMessage, name string, args json.RawMessage, stream bool, extra tools.StreamFunc) (*tools.Observation, error) {
	if err := s.c.beginCall(); err != nil {
		return nil, err
	}
	defer s.c.endCall()
	ctx, cancel := s.c.callContext(parent)
	defer cancel()
	key := string(bytes.TrimSpace(callID))
	if key != "" {
		rc := &runningCall{cancel: cancel, done: make(chan struct{})}
		s.mu.Lock()
		s.calls[key] = rc
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			if s.calls[key] == rc {
				delete(s.calls, key)
			}
			s.mu.Unlock()
			close(rc.done)
		}()
	}

	var sink tools.StreamFunc
	var carry utf8Carry
	deliver := func(b []byte) {
		if len(b) == 0 {
			return
		}
		if stream {
			s.stream.publish(callID, b)
		}
		if extra != nil {
			extra(b)
		}
	}
	if stream || extra != nil {
		sink = func(b []byte) { deliver(carry.take(b)) }
	}
	start := time.Now()
	obs, err := s.sb.Call(ctx, name, args, sink)
	deliver(carry.flush())
	// Tool names come from clients: only calls a tool answered get a
	// series (an unknown or empty name must not make one); failures are
	// counted by kind elsewhere.
	if err == nil {
		s.c.opts.Metrics.ObserveCall(name, transport, time.Since(start))
	}
	if err == nil && obs == nil {
		err = apierr.New(apierr.Internal, "tool %q returned no observation", name)
	}
	return obs, err
}

// Cancel cancels a running call by its call id; false if none runs. It
// returns once the call has ended (the tool stopped it), or after
// cancelWait, so a client's next call does not find the tool still busy.
func (s *Session) Cancel(callID json.RawMessage) bool {
	s.mu.Lock()
	rc, ok := s.calls[string(bytes.TrimSpace(callID))]
	s.mu.Unlock()
	if !ok {
		return false
	}
	rc.cancel()
	t := time.NewTimer(cancelWait)
	defer t.Stop()
	select {
	case <-rc.done:
	case <-t.C:
	}
	return true
}

// Attach subscribes sub to the session's output from after lastSeq; see
// stream.subscribe for the ordering guarantee.
func (s *Session) Attach(sub Subscriber, lastSeq uint64, before func(ReplayInfo)) {
	s.stream.subscribe(sub, lastSeq, before)
}

// Detach unsubscribes sub.
func (s *Session) Detach(sub Subscriber) { s.stream.unsubscribe(sub) }

// Close closes the session; idempotent.
func (s *Session) Close(ctx context.Context) error {
	return s.sb.Close(ctx)
}

// UploadChunk moves one message of an upload. With uploadID empty it starts
// one (into dir); final ends it and waits for the sandbox to unpack.
func (s *Session) UploadChunk(wait context.Context, dir, uploadID string, offset int64, data []byte, final bool) (id string, total int64, err error) {
	var t *transfer
	if uploadID == "" {
		if err := s.c.beginCall(); err != nil {
			return "", 0, err
		}
		t, err = s.xfers.start(s.c.base, true, s.c.opts.TransferIdle, s.c.opts.MaxTransfers, func(ctx context.Context, t *transfer) error {
			defer s.c.endCall()
			err := s.sb.Upload(ctx, dir, t.pr)
			if err != nil {
				t.pr.CloseWithError(err) // the client's next write fails with it
				return err
			}
			// The sandbox may stop at the tar end marker, before the
			// record padding some tar writers add: swallow the rest.
			_, _ = io.Copy(io.Discard, t.pr)
			return nil
		})
		if err != nil {
			s.c.endCall()
			return "", 0, err
		}
	} else if t, err = s.xfers.get(uploadID); err != nil {
		return "", 0, err
	} else if !t.upload {
		return "", 0, apierr.New(apierr.InvalidParams, "%q is a download, not an upload", uploadID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.touch()
	if offset != t.offset {
		return t.id, t.offset, apierr.New(apierr.Conflict, "upload %s has %d bytes, this chunk starts at %d; resend from %d", t.id, t.offset, offset, t.offset)
	}
	if len(data) > 0 {
		if _, err := t.pw.Write(data); err != nil {
			s.xfers.remove(t)
			t.abort(err)
			return t.id, t.offset, errOr(t.finish(wait), err)
		}
		t.offset += int64(len(data))
	}
	if !final {
		return t.id, t.offset, nil
	}
	t.pw.Close()
	s.xfers.remove(t)
	return t.id, t.offset, t.finish(wait)
}

func errOr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// DownloadChunk returns the next chunk of a download. With downloadID empty
// it starts one (of path). A request at the offset of the previous chunk
// gets that chunk again (a retry); at its end, the next one.
func (s *Session) DownloadChunk(wait context.Context, path, downloadID string, offset int64, size int) (id string, at int64, data []byte, eof bool, err error) {
	if size <= 0 {
		size = DefaultDownloadChunk
	}
	size = min(size, s.c.opts.MaxDownloadChunk)
	var t *transfer
	if downloadID == "" {
		if err := s.c.beginCall(); err != nil {
			return "", 0, nil, false, err
		}
		t, err = s.xfers.start(s.c.base, false, s.c.opts.TransferIdle, s.c.opts.MaxTransfers, func(ctx context.Context, t *transfer) error {
			defer s.c.endCall()
			err := s.sb.Download(ctx, path, t.pw)
			t.pw.CloseWithError(err) // nil: the reader sees EOF
			return err
		})
		if err != nil {
			s.c.endCall()
			return "", 0, nil, false, err
		}
	} else if t, err = s.xfers.get(downloadID); err != nil {
		return "", 0, nil, false, err
	} else if t.upload {
		return "", 0, nil, false, apierr.New(apierr.InvalidParams, "%q is an upload, not a download", downloadID)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.touch()
	switch {
	case downloadID != "" && offset == t.lastOffset:
		return t.id, t.lastOffset, t.last, t.eof, nil
	case offset != t.offset:
		return t.id, t.offset, nil, false, apierr.New(apierr.Conflict, "download %s is at offset %d, asked for %d", t.id, t.offset, offset)
	case t.eof:
		return t.id, t.offset, nil, true, nil
	}
	// Grown as data comes, not allocated at size: most downloads are small.
	var b bytes.Buffer
	n, rerr := io.CopyN(&b, t.pr, int64(size))
	buf := b.Bytes()
	if rerr != nil && rerr != io.EOF {
		s.xfers.remove(t)
		t.abort(rerr)
		return t.id, t.offset, nil, false, errOr(t.finish(wait), rerr)
	}
	t.lastOffset, t.last = t.offset, buf
	t.offset += n
	if rerr != nil { // EOF: the tar stream is complete
		t.eof = true
		if err := t.finish(wait); err != nil {
			s.xfers.remove(t)
			return t.id, t.lastOffset, nil, false, err
		}
		// Kept until idle so a retry of this last chunk still finds it,
		// or until a new transfer needs its place.
		t.kept.Store(true)
	}
	return t.id, t.lastOffset, buf, t.eof, nil
}
