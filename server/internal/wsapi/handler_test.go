package wsapi

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/wsproto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// noSessions is a core.Backend without sessions.
type noSessions struct{}

func (noSessions) Create(context.Context, sandbox.SessionOptions, sandbox.CreateOptions) (core.Sandbox, error) {
	return nil, context.Canceled
}
func (noSessions) Get(string) (core.Sandbox, bool)      { return nil, false }
func (noSessions) List() []core.Sandbox                 { return nil }
func (noSessions) Stats() metrics.Stats                 { return metrics.Stats{} }
func (noSessions) Shutdown(context.Context, bool) error { return nil }

// newTestCore is a core without sessions and its operator token; it shuts
// down when the test ends.
func newTestCore(t *testing.T) (*core.Core, string) {
	t.Helper()
	token := auth.NewToken()
	c, err := core.New(core.Options{Backend: noSessions{}, OperatorToken: token})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Shutdown(context.Background(), false) })
	return c, token
}

// A connection whose upgrade overlaps the start of Shutdown is closed with
// 1001 too; Shutdown does not wait for it until its deadline.
func TestShutdownDuringUpgrade(t *testing.T) {
	c, token := newTestCore(t)
	h := New(c, Options{})
	hs := httptest.NewServer(h)
	defer hs.Close()

	shutdown := make(chan error, 1)
	snapshot := make(chan struct{})
	testHookShutdown = func() { close(snapshot) }
	testHookUpgraded = func() {
		// Shutdown takes its snapshot of the connections now, before
		// this one is registered.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			shutdown <- h.Shutdown(ctx)
		}()
		<-snapshot
	}
	defer func() { testHookUpgraded, testHookShutdown = nil, nil }()

	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _, err = ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway {
		t.Fatalf("connection upgraded during shutdown: %v, want close 1001", err)
	}
	ws.Close()
	// Had Shutdown waited for the connection until its deadline, it would
	// say so (context.DeadlineExceeded).
	if err := <-shutdown; err != nil {
		t.Fatalf("shutdown still waits for the connection: %v", err)
	}
}

// The handler checks Host and Origin itself: mounted without the server's
// middleware it still refuses DNS rebinding and other origins.
func TestHandlerChecksHostAndOrigin(t *testing.T) {
	c, token := newTestCore(t)
	for _, tc := range []struct {
		name   string
		policy auth.RequestPolicy
		header http.Header
		want   int
	}{
		{"plain", auth.RequestPolicy{}, http.Header{}, http.StatusSwitchingProtocols},
		{"rebound host", auth.RequestPolicy{}, http.Header{"Host": {"evil.example:7070"}}, http.StatusForbidden},
		{"foreign origin", auth.RequestPolicy{}, http.Header{"Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"null origin", auth.RequestPolicy{}, http.Header{"Origin": {"null"}}, http.StatusForbidden},
		{"same-host origin", auth.RequestPolicy{}, http.Header{"Origin": {"http://127.0.0.1"}}, http.StatusForbidden},
		{"allowed origin", auth.RequestPolicy{Origins: auth.OriginPolicy{Allowed: []string{"https://app.example"}}},
			http.Header{"Origin": {"https://app.example"}}, http.StatusSwitchingProtocols},
		{"allowed host", auth.RequestPolicy{Hosts: auth.HostPolicy{Allowed: []string{"proxy.example"}}},
			http.Header{"Host": {"proxy.example"}}, http.StatusSwitchingProtocols},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := New(c, Options{Requests: tc.policy})
			hs := httptest.NewServer(h)
			defer hs.Close()
			defer h.Shutdown(context.Background())
			hdr := tc.header.Clone()
			hdr.Set("Authorization", "Bearer "+token)
			ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), hdr)
			if err == nil {
				ws.Close()
			}
			if resp == nil || resp.StatusCode != tc.want {
				t.Fatalf("status %v, want %d (%v)", resp, tc.want, err)
			}
		})
	}
}

// A Shutdown that runs out of time names each connection it still waits
// for, what that connection is doing and the requests still running, so a
// shutdown that cannot finish says why.
func TestShutdownNamesWhatItWaitsFor(t *testing.T) {
	c, token := newTestCore(t)
	block, entered := make(chan struct{}), make(chan struct{})
	methods["test.block"] = func(*conn, *wsproto.Request) (any, error) { close(entered); <-block; return "unblocked", nil }
	defer delete(methods, "test.block")
	h := New(c, Options{})
	hs := httptest.NewServer(h)
	defer hs.Close()

	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":7,"method":"test.block"}`)); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // out of time at once: the report, not the wait, is tested
	err = h.Shutdown(ctx)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Shutdown: %v, want context.Canceled", err)
	}
	for _, want := range []string{"1 connections still open", "conn ", "requests running: test.block (id 7)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Shutdown's error %q does not say %q", err, want)
		}
	}
	close(block)
	if err := h.Shutdown(context.Background()); err != nil {
		t.Fatalf("Shutdown once the request ended: %v", err)
	}
}
