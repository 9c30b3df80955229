package agent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var quiet = slog.New(slog.DiscardHandler)

// testKit is a test toolset whose tools report what happened to them.
type testKit struct {
	closed    atomic.Int32
	started   chan string   // name of a tool that began to run (sleep)
	cancelled chan string   // name of a tool whose ctx ended
	release   chan struct{} // lets a cancelled linger call return

	mu      sync.Mutex
	inside  int
	barrier chan struct{} // closed when barrierN calls are inside at once
	barN    int

	watchers []*tools.StreamFunc

	streamed atomic.Int64 // bytes the stream tool has handed to its stream
}

func (k *testKit) Close() error { k.closed.Add(1); return nil }

// Watch makes the kit's tools followable (tools.Watcher): emit sends to the
// watchers.
func (k *testKit) Watch(fn tools.StreamFunc) func() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.watchers = append(k.watchers, &fn)
	return func() {
		k.mu.Lock()
		defer k.mu.Unlock()
		for i, w := range k.watchers {
			if w == &fn {
				k.watchers = append(k.watchers[:i], k.watchers[i+1:]...)
				break
			}
		}
	}
}

func (k *testKit) emit(b []byte) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, w := range k.watchers {
		(*w)(b)
	}
}

type (
	echoArgs struct {
		Text string `json:"text"`
	}
	sleepArgs struct {
		MS int `json:"ms"`
	}
	streamArgs struct {
		N    int `json:"n"`
		Size int `json:"size,omitempty"` // each chunk this many bytes of 'x' instead of "chunk N"
	}
	noArgs struct{}
)

func newTestKit(t testing.TB, barrierN int) (*testKit, *tools.Toolset) {
	t.Helper()
	k := &testKit{started: make(chan string, 100), cancelled: make(chan string, 100), release: make(chan struct{}), barrier: make(chan struct{}), barN: barrierN}
	mk := func(tool *tools.Tool, err error) *tools.Tool {
		require.NoError(t, err)
		return tool
	}
	def := func(name string) tools.Definition { return tools.Definition{Name: name, Description: name + " (test)"} }
	ts, err := tools.NewToolset(
		mk(tools.NewFunc(def("echo"), func(_ context.Context, a echoArgs) (*tools.Observation, error) {
			return tools.TextResult(a.Text, nil), nil
		}, k)),
		mk(tools.NewFunc(def("sleep"), func(ctx context.Context, a sleepArgs) (*tools.Observation, error) {
			select {
			case k.started <- "sleep":
			default: // nobody waits for it
			}
			select {
			case <-time.After(time.Duration(a.MS) * time.Millisecond):
				return tools.TextResult("slept", nil), nil
			case <-ctx.Done():
				k.cancelled <- "sleep"
				return nil, ctx.Err()
			}
		}, k)),
		// barrier returns once barrierN barrier calls run at the same time:
		// it can only succeed if calls really overlap.
		mk(tools.NewFunc(def("barrier"), func(ctx context.Context, _ noArgs) (*tools.Observation, error) {
			k.mu.Lock()
			k.inside++
			if k.inside == k.barN {
				close(k.barrier)
			}
			k.mu.Unlock()
			select {
			case <-k.barrier:
				return tools.TextResult("together", nil), nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}, k)),
		// linger takes its time to stop: once cancelled, it returns only
		// when release is closed.
		mk(tools.NewFunc(def("linger"), func(ctx context.Context, _ noArgs) (*tools.Observation, error) {
			<-ctx.Done()
			<-k.release
			return nil, ctx.Err()
		}, k)),
		mk(tools.NewFunc(def("panic"), func(context.Context, noArgs) (*tools.Observation, error) {
			panic("boom")
		}, k)),
		mk(tools.NewFunc(def("stream"), func(ctx context.Context, a streamArgs) (*tools.Observation, error) {
			out := tools.StreamFrom(ctx)
			for i := 1; i <= a.N; i++ {
				b := fmt.Appendf(nil, "chunk %d\n", i)
				if a.Size > 0 {
					b = bytes.Repeat([]byte("x"), a.Size)
				}
				out(b)
				k.streamed.Add(int64(len(b)))
			}
			return tools.TextResult("done", nil), nil
		}, k)),
		mk(tools.NewFunc(def("fail"), func(context.Context, noArgs) (*tools.Observation, error) {
			return tools.Errorf("the model should read this"), nil
		}, k)),
	)
	require.NoError(t, err)
	return k, ts
}

// pair is a Server and a Client joined by net.Pipe.
type pair struct {
	srv      *Server
	cli      *agentclient.Client
	kit      *testKit
	ws       string
	serveErr chan error
	raw      *requester // made by request
}

func newPair(t testing.TB, tweak ...func(*ServerOptions)) *pair {
	t.Helper()
	kit, ts := newTestKit(t, 4)
	opts := ServerOptions{Toolset: ts, Workspace: t.TempDir(), Logger: quiet}
	for _, f := range tweak {
		f(&opts)
	}
	srv, err := NewServer(opts)
	require.NoError(t, err)
	p := &pair{srv: srv, kit: kit, ws: opts.Workspace, serveErr: make(chan error, 1)}
	p.cli = p.connect(t)
	t.Cleanup(func() {
		_ = p.cli.Close()
		_ = srv.Close()
	})
	return p
}

// connect serves one more connection and returns its client.
func (p *pair) connect(t testing.TB) *agentclient.Client {
	hostEnd, agentEnd := net.Pipe()
	go func() {
		err := p.srv.Serve(context.Background(), agentEnd)
		select {
		case p.serveErr <- err:
		default:
		}
	}()
	cli := agentclient.NewClient(hostEnd, agentclient.WithLogger(quiet))
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

// requester sends requests by hand on a connection of its own to a
// server, one at a time: what the client would not send, or would check
// first.
type requester struct {
	t    testing.TB
	conn net.Conn
	r    *bufio.Reader
	id   uint64
}

func newRequester(t testing.TB, srv *Server) *requester {
	hostEnd, agentEnd := net.Pipe()
	go func() { _ = srv.Serve(context.Background(), agentEnd) }()
	t.Cleanup(func() { _ = hostEnd.Close() })
	return &requester{t: t, conn: hostEnd, r: bufio.NewReader(hostEnd)}
}

// request is p's requester (made on first use).
func (p *pair) request(t testing.TB) *requester {
	if p.raw == nil {
		p.raw = newRequester(t, p.srv)
	}
	return p.raw
}

func (rq *requester) close() error { return rq.conn.Close() }

// roundTrip sends one request and returns its result, or the agent's error
// (a *proto.Error) after "agent <method>: ", as the client returns it.
func (rq *requester) roundTrip(ctx context.Context, method string, params any) (json.RawMessage, error) {
	t := rq.t
	t.Helper()
	raw, err := json.Marshal(params)
	require.NoError(t, err)
	rq.id++
	buf, err := proto.EncodeFrame(&proto.Frame{ID: rq.id, Method: method, Params: raw})
	require.NoError(t, err)
	if dl, ok := ctx.Deadline(); ok {
		require.NoError(t, rq.conn.SetDeadline(dl))
	}
	_, err = rq.conn.Write(buf)
	require.NoError(t, err)
	var hdr [proto.HeaderSize]byte
	for {
		body, _, err := proto.ReadFrame(rq.r, &hdr)
		require.NoError(t, err)
		var f proto.Frame
		require.NoError(t, json.Unmarshal(body, &f))
		if f.ID != rq.id || f.Method != "" {
			continue // a notification
		}
		if f.Error != nil {
			return nil, fmt.Errorf("agent %s: %w", method, f.Error)
		}
		return f.Result, nil
	}
}

// ctxT bounds a test's calls: a guard on a hang, not a timing assert (a
// loaded machine is slow, issue 23).
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
