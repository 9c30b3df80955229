package agent

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

func TestPingListCall(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	require.NoError(t, p.cli.Ping(ctx))

	defs, err := p.cli.ListTools(ctx)
	require.NoError(t, err)
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	assert.Equal(t, []string{"echo", "sleep", "barrier", "linger", "panic", "stream", "fail"}, names)
	require.NotNil(t, defs[0].InputSchema)

	obs, err := p.cli.Call(ctx, "echo", json.RawMessage(`{"text":"hi"}`), nil)
	require.NoError(t, err)
	assert.Equal(t, "hi", obs.Text())
	assert.False(t, obs.IsError)

	obs, err = p.cli.Call(ctx, "fail", nil, nil)
	require.NoError(t, err, "a tool-level failure is an observation, not an error")
	assert.True(t, obs.IsError)
	assert.Equal(t, "the model should read this", obs.Text())
}

func TestBadArgumentsAreObservations(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	cases := []struct{ name, args, want string }{
		{"wrong type", `{"text":5}`, "text"},
		{"unknown field", `{"text":"a","nope":1}`, "nope"},
		{"not an object", `[1]`, "expected a JSON object"},
		{"not json", `{"text":`, "Invalid arguments for tool \"echo\": not valid JSON: unexpected end of JSON input"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs, err := p.cli.Call(ctx, "echo", json.RawMessage(c.args), nil)
			require.NoError(t, err)
			assert.True(t, obs.IsError)
			assert.Contains(t, obs.Text(), c.want)
		})
	}
}

func TestCallsRunConcurrently(t *testing.T) {
	p := newPair(t) // the barrier tool needs 4 calls inside at once
	ctx := ctxT(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			obs, err := p.cli.Call(ctx, "barrier", nil, nil)
			if err == nil && obs.Text() != "together" {
				err = fmt.Errorf("got %q", obs.Text())
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// A cancelled call returns as soon as the agent answers that the tool
// stopped, not after the CancelWait fallback: in a synctest bubble, where
// time moves only when every goroutine waits, so any timer the call waited
// on would show as time passed.
func TestCancelStopsTheCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := p.cli.Call(ctx, "sleep", json.RawMessage(`{"ms":60000}`), nil)
			done <- err
		}()
		synctest.Wait()
		require.Equal(t, 1, inFlight(p.srv))
		start := time.Now()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		assert.Less(t, time.Since(start), agentclient.CancelWait, "the call returned on the agent's answer, not after CancelWait")
		select {
		case name := <-p.kit.cancelled:
			assert.Equal(t, "sleep", name, "the tool's ctx must be cancelled on the agent")
		default:
			t.Fatal("the agent did not cancel the tool")
		}
		synctest.Wait()
		assert.Equal(t, 0, inFlight(p.srv))
		require.NoError(t, p.cli.Ping(context.Background()), "the connection survives a cancel")
	})
}

// A cancelled call returns once the agent has answered, that is once the
// tool has stopped (tools.cancel relies on it), or after CancelWait.
func TestCancelledCallWaitsForTheToolToStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := p.cli.Call(ctx, "linger", json.RawMessage(`{}`), nil)
			done <- err
		}()
		synctest.Wait()
		require.Equal(t, 1, inFlight(p.srv))
		cancel()
		synctest.Wait()
		select {
		case err := <-done:
			t.Fatalf("Call returned (%v) before the tool stopped", err)
		default:
		}
		close(p.kit.release)
		synctest.Wait()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		default:
			t.Fatal("Call did not return once the tool stopped")
		}
	})
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		t.Cleanup(func() { close(p.kit.release) }) // before the pair's cleanup closes the server
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := p.cli.Call(ctx, "linger", json.RawMessage(`{}`), nil)
			done <- err
		}()
		synctest.Wait()
		start := time.Now()
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		assert.Equal(t, agentclient.CancelWait, time.Since(start), "a tool that does not stop holds the caller CancelWait at most")
	})
}

func TestQueuedCallCanBeCancelledAndBusyIsReported(t *testing.T) {
	p := newPair(t, func(o *ServerOptions) { o.MaxConcurrentCalls = 1; o.MaxQueuedRequests = 2 })
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	results := make(chan error, 2)
	go func() { _, err := p.cli.Call(ctx, "sleep", json.RawMessage(`{"ms":60000}`), nil); results <- err }()
	waitFor(t, func() bool { return p.srv.queued.Load() == 1 })
	go func() { _, err := p.cli.Call(ctx, "sleep", json.RawMessage(`{"ms":1}`), nil); results <- err }()
	waitFor(t, func() bool { return p.srv.queued.Load() == 2 })

	_, err := p.cli.Call(ctxT(t), "echo", json.RawMessage(`{"text":"x"}`), nil)
	require.ErrorIs(t, err, proto.ErrBusy)
	assert.Contains(t, err.Error(), "retry later")
	require.NoError(t, p.cli.Ping(ctxT(t)), "ping is not queued behind tool calls")

	cancel()
	for range 2 {
		require.ErrorIs(t, <-results, context.Canceled)
	}
	waitFor(t, func() bool { return p.srv.queued.Load() == 0 })
}

func TestStreamOrderingAndCompleteness(t *testing.T) {
	p := newPair(t)
	const n = 500
	var got []string
	obs, err := p.cli.Call(ctxT(t), "stream", json.RawMessage(fmt.Sprintf(`{"n":%d}`, n)), func(b []byte) {
		got = append(got, string(b))
	})
	require.NoError(t, err)
	assert.Equal(t, "done", obs.Text())
	// Chunks that queued up while the stream func ran arrive joined.
	var want strings.Builder
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&want, "chunk %d\n", i)
	}
	require.Equal(t, want.String(), strings.Join(got, ""), "every chunk arrives, in order, before Call returns")

	// Without a stream func the call still works and nothing is sent.
	obs, err = p.cli.Call(ctxT(t), "stream", json.RawMessage(`{"n":3}`), nil)
	require.NoError(t, err)
	assert.Equal(t, "done", obs.Text())
}

func TestPanicIsRecovered(t *testing.T) {
	p := newPair(t)
	_, err := p.cli.Call(ctxT(t), "panic", nil, nil)
	require.ErrorIs(t, err, proto.ErrInternal)
	assert.Contains(t, err.Error(), `tool "panic" panicked: boom`)
	var we *proto.Error
	require.ErrorAs(t, err, &we)
	assert.Equal(t, proto.CodeInternal, we.Code)
	require.NoError(t, p.cli.Ping(ctxT(t)))
	obs, err := p.cli.Call(ctxT(t), "echo", json.RawMessage(`{"text":"still here"}`), nil)
	require.NoError(t, err)
	assert.Equal(t, "still here", obs.Text())
}

func TestUnknownToolAndMethod(t *testing.T) {
	p := newPair(t)
	_, err := p.cli.Call(ctxT(t), "nope", nil, nil)
	require.ErrorIs(t, err, tools.ErrUnknownTool)
	assert.Contains(t, err.Error(), `unknown tool "nope"; available tools: [echo sleep`)

	_, err = p.request(t).roundTrip(ctxT(t), "tools/frobnicate", struct{}{})
	require.ErrorIs(t, err, proto.ErrMethodNotFound)
	assert.Contains(t, err.Error(), `"tools/frobnicate"; the agent knows direct/dial, fs/download/begin`)

	_, err = p.request(t).roundTrip(ctxT(t), proto.MethodToolsCall, map[string]any{"tool": "echo"})
	require.ErrorIs(t, err, proto.ErrInvalidParams)
	assert.Contains(t, err.Error(), `unknown field "tool"`)

	_, err = p.request(t).roundTrip(ctxT(t), proto.MethodToolsCall, map[string]any{"name": ""})
	require.ErrorIs(t, err, proto.ErrInvalidParams)
	assert.Contains(t, err.Error(), "needs the name of a tool")
	require.NoError(t, p.cli.Ping(ctxT(t)))
}

func TestClientRefusesOversizedFrame(t *testing.T) {
	p := newPair(t)
	huge := json.RawMessage(`{"text":"` + strings.Repeat("x", proto.MaxFrameSize) + `"}`)
	_, err := p.cli.Call(ctxT(t), "echo", huge, nil)
	require.ErrorIs(t, err, proto.ErrFrameTooLarge)
	require.NoError(t, p.cli.Ping(ctxT(t)), "nothing was written: the connection is fine")
}

// TestMaxFrameFitsTheLargestArgument: a tools/call whose arguments are just
// over tools.MaxArgumentBytes still fits in one frame, so it reaches the
// tool and is refused there as an observation the model reads, not as a
// broken frame. (cmd/sandboxd's TestAgentBadInput sends one for real,
// without -short.)
func TestMaxFrameFitsTheLargestArgument(t *testing.T) {
	const arg = `{"file_text":"x"}`
	params, err := json.Marshal(proto.CallParams{Name: "file_editor", Arguments: json.RawMessage(arg), Stream: true})
	require.NoError(t, err)
	small, err := proto.EncodeFrame(&proto.Frame{ID: math.MaxUint64, Method: proto.MethodToolsCall, Params: params})
	require.NoError(t, err)
	largest := len(small) - proto.HeaderSize - len(arg) + tools.MaxArgumentBytes + 1
	assert.LessOrEqual(t, largest, proto.MaxFrameSize, "a call just over the argument limit must fit a frame")
}

// rawConn talks frames by hand to a server, for what a Client never sends.
type rawConn struct {
	t     *testing.T
	srv   *Server
	conn  net.Conn
	r     *bufio.Reader
	sendq chan []byte // written in order by one goroutine (net.Pipe writes block)
	done  chan error
}

func newRaw(t *testing.T) *rawConn {
	_, ts := newTestKit(t, 1)
	srv, err := NewServer(ServerOptions{Toolset: ts, Workspace: t.TempDir(), Logger: quiet})
	require.NoError(t, err)
	hostEnd, agentEnd := net.Pipe()
	rc := &rawConn{t: t, srv: srv, conn: hostEnd, r: bufio.NewReader(hostEnd), sendq: make(chan []byte, 16), done: make(chan error, 1)}
	go func() { rc.done <- srv.Serve(context.Background(), agentEnd) }()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		for b := range rc.sendq {
			if _, err := hostEnd.Write(b); err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { close(rc.sendq); _ = hostEnd.Close(); _ = srv.Close(); <-writerDone })
	return rc
}

func (rc *rawConn) send(b []byte) { rc.sendq <- b }

func (rc *rawConn) sendFrame(body string) {
	buf := make([]byte, 4+len(body))
	binary.BigEndian.PutUint32(buf, uint32(len(body)))
	copy(buf[4:], body)
	rc.send(buf)
}

func (rc *rawConn) read() (*proto.Frame, error) {
	if err := rc.conn.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		return nil, err
	}
	var hdr [4]byte
	body, data, err := proto.ReadFrame(rc.r, &hdr)
	if err != nil {
		return nil, err
	}
	var f proto.Frame
	require.NoError(rc.t, json.Unmarshal(body, &f))
	f.Data = data
	return &f, nil
}

func TestOversizedFrameHeaderClosesTheConnection(t *testing.T) {
	rc := newRaw(t)
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], proto.MaxFrameSize+1)
	rc.send(hdr[:])
	f, err := rc.read()
	require.NoError(t, err)
	require.NotNil(t, f.Error)
	assert.Equal(t, proto.CodeFrameTooLarge, f.Error.Code)
	assert.Contains(t, f.Error.Message, "the limit is 33554432")
	_, err = rc.read()
	require.Error(t, err, "the agent hangs up after a bad header")
	assert.ErrorIs(t, <-rc.done, proto.ErrFrameTooLarge)
}

func TestGarbageBytes(t *testing.T) {
	t.Run("stray text is not a frame header", func(t *testing.T) {
		rc := newRaw(t)
		rc.send([]byte("hello, is this bash?\n"))
		f, err := rc.read()
		require.NoError(t, err)
		assert.Equal(t, proto.CodeFrameTooLarge, f.Error.Code)
		assert.Contains(t, f.Error.Message, "not sandboxd frames")
		assert.ErrorIs(t, <-rc.done, proto.ErrFrameTooLarge)
	})
	t.Run("a framed body that is not JSON is skipped", func(t *testing.T) {
		rc := newRaw(t)
		rc.sendFrame("{not json")
		f, err := rc.read()
		require.NoError(t, err)
		assert.Equal(t, proto.CodeParse, f.Error.Code)
		assert.Zero(t, f.ID)
		rc.sendFrame(`{"id":9,"method":"ping"}`)
		f, err = rc.read()
		require.NoError(t, err)
		assert.EqualValues(t, 9, f.ID)
		assert.JSONEq(t, `{}`, string(f.Result))
	})
	t.Run("a binary frame with a bad JSON length is skipped", func(t *testing.T) {
		rc := newRaw(t)
		buf := make([]byte, 4+8)
		binary.BigEndian.PutUint32(buf, proto.BinaryFlag|8)
		binary.BigEndian.PutUint32(buf[4:], 100) // more JSON than the body holds
		rc.send(buf)
		f, err := rc.read()
		require.NoError(t, err)
		assert.Equal(t, proto.CodeParse, f.Error.Code)
		assert.Contains(t, f.Error.Message, "announces 100 bytes of JSON in a body of 8")
		rc.sendFrame(`{"id":2,"method":"ping"}`)
		f, err = rc.read()
		require.NoError(t, err)
		assert.EqualValues(t, 2, f.ID)
	})
	t.Run("requests without a method or id", func(t *testing.T) {
		rc := newRaw(t)
		rc.sendFrame(`{"id":3}`)
		f, err := rc.read()
		require.NoError(t, err)
		assert.EqualValues(t, 3, f.ID)
		assert.Equal(t, proto.CodeInvalidRequest, f.Error.Code)
		rc.sendFrame(`{"method":"no-such-notification"}`) // ignored, no answer
		rc.sendFrame(`{"id":4,"method":"ping"}`)
		f, err = rc.read()
		require.NoError(t, err)
		assert.EqualValues(t, 4, f.ID)
	})
	t.Run("a duplicate id in flight", func(t *testing.T) {
		rc := newRaw(t)
		rc.sendFrame(`{"id":5,"method":"tools/call","params":{"name":"sleep","arguments":{"ms":300}}}`)
		waitFor(t, func() bool { return inFlight(rc.srv) == 1 })
		rc.sendFrame(`{"id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`)
		f, err := rc.read()
		require.NoError(t, err)
		assert.Equal(t, proto.CodeInvalidRequest, f.Error.Code)
		assert.Contains(t, f.Error.Message, "already in flight")
		f, err = rc.read()
		require.NoError(t, err)
		assert.Nil(t, f.Error, "the first request still gets its answer")
	})
}

func TestDisconnectFailsPendingCalls(t *testing.T) {
	_, ts := newTestKit(t, 1)
	srv, err := NewServer(ServerOptions{Toolset: ts, Workspace: t.TempDir(), Logger: quiet})
	require.NoError(t, err)
	defer func() { _ = srv.Close() }()
	hostEnd, agentEnd := net.Pipe()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), agentEnd) }()
	cli := agentclient.NewClient(hostEnd, agentclient.WithLogger(quiet))
	defer func() { _ = cli.Close() }()

	const n = 5
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := cli.Call(context.Background(), "sleep", json.RawMessage(`{"ms":60000}`), nil)
			errs <- err
		}()
	}
	waitFor(t, func() bool { return srv.queued.Load() == n })
	require.NoError(t, agentEnd.Close()) // the agent "crashes"
	for range n {
		select {
		case err := <-errs:
			require.ErrorIs(t, err, proto.ErrDisconnected)
		case <-time.After(time.Minute):
			t.Fatal("a pending call hangs after the connection ended")
		}
	}
	select {
	case <-cli.Done():
	case <-time.After(time.Minute):
		t.Fatal("Done not closed")
	}
	require.ErrorIs(t, cli.Err(), proto.ErrDisconnected)
	assert.Contains(t, cli.Err().Error(), "the agent closed the stream")
	err = cli.Ping(context.Background())
	require.ErrorIs(t, err, proto.ErrDisconnected, "calls after the end fail at once")
	require.NoError(t, <-served)
	waitFor(t, func() bool { return srv.queued.Load() == 0 })
}

func TestClientCloseFailsPendingCalls(t *testing.T) {
	p := newPair(t)
	errs := make(chan error, 1)
	go func() {
		_, err := p.cli.Call(context.Background(), "sleep", json.RawMessage(`{"ms":60000}`), nil)
		errs <- err
	}()
	// The tool runs, not merely the request: a request whose connection
	// closes before its tool starts is answered without running it (the
	// semaphore's select sees the ended ctx), so its tool is never
	// cancelled. Waiting on inFlight alone lost that race about once in
	// a few thousand runs.
	select {
	case <-p.kit.started:
	case <-time.After(time.Minute):
		t.Fatal("the sleep tool did not start")
	}
	require.NoError(t, p.cli.Close())
	err := <-errs
	require.ErrorIs(t, err, proto.ErrDisconnected)
	assert.Contains(t, err.Error(), "client was closed")
	select {
	case <-p.kit.cancelled:
	case <-time.After(time.Minute):
		t.Fatal("the agent did not cancel the calls of a closed connection")
	}
}

func TestShutdownMethod(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	running := make(chan error, 1)
	go func() {
		_, err := p.cli.Call(ctx, "sleep", json.RawMessage(`{"ms":60000}`), nil)
		running <- err
	}()
	waitFor(t, func() bool { return inFlight(p.srv) == 1 })
	require.NoError(t, p.cli.Shutdown(ctx))
	assert.EqualValues(t, 1, p.kit.closed.Load(), "the toolset (its shared closer) is closed once")
	err := <-running
	require.ErrorIs(t, err, context.Canceled, "in-flight calls are cancelled: %v", err)
	select {
	case <-p.srv.Done():
	case <-time.After(time.Minute):
		t.Fatal("server not done after shutdown")
	}
	select {
	case <-p.cli.Done():
	case <-time.After(time.Minute):
		t.Fatal("the agent did not close the connection after shutdown")
	}
	require.NoError(t, <-p.serveErr)
	// A new connection is refused.
	hostEnd, agentEnd := net.Pipe()
	defer func() { _ = hostEnd.Close() }()
	require.ErrorIs(t, p.srv.Serve(ctx, agentEnd), proto.ErrShuttingDown)
}

func TestShutdownRefusesNewCalls(t *testing.T) {
	p := newPair(t)
	require.NoError(t, p.cli.Ping(ctxT(t))) // the connection is being served
	require.NoError(t, p.srv.stop(ctxT(t))) // stopped, connections still open
	_, err := p.cli.Call(ctxT(t), "echo", json.RawMessage(`{"text":"x"}`), nil)
	require.ErrorIs(t, err, proto.ErrShuttingDown)
	require.ErrorIs(t, err, tools.ErrClosed, "one code, both sentinels")
	require.NoError(t, p.cli.Ping(ctxT(t)), "ping still answers while shutting down")
}

func TestServeCtxEndsConnection(t *testing.T) {
	_, ts := newTestKit(t, 1)
	srv, err := NewServer(ServerOptions{Toolset: ts, Workspace: t.TempDir(), Logger: quiet})
	require.NoError(t, err)
	defer func() { _ = srv.Close() }()
	hostEnd, agentEnd := net.Pipe()
	cli := agentclient.NewClient(hostEnd, agentclient.WithLogger(quiet))
	defer func() { _ = cli.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, agentEnd) }()
	require.NoError(t, cli.Ping(ctxT(t)))
	cancel()
	require.ErrorIs(t, <-served, context.Canceled)
	<-cli.Done()
}

func TestManyConnectionsShareOneToolset(t *testing.T) {
	p := newPair(t) // barrier of 4: two calls on each of two connections
	other := p.connect(t)
	var wg sync.WaitGroup
	for _, c := range []*agentclient.Client{p.cli, p.cli, other, other} {
		wg.Go(func() {
			obs, err := c.Call(ctxT(t), "barrier", nil, nil)
			if assert.NoError(t, err) { // not require: this is not the test's goroutine
				assert.Equal(t, "together", obs.Text())
			}
		})
	}
	wg.Wait()
	require.NoError(t, other.Close())
	require.NoError(t, p.cli.Ping(ctxT(t)), "one connection closing leaves the others")
}

func TestNewServerValidates(t *testing.T) {
	_, ts := newTestKit(t, 1)
	_, err := NewServer(ServerOptions{Workspace: "/w"})
	require.ErrorContains(t, err, "Toolset is required")
	_, err = NewServer(ServerOptions{Toolset: ts, Workspace: "rel"})
	assert.ErrorContains(t, err, "absolute")
}

func TestErrorTable(t *testing.T) {
	for _, row := range codes {
		we := codes.Wire(fmt.Errorf("wrapped: %w", row.Err))
		require.True(t, codes.Matches(we.Code, row.Err), "code %d must match %v", we.Code, row.Err)
	}
	// A watch of an unknown tool is invalid params, as it always was: the
	// tool set's rows rank after the generic ones.
	we := codes.Wire(fmt.Errorf("%w: %w", proto.ErrInvalidParams, tools.ErrUnknownTool))
	assert.Equal(t, proto.CodeInvalidParams, we.Code)
	assert.Equal(t, proto.CodeInternal, codes.Wire(errors.New("other")).Code)
}

func inFlight(s *Server) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for c := range s.conns {
		c.mu.Lock()
		n += len(c.calls)
		c.mu.Unlock()
	}
	return n
}

// waitFor polls the server's own counters: what a test waits for happens
// on the server's goroutines, which signal nothing a test could wait on.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, time.Minute, 2*time.Millisecond)
}

// A streaming call is paced by its window: while the host's StreamFunc
// holds its first chunk, the tool gets no further than StreamWindow bytes
// (its send blocks, as a program's write to a full terminal does) and the
// host holds no more than that; once the host takes output again, every
// byte arrives, in order.
func TestStreamWindowPacesTheTool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPair(t)
		const n, size = 64, 64 << 10 // 4 MiB: four windows
		hold := make(chan struct{})
		var got int
		done := make(chan error, 1)
		go func() {
			first := true
			obs, err := p.cli.Call(context.Background(), "stream", json.RawMessage(fmt.Sprintf(`{"n":%d,"size":%d}`, n, size)), func(b []byte) {
				if first {
					first = false
					<-hold
				}
				got += len(b)
			})
			if err == nil && obs.Text() != "done" {
				err = fmt.Errorf("observation %q", obs.Text())
			}
			done <- err
		}()
		synctest.Wait() // everyone is blocked: the tool on its window
		sent := p.kit.streamed.Load()
		assert.LessOrEqual(t, sent, int64(agentclient.StreamWindow)+size, "the tool ran past its window while the host held its output")
		assert.Less(t, sent, int64(n*size), "the tool was never held back")
		close(hold)
		require.NoError(t, <-done)
		assert.Equal(t, n*size, got, "every byte arrives once the host takes output")
	})
}
