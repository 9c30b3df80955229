// Package server is `sandboxd serve`: the HTTP server that carries the
// WebSocket API (/v1/ws, package wsapi), MCP (/mcp, package mcpapi), /healthz
// and /metrics over one dispatch core (package core), with the request checks
// of package auth and graceful shutdown.
package server

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/mcpapi"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/server/internal/wsapi"
	"github.com/sandboxd/sandboxd/wsproto"
)

// Server is sandboxd's API server.
type Server struct {
	opts     Options
	log      *slog.Logger
	core     *core.Core
	ws       *wsapi.Handler
	mcp      *mcpapi.Handler
	http     *http.Server
	draining atomic.Bool
}

// New builds a server over a session manager. It adopts the sessions the
// manager kept from a previous run whose tokens are on record.
func New(opts Options) (*Server, error) {
	if err := opts.validate(); err != nil {
		return nil, err
	}
	log := opts.Logger.With("component", "server")
	var tokens *core.TokenStore
	if opts.StateDir != "" {
		var err error
		if tokens, err = core.NewTokenStore(filepath.Join(opts.StateDir, "sessions")); err != nil {
			return nil, err
		}
	}
	m := metrics.New(opts.Backend.Stats)
	c, err := core.New(core.Options{
		Backend:           opts.Backend,
		OperatorToken:     opts.OperatorToken,
		Metrics:           m,
		Logger:            opts.Logger,
		Tokens:            tokens,
		AllowedImages:     opts.AllowedImages,
		MaxSessions:       opts.MaxSessions,
		Profiles:          opts.Profiles,
		SnapshotRetention: opts.SnapshotRetention,
		MCPDefault:        sandbox.SessionOptions{Image: opts.MCPImage},
		RingBytes:         opts.RingBytes,
		DrainTransferIdle: opts.DrainTransferIdle,
		// A create whose client left: closed after this grace.
		AbandonedCreateGrace: opts.AbandonedCreateGrace,
		// A download chunk, base64-encoded in a message, must fit in one.
		MaxDownloadChunk: int(opts.MaxMessageBytes/4*3) - 4096,
	})
	if err != nil {
		return nil, err
	}
	s := &Server{opts: opts, log: log, core: c}
	s.ws = wsapi.New(c, wsapi.Options{
		Requests:        opts.requestPolicy(),
		MaxMessageBytes: opts.MaxMessageBytes,
		QueueMessages:   opts.WSQueueMessages,
		QueueBytes:      opts.WSQueueBytes,
		PingInterval:    opts.WSPingInterval,
		WriteTimeout:    opts.WSWriteTimeout,
		OutputBytes:     opts.WSOutputBytes,
		ReplyWait:       opts.WSReplyWait,
	})
	s.mcp = mcpapi.New(c, mcpapi.Options{
		Requests:       opts.requestPolicy(),
		SessionTimeout: opts.MCPSessionTimeout,
		Tools:          opts.MCPTools,
		ToolsVersion:   opts.MCPToolsVersion,
		TransferTools:  opts.MCPTransferTools,
		SnapshotTools:  opts.MCPSnapshotTools,
		MaxBodyBytes:   opts.MaxMessageBytes,
		Version:        opts.Version,
	})
	s.http = &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		// No ReadTimeout or WriteTimeout: WebSockets and MCP's SSE streams
		// are long-lived; they set per-write deadlines and bound bodies.
		// Bodies get their own read deadline (bodyDeadline).
		IdleTimeout:    idleTimeout,
		MaxHeaderBytes: maxHeaderBytes,
		ErrorLog:       slog.NewLogLogger(opts.Logger.Handler(), slog.LevelWarn),
		TLSConfig:      &tls.Config{MinVersion: tls.VersionTLS12},
	}
	return s, nil
}

// Metrics is the server's Prometheus registry, as /metrics serves it.
func (s *Server) Metrics() prometheus.Gatherer { return s.core.Metrics().Registry }

// LiveSessions is how many sessions the server holds (WebSocket and MCP).
func (s *Server) LiveSessions() int { return len(s.core.List(s.core.Operator())) }

// Handler is the server's whole HTTP handler (tests serve it with httptest).
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(wsproto.Path, s.ws)
	mux.Handle(mcpapi.Path, s.operatorOnly(s.mcp))
	mux.Handle(mcpapi.Path+"/", s.operatorOnly(s.mcp)) // /mcp/NAME: a session profile
	mux.Handle("/metrics", s.operatorOnly(s.core.Metrics().Handler()))
	guarded := s.guard(mux)
	top := http.NewServeMux()
	// /healthz answers without token, Host or Origin checks: it says only
	// whether the server takes work, for probes that know nothing else.
	top.HandleFunc("GET /healthz", s.healthz)
	top.Handle("/", guarded)
	return s.bodyDeadline(top)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	status := "ok"
	if s.draining.Load() {
		status = "draining"
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = json.NewEncoder(w).Encode(map[string]string{"status": status})
}

// Listen opens the listening socket (a unix socket gets mode 0600).
func (s *Server) Listen() (net.Listener, error) {
	if path, ok := strings.CutPrefix(s.opts.Listen, "unix:"); ok {
		// A stale socket of a previous run goes; anything else at the
		// path (a mistyped --listen) stays and the listen fails.
		if st, err := os.Lstat(path); err == nil && st.Mode()&os.ModeSocket != 0 {
			_ = os.Remove(path)
		}
		ln, err := net.Listen("unix", path)
		if err != nil {
			return nil, err
		}
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, err
		}
		return ln, nil
	}
	return net.Listen("tcp", s.opts.Listen)
}

// Serve serves on ln until Shutdown; it returns nil after a Shutdown.
func (s *Server) Serve(ln net.Listener) error {
	if s.opts.remote() && s.opts.TLSCert == "" {
		s.log.Warn("serving plaintext on a non-loopback address (--insecure-allow-remote): put a TLS proxy in front", "addr", ln.Addr().String())
	}
	var err error
	if s.opts.TLSCert != "" {
		err = s.http.ServeTLS(ln, s.opts.TLSCert, s.opts.TLSKey)
	} else {
		err = s.http.Serve(ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops the server gracefully within ctx:
//  1. refuse new calls, sessions and connections (/healthz says draining);
//  2. let calls in flight finish, for up to DrainTimeout;
//  3. cancel the calls still running and close the listener;
//  4. close WebSockets with 1001 and end MCP sessions (closing their sandboxes);
//  5. shut the session manager down, keeping sessions if KeepSessions.
func (s *Server) Shutdown(ctx context.Context) error {
	s.draining.Store(true)
	s.log.Info("shutting down", "keep_sessions", s.opts.KeepSessions)

	// The listener stays open while calls drain, so probes read 503
	// "draining" (not a refused connection) and new WebSockets, MCP
	// sessions, calls and creates are refused with a clear error.
	drainCtx, cancel := context.WithTimeout(ctx, s.opts.DrainTimeout)
	if deadline, ok := ctx.Deadline(); ok {
		// Leave time for the steps after the drain.
		drainCtx, cancel = context.WithDeadline(drainCtx, deadline.Add(-shutdownCloseGraceMargin))
	}
	if err := s.core.Drain(drainCtx); err != nil {
		s.log.Warn("calls still running after the drain; cancelling them", "err", err)
	}
	cancel()
	s.core.CancelCalls()
	httpDone := make(chan error, 1)
	go func() { httpDone <- s.http.Shutdown(ctx) }()

	var errs []error
	if err := s.ws.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("closing WebSockets: %w", err))
	}
	if err := s.mcp.Shutdown(ctx); err != nil {
		errs = append(errs, fmt.Errorf("closing MCP sessions: %w", err))
	}
	if err := <-httpDone; err != nil {
		errs = append(errs, fmt.Errorf("http shutdown: %w", err))
	}
	if err := s.core.Shutdown(ctx, s.opts.KeepSessions); err != nil {
		errs = append(errs, fmt.Errorf("session manager shutdown: %w", err))
	}
	err := errors.Join(errs...)
	s.log.Info("shut down", "err", err)
	return err
}

// Run listens, serves until ctx ends, then shuts down within timeout.
// ready (may be nil) is called with the bound address once listening.
func (s *Server) Run(ctx context.Context, timeout time.Duration, ready func(addr net.Addr)) error {
	ln, err := s.Listen()
	if err != nil {
		return err
	}
	if ready != nil {
		ready(ln.Addr())
	}
	serveErr := make(chan error, 1)
	go func() { serveErr <- s.Serve(ln) }()
	select {
	case err := <-serveErr:
		// The listener failed on its own; still release sessions.
		sctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return errors.Join(err, s.Shutdown(sctx))
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	err = s.Shutdown(sctx)
	return errors.Join(err, <-serveErr)
}
