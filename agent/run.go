package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

// DefaultDrainTimeout bounds how long Run waits, after the shutdown, for its
// connections' goroutines to return before it returns anyway.
const DefaultDrainTimeout = 2 * time.Second

// ErrStopped is what Run returns when its ctx ended (the agent's process was
// signalled) rather than the host asking for a shutdown. The process then
// exits 143, as one killed by SIGTERM would: the host tells a `docker stop`
// from the shutdown it asked for itself (exit 0).
var ErrStopped = errors.New("agent: stopped by its context (a signal)")

// RunOptions configure Run, the agent process's main loop. Workspace,
// Registry and at least one of Stdio and Socket are required.
type RunOptions struct {
	// Stdio serves one connection on Stdin/Stdout. When they are the
	// process's own os.Stdin and os.Stdout, fd 1 is pointed at stderr and
	// fd 0 at /dev/null, so that a stray write or read (a library, a child
	// process) cannot corrupt the protocol stream.
	Stdio  bool
	Stdin  io.Reader
	Stdout io.Writer
	// Socket, when set, is a unix socket (mode 0600) served for any number
	// of connections; with it, the end of stdio does not end Run, so a host
	// can reconnect (sandboxd agent-proxy) after a daemon restart. A live
	// socket at the path (another agent) is an error; a stale one is
	// replaced.
	Socket string
	// Workspace is where tools start and the only place file transfers may
	// touch besides TransferRoots; StateDir is where tools keep files for
	// the model. Both are made absolute and created if missing.
	Workspace     string
	StateDir      string
	TransferRoots []string
	// Dir is the session's working directory, where the terminal starts
	// when its params name none (tools.Env.Dir), made absolute: "." is
	// the process's own, as the container was started. Empty: Workspace.
	Dir string
	// Registry builds the toolset from Specs, once the protocol owns
	// stdout (a tool may start processes).
	Registry *tools.Registry
	Specs    []tools.Spec
	// Entrypoint is the image's program to run in the background for the
	// session's life (entrypoint: image; supervisor). nil: the one a
	// runtime put in the environment (proto.EnvEntrypoint), if any. Its
	// output goes to EntrypointLogName in StateDir.
	Entrypoint *proto.Entrypoint
	// Logger receives structured logs; nil means slog.Default().
	Logger *slog.Logger
	// ShutdownGrace (default DefaultShutdownGrace) and DrainTimeout
	// (default DefaultDrainTimeout) bound a shutdown.
	ShutdownGrace time.Duration
	DrainTimeout  time.Duration
}

func (o *RunOptions) validate() error {
	if !o.Stdio && o.Socket == "" {
		return errors.New("agent: RunOptions needs Stdio, a Socket, or both")
	}
	if o.Stdio && (o.Stdin == nil || o.Stdout == nil) {
		return errors.New("agent: RunOptions.Stdio needs Stdin and Stdout")
	}
	if o.Registry == nil {
		return errors.New("agent: RunOptions.Registry is required")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.ShutdownGrace <= 0 {
		o.ShutdownGrace = DefaultShutdownGrace
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = DefaultDrainTimeout
	}
	var err error
	if o.Workspace, err = filepath.Abs(o.Workspace); err != nil {
		return err
	}
	if o.StateDir, err = filepath.Abs(o.StateDir); err != nil {
		return err
	}
	if o.Dir != "" {
		if o.Dir, err = filepath.Abs(o.Dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(o.Workspace, 0o755); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := os.MkdirAll(o.StateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	return nil
}

// Run serves the toolset until the host asks for a shutdown (nil), ctx ends
// (ErrStopped), or, without a socket, the stdio connection ends (nil at EOF,
// its error otherwise). Either way it shuts down cleanly: calls are
// cancelled, the toolset is closed, and any process left descended from
// this one is killed.
func Run(ctx context.Context, opts RunOptions) error {
	if err := opts.validate(); err != nil {
		return err
	}
	log := opts.Logger
	// Take stdout for the protocol before anything can start a process.
	var stdioConn io.ReadWriteCloser
	if opts.Stdio {
		var err error
		if stdioConn, err = protocolStdio(opts.Stdin, opts.Stdout); err != nil {
			return err
		}
	}
	var ln net.Listener
	if opts.Socket != "" {
		var err error
		if ln, err = listenUnix(opts.Socket); err != nil {
			closeAll(stdioConn, nil)
			return err
		}
	}

	// The image's entrypoint first: it runs while the tools start, so a
	// service it starts has that head start on the first call.
	sup := opts.startEntrypoint()
	ts, err := opts.Registry.Resolve(tools.Env{Workspace: opts.Workspace, StateDir: opts.StateDir, Dir: opts.Dir}, opts.Specs)
	if err != nil {
		sup.Stop()
		closeAll(stdioConn, ln)
		return fmt.Errorf("starting the tools: %w", err)
	}
	srv, err := NewServer(ServerOptions{
		Toolset:       ts,
		Workspace:     opts.Workspace,
		TransferRoots: opts.TransferRoots,
		Logger:        log,
		ShutdownGrace: opts.ShutdownGrace,
	})
	if err != nil {
		_ = ts.Close() // nothing ran on it; the error to report is NewServer's
		sup.Stop()
		closeAll(stdioConn, ln)
		return err
	}
	log.Info("agent started", "pid", os.Getpid(), "workspace", opts.Workspace, "dir", opts.Dir, "transfer_roots", opts.TransferRoots, "stdio", opts.Stdio, "socket", opts.Socket, "tools", len(ts.Definitions()))

	var serving sync.WaitGroup
	stdioEnded := make(chan error, 1)
	if stdioConn != nil {
		serving.Go(func() { stdioEnded <- srv.Serve(ctx, stdioConn) })
	}
	if ln != nil {
		serving.Go(func() { acceptLoop(ctx, ln, srv, log) })
	}

	exitErr := waitForEnd(ctx, srv, stdioEnded, ln != nil, log)

	sctx, cancel := context.WithTimeout(context.Background(), opts.ShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("shutdown", "err", err)
	}
	closeAll(nil, ln)
	sup.Stop()
	if n := killDescendants(); n > 0 {
		// The executors should have ended their processes; this is the
		// safety net, and a sign of a leak worth a look.
		log.Warn("killed processes left after the toolset closed", "count", n)
	}
	waitOrTimeout(&serving, opts.DrainTimeout, log)
	log.Info("agent stopped")
	return exitErr
}

// startEntrypoint starts the supervision of the image's entrypoint, if the
// options or the environment name one (nil otherwise; Stop of nil is a
// no-op).
func (o *RunOptions) startEntrypoint() *supervisor {
	ep := o.Entrypoint
	if ep == nil {
		v, ok := os.LookupEnv(proto.EnvEntrypoint)
		if !ok {
			return nil
		}
		parsed, err := proto.ParseEntrypoint(v)
		if err != nil {
			o.Logger.Error("entrypoint: image: what the runtime passed is not an entrypoint; nothing started", "err", err)
			return nil
		}
		ep = &parsed
	}
	return startEntrypoint(entrypointOptions{
		Entrypoint: *ep,
		Env:        entrypointEnv(os.Environ()),
		Log:        filepath.Join(o.StateDir, EntrypointLogName),
		Logger:     o.Logger,
	})
}

// waitForEnd blocks until Run must shut down and returns what Run returns.
func waitForEnd(ctx context.Context, srv *Server, stdioEnded <-chan error, socket bool, log *slog.Logger) error {
	select {
	case <-ctx.Done():
		log.Info("signal received; shutting down")
		return ErrStopped
	case <-srv.Done():
		log.Info("shutdown requested by the host")
		return nil
	case err := <-stdioEnded:
		if !socket {
			log.Info("stdio connection ended; shutting down", "err", err)
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("stdio connection: %w", err)
			}
			return nil
		}
		// The socket keeps the agent alive for a reconnecting host.
		log.Info("stdio connection ended; still serving the socket", "err", err)
		select {
		case <-ctx.Done():
			log.Info("signal received; shutting down")
			return ErrStopped
		case <-srv.Done():
			log.Info("shutdown requested by the host")
			return nil
		}
	}
}

// acceptLoop serves every connection of the socket until it is closed.
func acceptLoop(ctx context.Context, ln net.Listener, srv *Server, log *slog.Logger) {
	var conns sync.WaitGroup
	defer conns.Wait()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				log.Error("socket accept", "err", err)
			}
			return
		}
		conns.Go(func() {
			if err := srv.Serve(ctx, conn); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, proto.ErrShuttingDown) {
				log.Warn("socket connection ended with an error", "err", err)
			}
		})
	}
}

func waitOrTimeout(wg *sync.WaitGroup, d time.Duration, log *slog.Logger) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn("connections did not end in time; exiting anyway")
	}
}

// closeAll closes what Run opened when it gives up or ends. Their Close
// errors tell nothing the caller can act on: the stream or the socket is
// being dropped either way.
func closeAll(c io.Closer, ln net.Listener) {
	if c != nil {
		_ = c.Close()
	}
	if ln != nil {
		_ = ln.Close()
	}
}
