package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
)

// agentShutdownGrace bounds a shutdown: cancelled calls get this long to
// return before the toolset is closed under them.
const agentShutdownGrace = 10 * time.Second

func init() {
	register(&command{
		name:    "agent",
		summary: "run the in-sandbox agent: serve the session's tools over the agent protocol",
		run:     runAgent,
	})
}

const agentHelp = `
Serves the session's tools (terminal, file_editor, grep, glob) to the host
over the sandboxd agent protocol: on stdin/stdout (--stdio), on a unix
socket (--socket), or both. With both, the end of stdin does not stop the
agent: the host can reconnect through the socket (sandboxd agent-proxy)
after a daemon restart.

Logs go to stderr as JSON lines; stdout carries only protocol frames.
SIGTERM or SIGINT, or a shutdown request from the host, ends every tool
process and exits 0.`

type agentConfig struct {
	stdio     bool
	socket    string
	workspace string
	stateDir  string
	toolSpecs string
	logLevel  string
}

func runAgent(ctx context.Context, std stdio, args []string) error {
	var cfg agentConfig
	fs := newFlagSet("agent", std, "[--stdio] [--socket PATH] [flags]", agentHelp)
	fs.BoolVar(&cfg.stdio, "stdio", false, "serve one connection on stdin/stdout")
	fs.StringVar(&cfg.socket, "socket", "", "listen on this unix socket (mode 0600) for any number of connections")
	fs.StringVar(&cfg.workspace, "workspace", "/workspace", "the session's workspace: where tools start and the only place file transfers may touch")
	fs.StringVar(&cfg.stateDir, "state-dir", "/tmp/.sandboxd", "where tools keep files for the model (full output of truncated commands)")
	fs.StringVar(&cfg.toolSpecs, "tools", "", `tool specs as JSON, e.g. '[{"name":"terminal","params":{"soft_timeout_seconds":30}}]', or @FILE; default: all built-in tools`)
	fs.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !cfg.stdio && cfg.socket == "" {
		return usageErrorf("give --stdio, --socket PATH, or both")
	}
	log, err := newLogger(std.err, cfg.logLevel)
	if err != nil {
		return err
	}
	slog.SetDefault(log) // tools that log to the default logger log JSON to stderr too
	specs, err := parseSpecs(cfg.toolSpecs)
	if err != nil {
		return err
	}
	if cfg.workspace, err = filepath.Abs(cfg.workspace); err != nil {
		return err
	}
	if cfg.stateDir, err = filepath.Abs(cfg.stateDir); err != nil {
		return err
	}
	if err := os.MkdirAll(cfg.workspace, 0o755); err != nil {
		return fmt.Errorf("workspace: %w", err)
	}
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return fmt.Errorf("state dir: %w", err)
	}
	return serveAgent(ctx, std, cfg, specs, log)
}

func serveAgent(ctx context.Context, std stdio, cfg agentConfig, specs []tools.Spec, log *slog.Logger) error {
	// Take stdout for the protocol before anything can start a process.
	var stdioConn io.ReadWriteCloser
	if cfg.stdio {
		var err error
		if stdioConn, err = protocolStdio(std); err != nil {
			return err
		}
	}
	var ln net.Listener
	if cfg.socket != "" {
		var err error
		if ln, err = listenUnix(cfg.socket); err != nil {
			if stdioConn != nil {
				stdioConn.Close()
			}
			return err
		}
	}

	ts, err := builtin.Registry().Resolve(tools.Env{Workspace: cfg.workspace, StateDir: cfg.stateDir}, specs)
	if err != nil {
		closeAll(stdioConn, ln)
		return fmt.Errorf("starting the tools: %w", err)
	}
	srv, err := agent.NewServer(agent.ServerOptions{
		Toolset:       ts,
		Workspace:     cfg.workspace,
		Logger:        log,
		ShutdownGrace: agentShutdownGrace,
	})
	if err != nil {
		ts.Close()
		closeAll(stdioConn, ln)
		return err
	}
	log.Info("agent started", "pid", os.Getpid(), "workspace", cfg.workspace, "stdio", cfg.stdio, "socket", cfg.socket, "tools", len(ts.Definitions()))

	var serving sync.WaitGroup
	stdioEnded := make(chan error, 1)
	if stdioConn != nil {
		serving.Go(func() { stdioEnded <- srv.Serve(ctx, stdioConn) })
	}
	if ln != nil {
		serving.Go(func() { acceptLoop(ctx, ln, srv, log) })
	}

	// After a signal (docker stop sends SIGTERM) the agent exits 143, as
	// a process killed by SIGTERM would: the host then tells a stop from
	// outside from the shutdown it asked for (exit 0).
	var exitErr error
	select {
	case <-ctx.Done():
		log.Info("signal received; shutting down")
		exitErr = exitCodeError(128 + 15)
	case <-srv.Done():
		log.Info("shutdown requested by the host")
	case err := <-stdioEnded:
		if ln != nil {
			// The socket keeps the agent alive for a reconnecting host.
			log.Info("stdio connection ended; still serving the socket", "err", err)
			select {
			case <-ctx.Done():
				log.Info("signal received; shutting down")
				exitErr = exitCodeError(128 + 15)
			case <-srv.Done():
				log.Info("shutdown requested by the host")
			}
		} else {
			log.Info("stdio connection ended; shutting down", "err", err)
			if err != nil && !errors.Is(err, context.Canceled) {
				exitErr = fmt.Errorf("stdio connection: %w", err)
			}
		}
	}

	sctx, cancel := context.WithTimeout(context.Background(), agentShutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		log.Error("shutdown", "err", err)
	}
	if ln != nil {
		ln.Close()
	}
	if n := killDescendants(); n > 0 {
		// The executors should have ended their processes; this is the
		// safety net, and a sign of a leak worth a look.
		log.Warn("killed processes left after the toolset closed", "count", n)
	}
	waitOrTimeout(&serving, 2*time.Second, log)
	log.Info("agent stopped")
	return exitErr
}

// acceptLoop serves every connection of the socket until it is closed.
func acceptLoop(ctx context.Context, ln net.Listener, srv *agent.Server, log *slog.Logger) {
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
			if err := srv.Serve(ctx, conn); err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, agent.ErrShuttingDown) {
				log.Warn("socket connection ended with an error", "err", err)
			}
		})
	}
}

func waitOrTimeout(wg *sync.WaitGroup, d time.Duration, log *slog.Logger) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		log.Warn("connections did not end in time; exiting anyway")
	}
}

func closeAll(c io.Closer, ln net.Listener) {
	if c != nil {
		c.Close()
	}
	if ln != nil {
		ln.Close()
	}
}

// parseSpecs reads --tools: a JSON array of specs, or @FILE holding one.
func parseSpecs(s string) ([]tools.Spec, error) {
	if s == "" {
		return builtin.DefaultSpecs(), nil
	}
	src := "--tools"
	if file, ok := strings.CutPrefix(s, "@"); ok {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, usageErrorf("--tools: %v", err)
		}
		s, src = string(b), file
	}
	var specs []tools.Spec
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&specs); err != nil {
		return nil, usageErrorf(`%s: not a JSON array of tool specs like [{"name":"terminal"}]: %v`, src, err)
	}
	for i, sp := range specs {
		if sp.Name == "" {
			return nil, usageErrorf("%s: spec %d has no name; built-in tools: %s", src, i, strings.Join(builtin.Registry().Names(), ", "))
		}
	}
	return specs, nil
}

func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", level)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}
