package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

// Defaults of ServerOptions.
const (
	// DefaultMaxConcurrentCalls bounds the requests that run at once, over
	// all connections. Tool calls mostly wait (on a shell, on the disk);
	// 64 is far above what one agent driving one sandbox issues, and low
	// enough that a runaway client cannot fork-bomb the agent with goroutines
	// doing real work.
	DefaultMaxConcurrentCalls = 64
	// DefaultMaxQueuedRequests bounds the requests accepted but not finished
	// (running or waiting for a slot); beyond it a request fails with ErrBusy
	// at once instead of piling up.
	DefaultMaxQueuedRequests = 1024
	// DefaultTransferIdleTimeout aborts an upload or download whose client
	// stopped sending requests for it, so a vanished host leaks nothing.
	DefaultTransferIdleTimeout = 5 * time.Minute
	// DefaultShutdownGrace is how long the shutdown method waits for
	// cancelled calls to return before it closes the toolset anyway.
	DefaultShutdownGrace = 10 * time.Second
)

// ServerOptions configure a Server. Toolset and Workspace are required.
type ServerOptions struct {
	// Toolset is served to every connection; the Server closes it on
	// Shutdown (which ends the processes its executors started).
	Toolset *tools.Toolset
	// Workspace is the absolute directory that fs/upload and fs/download are
	// confined to, with TransferRoots. Relative transfer paths are taken
	// relative to it.
	Workspace string
	// TransferRoots are more absolute directories that transfers may touch
	// (a session's editable paths): an absolute path under one of them is
	// confined to it as one under Workspace is to Workspace.
	TransferRoots []string
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// MaxConcurrentCalls, MaxQueuedRequests, TransferIdleTimeout and
	// ShutdownGrace default to the constants above when zero.
	MaxConcurrentCalls  int
	MaxQueuedRequests   int
	TransferIdleTimeout time.Duration
	ShutdownGrace       time.Duration
	// MaxPTYs bounds the PTYs open at once (default DefaultMaxPTYs).
	MaxPTYs int
}

// Server serves a Toolset over the framed protocol. One Server may serve
// many connections at once (the stdio stream and unix socket clients); they
// share its Toolset, its concurrency bound and its shutdown.
type Server struct {
	opts ServerOptions
	log  *slog.Logger
	sem  chan struct{}

	queued    atomic.Int64
	connSeq   atomic.Uint64
	transfers atomic.Uint64

	// baseCtx is the parent of every call's context; stop cancels it.
	baseCtx   context.Context
	cancelAll context.CancelFunc

	mu      sync.Mutex
	conns   map[*conn]struct{}
	ptys    int // open or starting, over all connections
	closing bool
	work    sync.WaitGroup // calls that must end before the toolset closes

	// serveDirect is Serve, reached through a field so that the handler
	// of direct/dial (which serves the connection it dials) does not make
	// the handler table refer to itself.
	serveDirect func(context.Context, io.ReadWriteCloser) error

	stopOnce sync.Once
	stopErr  error
	doneOnce sync.Once
	done     chan struct{}
}

// NewServer validates opts and returns a Server ready to Serve.
func NewServer(opts ServerOptions) (*Server, error) {
	if opts.Toolset == nil {
		return nil, errors.New("agent: ServerOptions.Toolset is required")
	}
	if opts.Workspace == "" || !filepath.IsAbs(opts.Workspace) {
		return nil, fmt.Errorf("agent: ServerOptions.Workspace must be an absolute directory, got %q", opts.Workspace)
	}
	opts.Workspace = filepath.Clean(opts.Workspace)
	roots := make([]string, 0, len(opts.TransferRoots))
	for _, r := range opts.TransferRoots {
		if r == "" || !filepath.IsAbs(r) {
			return nil, fmt.Errorf("agent: ServerOptions.TransferRoots: %q is not an absolute directory", r)
		}
		roots = append(roots, filepath.Clean(r))
	}
	opts.TransferRoots = roots
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxConcurrentCalls <= 0 {
		opts.MaxConcurrentCalls = DefaultMaxConcurrentCalls
	}
	if opts.MaxQueuedRequests <= 0 {
		opts.MaxQueuedRequests = DefaultMaxQueuedRequests
	}
	if opts.TransferIdleTimeout <= 0 {
		opts.TransferIdleTimeout = DefaultTransferIdleTimeout
	}
	if opts.ShutdownGrace <= 0 {
		opts.ShutdownGrace = DefaultShutdownGrace
	}
	if opts.MaxPTYs <= 0 {
		opts.MaxPTYs = proto.DefaultMaxPTYs
	}
	s := &Server{
		opts:  opts,
		log:   opts.Logger.With("component", "agent"),
		sem:   make(chan struct{}, opts.MaxConcurrentCalls),
		conns: map[*conn]struct{}{},
		done:  make(chan struct{}),
	}
	s.baseCtx, s.cancelAll = context.WithCancel(context.Background())
	s.serveDirect = s.Serve
	// Before the first call: a command may exhaust the pids limit later.
	if n := reserveThreadsOnce(); n > 0 {
		s.log.Debug("spare OS threads reserved", "threads", n)
	}
	return s, nil
}

// Serve serves one connection until the peer closes it (nil), ctx ends
// (ctx.Err()), the server shuts down (nil), or the stream is corrupt (an
// error). It closes conn and returns only after every goroutine it started
// has ended; the calls of this connection are cancelled when it ends.
func (s *Server) Serve(ctx context.Context, rwc io.ReadWriteCloser) error {
	c := newConn(s, rwc)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		c.close() // refused: the peer sees the stream end
		return proto.ErrShuttingDown
	}
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
	}()
	return c.serve(ctx)
}

// Done is closed once the server has shut down: by Shutdown/Close, or after
// a client's shutdown request has been answered.
func (s *Server) Done() <-chan struct{} { return s.done }

// Shutdown stops taking requests, cancels in-flight calls, waits for them
// until ctx ends, closes the Toolset (ending the executors' process groups)
// and closes every connection. It is idempotent; the Toolset's Close error
// is returned.
func (s *Server) Shutdown(ctx context.Context) error {
	err := s.stop(ctx)
	s.closeConns()
	return err
}

// Close is Shutdown with the server's ShutdownGrace.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.ShutdownGrace)
	defer cancel()
	return s.Shutdown(ctx)
}

// stop is the first half of a shutdown: everything but closing connections,
// so the shutdown method can still answer on its own connection.
func (s *Server) stop(ctx context.Context) error {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closing = true
		s.mu.Unlock()
		s.cancelAll()
		ended := make(chan struct{})
		go func() { s.work.Wait(); close(ended) }()
		select {
		case <-ended:
		case <-ctx.Done():
			s.log.Warn("calls still running at shutdown; closing the toolset under them", "err", ctx.Err())
		}
		s.endAllPTYs()
		s.stopErr = s.opts.Toolset.Close()
		if s.stopErr != nil {
			s.log.Error("closing the toolset", "err", s.stopErr)
		}
		s.log.Info("toolset closed")
	})
	return s.stopErr
}

func (s *Server) closeConns() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	s.doneOnce.Do(func() { close(s.done) })
}

// beginWork registers a call that shutdown must wait for; false once the
// server is closing.
func (s *Server) beginWork() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.work.Add(1)
	return true
}
