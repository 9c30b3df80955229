package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/tools"
)

// fakeRuntime runs each "sandbox" as an in-process agent.Server reached over
// net.Pipe, so the Manager is tested with the real protocol and no engine.
type fakeRuntime struct {
	t *testing.T

	mu        sync.Mutex
	boxes     map[string]*fakeBox
	starts    atomic.Int64
	startErr  error         // returned by Start when set
	startHold chan struct{} // Start blocks until closed (when set)
	onStart   func(Spec)    // called as Start begins (when set)
	removed   []string
	claimWait time.Duration // Claim takes this long, like an engine round trip (when set)
	startWait time.Duration // Start takes this long, like a container start (when set)
	away      atomic.Bool   // the engine does not answer: Inspect, Connect and Remove fail
}

var errEngineAway = errors.New("cannot connect to the Docker daemon (fake)")

type fakeBox struct {
	spec    Spec
	running bool
	paused  bool // pausableRuntime froze it
	exit    int
	pooled  bool
	stale   string // Resource.Outdated
	server  *agent.Server
	first   io.Closer   // the stream Start returned
	ends    []io.Closer // the agent's ends of every stream
	cancel  context.CancelFunc
	serving sync.WaitGroup
}

func newFakeRuntime(t *testing.T) *fakeRuntime {
	return &fakeRuntime{t: t, boxes: map[string]*fakeBox{}}
}

type echoArgs struct {
	Text  string `json:"text"`
	Sleep int    `json:"sleep_ms,omitempty"`
}

func fakeToolset(t *testing.T) *tools.Toolset {
	echo, err := tools.NewFunc(tools.Definition{Name: "echo", Description: "echo text"},
		func(ctx context.Context, a echoArgs) (*tools.Observation, error) {
			if a.Sleep > 0 {
				select {
				case <-time.After(time.Duration(a.Sleep) * time.Millisecond):
				case <-ctx.Done():
					return nil, ctx.Err()
				}
			}
			return tools.TextResult(a.Text, nil), nil
		}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := tools.NewToolset(echo)
	if err != nil {
		t.Fatal(err)
	}
	return ts
}

func (f *fakeRuntime) Start(ctx context.Context, spec Spec) (io.ReadWriteCloser, error) {
	f.starts.Add(1)
	f.mu.Lock()
	hold, startErr, onStart, wait := f.startHold, f.startErr, f.onStart, f.startWait
	f.mu.Unlock()
	if onStart != nil {
		onStart(spec)
	}
	if wait > 0 {
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if startErr != nil {
		return nil, startErr
	}
	srv, err := agent.NewServer(agent.ServerOptions{Toolset: fakeToolset(f.t), Workspace: "/workspace", ShutdownGrace: time.Second, Logger: testLogger()})
	if err != nil {
		return nil, err
	}
	sctx, cancel := context.WithCancel(context.Background())
	b := &fakeBox{spec: spec, running: true, pooled: spec.Pooled, server: srv, cancel: cancel}
	f.mu.Lock()
	if _, dup := f.boxes[spec.SessionID]; dup {
		f.mu.Unlock()
		cancel()
		return nil, fmt.Errorf("duplicate session %s", spec.SessionID)
	}
	f.boxes[spec.SessionID] = b
	f.mu.Unlock()
	// The "container" exits when its agent shuts down, like the real one.
	go func() {
		<-srv.Done()
		f.mu.Lock()
		b.running = false
		f.mu.Unlock()
	}()
	f.mu.Lock()
	conn := b.serve(sctx)
	b.first = conn
	f.mu.Unlock()
	return conn, nil
}

func (b *fakeBox) serve(ctx context.Context) io.ReadWriteCloser {
	host, box := net.Pipe()
	b.ends = append(b.ends, box)
	b.serving.Add(1)
	go func() {
		defer b.serving.Done()
		_ = b.server.Serve(ctx, box) // ends when the test closes the pipe
	}()
	return host
}

func (f *fakeRuntime) box(id string) (*fakeBox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.boxes[id]
	if !ok {
		return nil, fmt.Errorf("fake %s: %w", id, ErrNotFound)
	}
	return b, nil
}

func (f *fakeRuntime) Connect(ctx context.Context, id string) (io.ReadWriteCloser, error) {
	if f.away.Load() {
		return nil, errEngineAway
	}
	b, err := f.box(id)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	running := b.running
	f.mu.Unlock()
	if !running {
		return nil, errors.New("not running")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return b.serve(context.Background()), nil
}

func (f *fakeRuntime) Claim(ctx context.Context, id string) error {
	if f.claimWait > 0 {
		select {
		case <-time.After(f.claimWait):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b, err := f.box(id)
	if err != nil {
		return err
	}
	f.mu.Lock()
	b.pooled = false
	f.mu.Unlock()
	return nil
}

func (f *fakeRuntime) Inspect(ctx context.Context, id string) (Status, error) {
	if f.away.Load() {
		return Status{}, errEngineAway
	}
	b, err := f.box(id)
	if err != nil {
		return Status{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return Status{Running: b.running && !b.paused, Paused: b.paused, ExitCode: b.exit}, nil
}

func (f *fakeRuntime) List(ctx context.Context) ([]Resource, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []Resource
	for id, b := range f.boxes {
		out = append(out,
			Resource{Kind: KindContainer, ID: id, SessionID: id, Labels: b.spec.Labels, Running: b.running && !b.paused, Paused: b.paused, Pooled: b.pooled, Outdated: b.stale},
			Resource{Kind: KindVolume, ID: id + "-ws", SessionID: id})
	}
	return out, nil
}

func (f *fakeRuntime) Remove(ctx context.Context, id string) error {
	if f.away.Load() {
		return errEngineAway
	}
	f.mu.Lock()
	b, ok := f.boxes[id]
	delete(f.boxes, id)
	f.removed = append(f.removed, id)
	f.mu.Unlock()
	if ok {
		b.stop()
	}
	return nil
}

// breakStream closes the stream Start returned, leaving the box running
// (an attach connection that broke).
func (f *fakeRuntime) breakStream(id string) {
	b, err := f.box(id)
	if err != nil {
		f.t.Fatal(err)
	}
	b.first.Close()
}

// kill simulates `docker kill`: the agent dies, every stream ends.
// outdate makes a box look created with older settings.
func (f *fakeRuntime) outdate(id, why string) {
	b, err := f.box(id)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	b.stale = why
	f.mu.Unlock()
}

func (f *fakeRuntime) kill(id string) {
	b, err := f.box(id)
	if err != nil {
		f.t.Fatal(err)
	}
	f.mu.Lock()
	b.running, b.exit = false, 137
	ends := b.ends
	f.mu.Unlock()
	for _, c := range ends { // the process is gone: no goodbye on the wire
		c.Close()
	}
	b.stop()
}

func (b *fakeBox) stop() {
	b.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b.server.Shutdown(ctx)
	b.serving.Wait()
}

// crashAll stops every box's server (the end of a test).
func (f *fakeRuntime) stopAll() {
	f.mu.Lock()
	boxes := make([]*fakeBox, 0, len(f.boxes))
	for _, b := range f.boxes {
		boxes = append(boxes, b)
	}
	f.mu.Unlock()
	for _, b := range boxes {
		b.stop()
	}
}

func (f *fakeRuntime) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.boxes)
}

var _ Runtime = (*fakeRuntime)(nil)
