package client_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/gorilla/websocket"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Keep-alive connections of http.DefaultTransport, matched anywhere
		// in the stack (not internal/poll.runtime_pollWait, which would
		// hide a leaked WebSocket read loop).
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return c
}

func dial(t *testing.T, url, token string, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx(t), url, token, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestCreateCallCloseSession(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts.URL, ts.Token, client.Options{})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{Env: map[string]string{"A": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if s.ID == "" || s.Token == "" || len(s.Tools) == 0 {
		t.Fatalf("session %+v", s)
	}
	var streamed bytes.Buffer
	obs, err := s.Call(ctx(t), "stream", map[string]int{"chunks": 20, "size": 10}, func(b []byte) { streamed.Write(b) })
	if err != nil {
		t.Fatal(err)
	}
	if obs.Text() != "done" || streamed.Len() != 200 {
		t.Fatalf("obs %q, streamed %d bytes", obs.Text(), streamed.Len())
	}
	obs, err = s.Call(ctx(t), "fail", nil, nil)
	if err != nil || !obs.IsError {
		t.Fatalf("fail: %+v %v", obs, err)
	}
	_, err = s.Call(ctx(t), "no-such-tool", nil, nil)
	var rpcErr *client.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != wsproto.CodeInvalidParams {
		t.Fatalf("unknown tool: %v", err)
	}
	openai, err := s.ToolsList(ctx(t), "openai")
	if err != nil || len(openai) != len(s.Tools) || !strings.Contains(string(openai[0]), `"function"`) {
		t.Fatalf("openai tools: %s %v", openai, err)
	}
	list, err := c.ListSessions(ctx(t))
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := s.Close(ctx(t)); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Done():
	case <-time.After(time.Minute):
		t.Fatal("session not done after Close")
	}
	if ts.Backend.Live() != 0 {
		t.Fatal("sandbox still live")
	}
}

func TestUploadDownload(t *testing.T) {
	ts := servertest.Start(t, nil)
	const chunk = 64 << 10
	c := dial(t, ts.URL, ts.Token, client.Options{ChunkSize: chunk})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{0, 100, chunk, 2*chunk + 7} {
		data := bytes.Repeat([]byte{byte(size)}, size)
		if err := s.Upload(ctx(t), "/workspace/x", bytes.NewReader(data)); err != nil {
			t.Fatalf("upload %d: %v", size, err)
		}
		var out bytes.Buffer
		if err := s.Download(ctx(t), "/workspace/x", &out); err != nil {
			t.Fatalf("download %d: %v", size, err)
		}
		if !bytes.Equal(out.Bytes(), data) {
			t.Fatalf("size %d: downloaded %d bytes", size, out.Len())
		}
	}
}

// Another client attaches with the session token and sees the output of
// calls it did not make (what `sandboxd shell` does).
func TestAttachWithSessionToken(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts.URL, ts.Token, client.Options{})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	viewer := dial(t, ts.URL, s.Token, client.Options{})
	vs, err := viewer.Attach(ctx(t), s.ID, s.Token, 0)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen strings.Builder
	// Each piece of output wakes the wait below: no polling.
	arrived := make(chan struct{}, 1)
	vs.OnOutput = func(o wsproto.StreamOutput) {
		mu.Lock()
		seen.WriteString(o.Data)
		mu.Unlock()
		select {
		case arrived <- struct{}{}:
		default:
		}
	}
	if _, err := s.Call(ctx(t), "echo", map[string]string{"text": "shared"}, func([]byte) {}); err != nil {
		t.Fatal(err)
	}
	for {
		mu.Lock()
		got := seen.String()
		mu.Unlock()
		if got == "shared" {
			break
		}
		select {
		case <-arrived:
		case <-ctx(t).Done():
			t.Fatalf("viewer saw %q", got)
		}
	}
	if _, err := viewer.CreateSession(ctx(t), client.CreateOptions{}); err == nil {
		t.Fatal("a session token created a session")
	}
}

// proxy forwards TCP connections to target and can cut them all.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
	wg     sync.WaitGroup
}

func newProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			p.wg.Add(2)
			// A copy ends when either side is cut; its error is that cut.
			go func() { defer p.wg.Done(); _, _ = io.Copy(out, in); out.Close() }()
			go func() { defer p.wg.Done(); _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

func (p *proxy) url() string { return "ws://" + p.ln.Addr().String() + "/v1/ws" }

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// The connection drops in the middle of a streaming call: the client
// reconnects, re-attaches from the last chunk it saw and retries the call
// with the same id. The call runs once, and the stream callback sees every
// byte exactly once, in order.
func TestReconnectResumes(t *testing.T) {
	ts := servertest.Start(t, nil)
	p := newProxy(t, ts.HTTP.Listener.Addr().String())
	c := dial(t, p.url(), ts.Token, client.Options{Reconnect: true, ReconnectTimeout: 10 * time.Second})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const chunks, size = 200, 50
	var mu sync.Mutex
	var got []byte
	cutOnce := sync.OnceFunc(func() { go p.cut() })
	obs, err := s.Call(ctx(t), "stream", map[string]int{"chunks": chunks, "size": size, "pause_us": 2000}, func(b []byte) {
		mu.Lock()
		got = append(got, b...)
		n := len(got)
		mu.Unlock()
		if n >= chunks*size/3 {
			cutOnce()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if obs.Text() != "done" {
		t.Fatalf("result %q", obs.Text())
	}
	if len(got) != chunks*size {
		t.Fatalf("streamed %d bytes, want %d", len(got), chunks*size)
	}
	// The count tool proves calls after the resume work and ran once each.
	for i := 1; i <= 3; i++ {
		obs, err := s.Call(ctx(t), "count", nil, nil)
		if err != nil || obs.Text() != strings.Repeat("", 0)+string(rune('0'+i)) {
			t.Fatalf("count %d: %v %v", i, obs, err)
		}
	}
}

func TestConnectionLostWithoutReconnect(t *testing.T) {
	ts := servertest.Start(t, nil)
	p := newProxy(t, ts.HTTP.Listener.Addr().String())
	c := dial(t, p.url(), ts.Token, client.Options{})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The connection is cut once the call runs in the sandbox, not after
	// a guessed time.
	called := make(chan error, 1)
	go func() {
		_, err := s.Call(ctx(t), "sleep", map[string]int{"ms": 60000}, nil)
		called <- err
	}()
	fake := ts.Backend.Sandbox(s.ID)
	waitUntil(t, "the call to run", func() bool { return fake.Sleeping() == 1 })
	p.cut()
	err = <-called
	if err == nil || !strings.Contains(err.Error(), client.ErrConnectionLost.Error()) {
		t.Fatalf("call on a lost connection: %v", err)
	}
	<-c.Done()
	if !errors.Is(c.Err(), client.ErrConnectionLost) {
		t.Fatalf("client err %v", c.Err())
	}
}

func TestBadToken(t *testing.T) {
	ts := servertest.Start(t, nil)
	_, err := client.Dial(ctx(t), ts.URL, "not-the-token-not-the-token-not-the-token", client.Options{})
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("dial with a bad token: %v", err)
	}
}

// Close does not wait for a reconnect that cannot succeed.
func TestCloseWhileReconnecting(t *testing.T) {
	ts := servertest.Start(t, nil)
	p := newProxy(t, ts.HTTP.Listener.Addr().String())
	// Each dial is counted; the second is the first retry.
	var dials atomic.Int32
	retrying := make(chan struct{})
	d := *websocket.DefaultDialer
	d.NetDialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dials.Add(1) == 2 {
			close(retrying)
		}
		var nd net.Dialer
		return nd.DialContext(ctx, network, addr)
	}
	c, err := client.Dial(ctx(t), p.url(), ts.Token, client.Options{Reconnect: true, ReconnectTimeout: time.Minute, Dialer: &d})
	if err != nil {
		t.Fatal(err)
	}
	p.ln.Close() // no more connections
	p.cut()
	select { // the client is retrying now
	case <-retrying:
	case <-ctx(t).Done():
		t.Fatal("the client did not try to reconnect")
	}
	start := time.Now()
	c.Close()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Close took %v", d)
	}
	if !errors.Is(c.Err(), client.ErrClosed) {
		t.Fatalf("err %v", c.Err())
	}
}

// A refused connection says what to check.
func TestDialErrorsSayWhatToCheck(t *testing.T) {
	ts := servertest.Start(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct{ url, token, want string }{
		{ts.URL, "wrong-wrong-wrong-wrong-wrong-wrong-wrong", "HTTP 401 (the token was refused: check SANDBOXD_TOKEN"},
		{strings.TrimSuffix(ts.URL, wsproto.Path) + "/nope", ts.Token, "HTTP 404 (no WebSocket API at this path"},
		{strings.TrimPrefix(ts.URL, "ws://"), ts.Token, "the server URL looks like ws://HOST:PORT/v1/ws"},
		{"ws://127.0.0.1:1" + wsproto.Path, ts.Token, "is `sandboxd serve` running there?"},
	} {
		_, err := client.Dial(ctx, c.url, c.token, client.Options{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.url, err, c.want)
		}
	}
}

// waitUntil polls cond (the server works on its own goroutines) for up to
// 10 s.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A create given up through its context returns at once, and the session
// the server still makes is closed as soon as it is answered: it does not
// hold a slot until its idle timeout.
func TestCreateSessionCancelled(t *testing.T) {
	ts := servertest.Start(t, nil)
	release := ts.Backend.HoldCreates()
	defer release()
	c := dial(t, ts.URL, ts.Token, client.Options{})
	cctx, cancel := context.WithCancel(ctx(t))
	done := make(chan error, 1)
	go func() {
		_, err := c.CreateSession(cctx, client.CreateOptions{})
		done <- err
	}()
	waitUntil(t, "the create reaches the backend", func() bool { return ts.Backend.Held() == 1 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled create returned %v", err)
	}
	release()
	waitUntil(t, "the abandoned session is closed", func() bool { return ts.Backend.Created() == 1 && ts.Backend.Live() == 0 })
	// The client goes on working.
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ts.Backend.Live() != 1 {
		t.Fatalf("%d sessions live, want 1", ts.Backend.Live())
	}
	_ = s.Close(ctx(t))
}
