package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/wsproto"
)

// ChunkSize is the default size of the pieces files.upload and
// files.download move (wsproto.ChunkSize).
const ChunkSize = wsproto.ChunkSize

// Session is a sandbox session on the server.
type Session struct {
	c *Client
	// ID and Token identify the session; Token is its capability (keep it
	// secret, hand it to whoever should use this session and nothing else).
	ID, Token string
	// Tools are the session's tool definitions.
	Tools []tools.Definition

	// OnOutput, if set, receives every output chunk of the session, of
	// calls made by any client (set it before making calls).
	OnOutput func(wsproto.StreamOutput)
	// OnLost, if set, is told of output that could not be delivered (see
	// OutputLost). Output the server withheld from a slow reader
	// (stream.gap) is read back and delivered in order without it.
	OnLost func(*OutputLost)

	mu      sync.Mutex
	lastSeq uint64
	streams map[string]tools.StreamFunc // by call id (JSON)
	done    chan struct{}
	reason  string

	// Refilling a gap (gap.go): the refill goroutine delivers the backlog
	// in order; the read loop appends to it meanwhile.
	refilling        bool
	backlog          []event
	backlogBytes     int
	lost             map[string]*OutputLost // by call id (JSON), for Call
	lostUnattributed int                    // losses of gaps with more calls than listed
	lastLost         *OutputLost
}

func newSession(c *Client, id, token string) *Session {
	return &Session{c: c, ID: id, Token: token, streams: map[string]tools.StreamFunc{}, done: make(chan struct{}), lost: map[string]*OutputLost{}}
}

// Done is closed when the session ends (closed by anyone, idle timeout,
// failure, or this client stopping); Reason says why.
func (s *Session) Done() <-chan struct{} { return s.done }

// Reason says why the session ended.
func (s *Session) Reason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.reason
}

// LastSeq is the seq of the last output chunk received.
func (s *Session) LastSeq() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeq
}

func (s *Session) end(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
	default:
		s.reason = reason
		close(s.done)
	}
}

func (s *Session) ref() wsproto.SessionRef {
	return wsproto.SessionRef{SessionID: s.ID, SessionToken: s.Token}
}

func (s *Session) attach(ctx context.Context) (*wsproto.AttachResult, error) {
	var r wsproto.AttachResult
	err := s.c.call(ctx, wsproto.MethodSessionAttach, wsproto.AttachParams{SessionID: s.ID, SessionToken: s.Token, LastSeq: s.LastSeq()}, &r)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	if r.NextSeq <= s.lastSeq { // the server's stream restarted (a new daemon)
		s.lastSeq = r.NextSeq - 1
	}
	s.mu.Unlock()
	return &r, nil
}

// output takes a chunk from the read loop: delivered at once, or behind
// a gap being refilled.
func (s *Session) output(o wsproto.StreamOutput) {
	s.mu.Lock()
	if s.refilling {
		s.backlogOutput(o)
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.deliver(o)
}

// deliver delivers a chunk once: chunks replayed after a reconnect that
// were already seen are dropped.
func (s *Session) deliver(o wsproto.StreamOutput) {
	s.mu.Lock()
	if o.Seq <= s.lastSeq {
		s.mu.Unlock()
		return
	}
	s.lastSeq = o.Seq
	f := s.streams[string(o.CallID)]
	on := s.OnOutput
	s.mu.Unlock()
	if f != nil {
		f([]byte(o.Data))
	}
	if on != nil {
		on(o)
	}
}

// Call runs a tool. args is anything that marshals to the tool's JSON
// arguments (a struct, a map, json.RawMessage). stream, if not nil, receives
// output while the call runs. A failure of the tool is an observation with
// IsError; an error means the call could not run. Cancelling ctx cancels the
// call on the server: Call returns once the server confirms the call
// stopped (a terminal command was interrupted, typically within 0.3 s; at
// most about 5 s), so the next call finds the tool free.
//
// Output the server withheld because stream read it too slowly is read
// back from the server and delivered in order before Call returns; if the
// server no longer held some of it, Call returns the observation with an
// *OutputLost error saying what was lost.
func (s *Session) Call(ctx context.Context, name string, args any, stream tools.StreamFunc) (*tools.Observation, error) {
	raw, ok := args.(json.RawMessage)
	if !ok && args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, fmt.Errorf("arguments of %s: %w", name, err)
		}
		raw = b
	}
	id := s.c.newID()
	key, _ := json.Marshal(id)
	if stream != nil {
		s.mu.Lock()
		s.streams[string(key)] = stream
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			delete(s.streams, string(key))
			s.mu.Unlock()
		}()
	}
	s.mu.Lock()
	unattributed := s.lostUnattributed
	s.mu.Unlock()
	var obs tools.Observation
	var barrier chan struct{}
	_, err := s.c.callHook(ctx, id, wsproto.MethodToolsCall, wsproto.CallParams{
		SessionRef: s.ref(), Name: name, Arguments: raw, Stream: stream != nil || s.OnOutput != nil,
	}, &obs, func(wsproto.Message) { barrier = s.barrier() })
	if err != nil {
		if ctx.Err() != nil {
			s.cancel(key)
		}
		return nil, err
	}
	if barrier != nil { // the call's output is still being read back
		select {
		case <-barrier:
		case <-ctx.Done():
			return &obs, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if lost := s.lost[string(key)]; lost != nil {
		delete(s.lost, string(key))
		return &obs, lost
	}
	if s.lostUnattributed != unattributed {
		return &obs, s.lastLost // some of this call's output may be in it
	}
	return &obs, nil
}

// cancel asks the server to cancel a call and waits, at most 5 s, for the
// answer (the caller's context is done, so a fresh one bounds it).
func (s *Session) cancel(callID json.RawMessage) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.c.call(ctx, wsproto.MethodToolsCancel, wsproto.CancelParams{SessionRef: s.ref(), CallID: callID}, nil)
}

// ToolsList returns the tools in a format: "" (sandboxd's definitions),
// "mcp" or "openai".
func (s *Session) ToolsList(ctx context.Context, format string) ([]json.RawMessage, error) {
	var r struct {
		Tools []json.RawMessage `json:"tools"`
	}
	err := s.c.call(ctx, wsproto.MethodToolsList, wsproto.ToolsListParams{SessionRef: s.ref(), Format: format}, &r)
	return r.Tools, err
}

// EgressDenials lists the session's recent egress denials: the hosts its
// egress proxy refused because allow_hosts does not name them, oldest
// first.
func (s *Session) EgressDenials(ctx context.Context) ([]wsproto.EgressDenial, error) {
	var r wsproto.EgressResult
	err := s.c.call(ctx, wsproto.MethodSessionEgress, s.ref(), &r)
	return r.Denials, err
}

// Upload unpacks a tar stream into destDir in the sandbox, in chunks.
func (s *Session) Upload(ctx context.Context, destDir string, tar io.Reader) error {
	size := s.c.opts.ChunkSize
	cur, eof, err := readChunk(tar, size)
	var offset int64
	var uploadID string
	for {
		if err != nil {
			return fmt.Errorf("reading the tar stream: %w", err)
		}
		var next []byte
		if !eof { // read ahead to know whether cur is the last chunk
			if next, eof, err = readChunk(tar, size); err != nil {
				return fmt.Errorf("reading the tar stream: %w", err)
			}
		}
		final := eof && len(next) == 0
		p := wsproto.UploadParams{SessionRef: s.ref(), UploadID: uploadID, Offset: offset, Data: cur, Final: &final}
		if uploadID == "" {
			p.Path = destDir
		}
		var r wsproto.UploadResult
		if err := s.c.call(ctx, wsproto.MethodFilesUpload, p, &r); err != nil {
			return err
		}
		if final {
			return nil
		}
		uploadID, offset, cur = r.UploadID, r.Bytes, next
	}
}

// readChunk reads up to size bytes; eof reports the end of r.
func readChunk(r io.Reader, size int) (b []byte, eof bool, err error) {
	buf := make([]byte, size)
	n, err := io.ReadFull(r, buf)
	switch {
	case err == nil:
		return buf, false, nil
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		return buf[:n], true, nil
	}
	return nil, false, err
}

// Download writes a tar stream of path (a file or directory) to w.
func (s *Session) Download(ctx context.Context, path string, w io.Writer) error {
	p := wsproto.DownloadParams{SessionRef: s.ref(), Path: path, ChunkSize: s.c.opts.ChunkSize}
	for {
		var r wsproto.DownloadResult
		if err := s.c.call(ctx, wsproto.MethodFilesDownload, p, &r); err != nil {
			return err
		}
		if _, err := w.Write(r.Data); err != nil {
			return err
		}
		if r.EOF {
			return nil
		}
		p = wsproto.DownloadParams{SessionRef: s.ref(), DownloadID: r.DownloadID, Offset: r.Offset + int64(len(r.Data)), ChunkSize: s.c.opts.ChunkSize}
	}
}

// Pause freezes the session's sandbox (session.pause): its processes keep
// their memory and use no CPU, calls are refused (apierr kind "conflict")
// and the idle timeout does not run until Resume. A session with a call
// running is not paused (kind "busy"). Pausing a paused session is no error.
func (s *Session) Pause(ctx context.Context) error {
	return s.c.call(ctx, wsproto.MethodSessionPause, s.ref(), nil)
}

// Resume thaws a paused session (session.resume); its idle timeout counts
// from now. Resuming a running session is no error.
func (s *Session) Resume(ctx context.Context) error {
	return s.c.call(ctx, wsproto.MethodSessionResume, s.ref(), nil)
}

// Close ends the session on the server (its sandbox is removed).
func (s *Session) Close(ctx context.Context) error {
	err := s.c.call(ctx, wsproto.MethodSessionClose, s.ref(), nil)
	if err == nil {
		s.end("closed")
		s.c.mu.Lock()
		delete(s.c.sessions, s.ID)
		s.c.mu.Unlock()
	}
	return err
}
