// Package servertest provides a fake session manager and a test server, so
// the API layers and the Go client can be tested without Docker (like
// net/http/httptest). The real manager is sandbox.Manager.
package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/egress"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/tools"
)

var (
	errClosed        = apierr.New(apierr.Unavailable, "session is closed")
	errManagerClosed = apierr.New(apierr.Unavailable, "session manager is shut down")
)

// FakeBackend is a fake core.Backend whose sessions run fake tools in memory.
//
// Tools of every fake session:
//   - echo {text}: returns text; with streaming, streams it first.
//   - count {ms}: counts a run, waits ms, returns how many times count
//     ran in this session.
//   - sleep {ms}: waits ms milliseconds (or until cancelled, or woken by
//     FakeSandbox.Wake: tests hold a call in flight as long as they need).
//   - stream {chunks, size, pause_us}: streams chunks pieces of size bytes
//     ("x"), pausing between them, and returns "done".
//   - fail {}: an IsError observation.
//   - image {}: a caption and a 1x1 PNG.
//   - terminal {command}: "echo X" prints X; "exit N" exits N (as
//     structured exit_code); anything else echoes the command.
type FakeBackend struct {
	egressCounts map[string]uint64 // SetEgressCounts

	mu       sync.Mutex
	sessions map[string]*FakeSandbox
	created  atomic.Int64
	shut     bool
	// CreateDelay is how long Create takes.
	CreateDelay time.Duration
	gate        chan struct{}        // see HoldCreates
	held        atomic.Int64         // creates waiting at the gate
	snaps       map[string]*fakeSnap // snapshot.go
	warm        map[string]int       // snapshot.go: WarmSnapshot
}

// HoldCreates makes every Create wait (or end with its ctx) until the
// returned function is called; Held counts the creates waiting.
func (m *FakeBackend) HoldCreates() (release func()) {
	gate := make(chan struct{})
	m.mu.Lock()
	m.gate = gate
	m.mu.Unlock()
	var once sync.Once
	return func() { once.Do(func() { close(gate) }) }
}

// Held counts the creates waiting for HoldCreates' release.
func (m *FakeBackend) Held() int { return int(m.held.Load()) }

// NewFakeBackend returns an empty fake backend.
func NewFakeBackend() *FakeBackend { return &FakeBackend{sessions: map[string]*FakeSandbox{}} }

var _ core.Backend = (*FakeBackend)(nil)

// Create makes a fake session; it keeps o and co for the test to read
// (FakeSandbox.Options, CreateOptions).
func (m *FakeBackend) Create(ctx context.Context, o sandbox.SessionOptions, co sandbox.CreateOptions) (core.Sandbox, error) {
	if m.CreateDelay > 0 {
		select {
		case <-time.After(m.CreateDelay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	m.mu.Lock()
	gate := m.gate
	m.mu.Unlock()
	if gate != nil {
		m.held.Add(1)
		select {
		case <-gate:
			m.held.Add(-1)
		case <-ctx.Done():
			m.held.Add(-1)
			return nil, ctx.Err()
		}
	}
	if o.Image == "" {
		o.Image = "fake:latest"
	}
	if o.Image == "bad image" {
		return nil, apierr.New(apierr.InvalidParams, `invalid options: image: "bad image" is not an image reference`)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.shut {
		return nil, errManagerClosed
	}
	s := &FakeSandbox{id: "fake-" + auth.NewToken()[:12], opts: o, co: co, done: make(chan struct{}), wake: make(chan struct{}), files: map[string][]byte{}}
	m.sessions[s.id] = s
	m.created.Add(1)
	m.mu.Unlock()
	m.forked(s) // a session of a snapshot's image has its files
	m.mu.Lock()
	return s, nil
}

// Created counts sessions created so far.
func (m *FakeBackend) Created() int { return int(m.created.Load()) }

// Get returns a live session.
func (m *FakeBackend) Get(id string) (core.Sandbox, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s, ok := m.sessions[id]
	if !ok || s.closed.Load() {
		return nil, false
	}
	return s, true
}

// Sandbox returns a session (live or not) as its fake type.
func (m *FakeBackend) Sandbox(id string) *FakeSandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sessions[id]
}

// List returns the live sessions.
func (m *FakeBackend) List() []core.Sandbox {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []core.Sandbox
	for _, s := range m.sessions {
		if !s.closed.Load() {
			out = append(out, s)
		}
	}
	return out
}

// Live counts live sessions.
func (m *FakeBackend) Live() int { return len(m.List()) }

// SetEgressCounts sets the egress denials Stats reports.
func (m *FakeBackend) SetEgressCounts(c map[string]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.egressCounts = c
}

// Stats counts live sessions, and the egress denials of SetEgressCounts.
func (m *FakeBackend) Stats() metrics.Stats {
	m.mu.Lock()
	eg := maps.Clone(m.egressCounts)
	m.mu.Unlock()
	return metrics.Stats{SessionsByState: map[string]int{"ready": m.Live()}, PoolSize: 0, EgressDenials: eg}
}

// Shutdown closes every session.
func (m *FakeBackend) Shutdown(ctx context.Context, keep bool) error {
	m.mu.Lock()
	m.shut = true
	all := make([]*FakeSandbox, 0, len(m.sessions))
	for _, s := range m.sessions {
		all = append(all, s)
	}
	m.mu.Unlock()
	for _, s := range all {
		_ = s.Close(ctx)
	}
	return nil
}

// FakeSandbox is a sandbox of the fake backend.
type FakeSandbox struct {
	id     string
	opts   sandbox.SessionOptions
	co     sandbox.CreateOptions
	done   chan struct{}
	closed atomic.Bool
	counts atomic.Int64
	// sleeping counts sleep calls in progress.
	sleeping atomic.Int64
	mu       sync.Mutex
	files    map[string][]byte // upload dir -> tar bytes
	err      error
	wake     chan struct{} // closed by Wake, then replaced
	ptys     []*FakePTY
	egress   []egress.Denial
}

// SetEgress sets the sandbox's egress denials (EgressDenials).
func (s *FakeSandbox) SetEgress(ds []egress.Denial) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.egress = ds
}

// EgressDenials returns what SetEgress set.
func (s *FakeSandbox) EgressDenials() []egress.Denial {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.egress
}

// Sleeping counts the sleep calls in progress.
func (s *FakeSandbox) Sleeping() int { return int(s.sleeping.Load()) }

// Wake ends the sleep calls in progress as if their time had passed.
func (s *FakeSandbox) Wake() {
	s.mu.Lock()
	close(s.wake)
	s.wake = make(chan struct{})
	s.mu.Unlock()
}

// ID implements core.Sandbox.
func (s *FakeSandbox) ID() string { return s.id }

// Info implements core.Sandbox.
func (s *FakeSandbox) Info() core.Info {
	state := "ready"
	if s.closed.Load() {
		state = "closed"
	}
	return core.Info{State: state, Image: s.opts.Image, Labels: maps.Clone(s.opts.Labels)}
}

// Options are the options the session was created with, with the idle
// timeout in force (its create's, if set), as sandbox.Session.Options.
func (s *FakeSandbox) Options() sandbox.SessionOptions {
	o := s.opts
	if s.co.IdleTimeout != 0 {
		o.IdleTimeout = s.co.IdleTimeout
	}
	return o
}

// CreateOptions are how its create asked the backend to serve it.
func (s *FakeSandbox) CreateOptions() sandbox.CreateOptions { return s.co }

// Counts is how many times the count tool ran.
func (s *FakeSandbox) Counts() int { return int(s.counts.Load()) }

// Fail ends the session as if its sandbox died.
func (s *FakeSandbox) Fail(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
	if s.closed.CompareAndSwap(false, true) {
		close(s.done)
	}
	s.endPTYs()
}

var fakeDefs = func() []tools.Definition {
	type text struct {
		Text string `json:"text"`
	}
	type empty struct{}
	type sleep struct {
		MS int `json:"ms"`
	}
	type stream struct {
		Chunks  int `json:"chunks"`
		Size    int `json:"size"`
		PauseUS int `json:"pause_us,omitempty"`
	}
	type count struct {
		MS int `json:"ms,omitempty"`
	}
	type terminal struct {
		Command string `json:"command"`
	}
	d := func(name string, schema any, ro bool) tools.Definition {
		var def tools.Definition
		switch schema.(type) {
		case text:
			def.InputSchema = tools.SchemaFor[text]()
		case sleep:
			def.InputSchema = tools.SchemaFor[sleep]()
		case stream:
			def.InputSchema = tools.SchemaFor[stream]()
		case terminal:
			def.InputSchema = tools.SchemaFor[terminal]()
		case count:
			def.InputSchema = tools.SchemaFor[count]()
		default:
			def.InputSchema = tools.SchemaFor[empty]()
		}
		def.Name, def.Description = name, "fake "+name
		def.Annotations = tools.Annotations{ReadOnlyHint: ro}
		return def
	}
	return []tools.Definition{
		d("echo", text{}, true), d("count", count{}, false), d("sleep", sleep{}, true),
		d("stream", stream{}, true), d("fail", empty{}, true), d("image", empty{}, true),
		d("terminal", terminal{}, false),
	}
}()

// Tools implements core.Sandbox.
func (s *FakeSandbox) Tools(ctx context.Context) ([]tools.Definition, error) {
	if s.closed.Load() {
		return nil, errClosed
	}
	return fakeDefs, nil
}

// onePixelPNG is a valid 1x1 PNG.
var onePixelPNG = []byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")

// Call implements core.Sandbox.
func (s *FakeSandbox) Call(ctx context.Context, name string, args json.RawMessage, stream tools.StreamFunc) (*tools.Observation, error) {
	if s.closed.Load() {
		return nil, fmt.Errorf("session %s: %w", s.id, errClosed)
	}
	if name == "" { // as the agent answers
		return nil, apierr.New(apierr.InvalidParams, "tools/call needs the name of a tool")
	}
	if stream == nil {
		stream = func([]byte) {}
	}
	var a struct {
		Text    string `json:"text"`
		MS      int    `json:"ms"`
		Chunks  int    `json:"chunks"`
		Size    int    `json:"size"`
		Command string `json:"command"`
		PauseUS int    `json:"pause_us"`
	}
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return tools.Errorf("Invalid arguments for tool %q: %v", name, err), nil
		}
	}
	switch name {
	case "echo":
		stream([]byte(a.Text))
		return tools.TextResult(a.Text, nil), nil
	case "count":
		n := s.counts.Add(1)
		if a.MS > 0 {
			select {
			case <-time.After(time.Duration(a.MS) * time.Millisecond):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return tools.TextResult(fmt.Sprint(n), map[string]int64{"count": n}), nil
	case "sleep":
		s.mu.Lock()
		wake := s.wake
		s.mu.Unlock()
		s.sleeping.Add(1)
		defer s.sleeping.Add(-1)
		select {
		case <-time.After(time.Duration(a.MS) * time.Millisecond):
			return tools.TextResult("slept", nil), nil
		case <-wake:
			return tools.TextResult("slept", nil), nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-s.done:
			return nil, errClosed
		}
	case "stream":
		chunk := bytes.Repeat([]byte("x"), max(a.Size, 1))
		for range a.Chunks {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			stream(chunk)
			if a.PauseUS > 0 {
				time.Sleep(time.Duration(a.PauseUS) * time.Microsecond)
			}
		}
		return tools.TextResult("done", nil), nil
	case "fail":
		return tools.Errorf("it failed, as asked"), nil
	case "image":
		return tools.ImageResult("a pixel", "image/png", onePixelPNG, nil), nil
	case "terminal":
		out, code := a.Command+"\n", 0
		if rest, ok := strings.CutPrefix(a.Command, "echo "); ok {
			out = rest + "\n"
		} else if rest, ok := strings.CutPrefix(a.Command, "exit "); ok {
			out = ""
			if _, err := fmt.Sscan(rest, &code); err != nil {
				return tools.Errorf("exit needs a number: %v", err), nil
			}
		}
		stream([]byte(out))
		s.watchTerminal(a.Command, out)
		return tools.TextResult(out, map[string]any{"exit_code": code}), nil
	}
	return nil, fmt.Errorf("%w %q", tools.ErrUnknownTool, name)
}

// Upload implements core.Sandbox: it keeps the tar bytes under destDir.
func (s *FakeSandbox) Upload(ctx context.Context, destDir string, r io.Reader) error {
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.files[destDir] = b
	s.mu.Unlock()
	return nil
}

// Download implements core.Sandbox: it writes what was uploaded to path.
func (s *FakeSandbox) Download(ctx context.Context, path string, w io.Writer) error {
	s.mu.Lock()
	b, ok := s.files[path]
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("%s: %w", path, fs.ErrNotExist)
	}
	_, err := w.Write(b)
	return err
}

// Close implements core.Sandbox.
func (s *FakeSandbox) Close(ctx context.Context) error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.done)
	}
	s.endPTYs()
	return nil
}

// Done implements core.Sandbox.
func (s *FakeSandbox) Done() <-chan struct{} { return s.done }

// EndReason implements core.Sandbox.
func (s *FakeSandbox) EndReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return ""
	}
	return s.err.Error()
}
