package servertest

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/auth"
)

// Server is a running test server over a fake backend.
type Server struct {
	*server.Server
	HTTP    *httptest.Server
	Backend *FakeBackend
	Token   string
	// URL is the WebSocket URL (ws://127.0.0.1:port/v1/ws).
	URL string
	// Base is the HTTP base URL.
	Base string
}

// Start starts a server on a loopback port; tweak (may be nil) adjusts its
// options. It is shut down when the test ends.
func Start(t testing.TB, tweak func(*server.Options)) *Server {
	t.Helper()
	m := NewFakeBackend()
	token := auth.NewToken()
	opts := server.Options{Backend: m, OperatorToken: token, StateDir: t.TempDir(), MCPImage: "fake:latest"}
	if tweak != nil {
		tweak(&opts)
	}
	srv, err := server.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewUnstartedServer(srv.Handler())
	hs.Start()
	ts := &Server{Server: srv, HTTP: hs, Backend: m, Token: token, Base: hs.URL,
		URL: "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/ws"}
	t.Cleanup(func() { ts.Stop(t) })
	return ts
}

// Stop shuts the server down (idempotent enough for Cleanup after a test
// stopped it itself).
func (s *Server) Stop(t testing.TB) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Errorf("shutdown: %v", err)
	}
	s.HTTP.CloseClientConnections()
	s.HTTP.Close()
}
