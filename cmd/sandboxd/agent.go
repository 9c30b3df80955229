package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
)

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
A shutdown request from the host ends every tool process and exits 0;
SIGTERM or SIGINT do the same and exit 143.

As a container's PID 1 it is the container's init: it runs the agent as
its only child, forwards signals to it, reaps orphaned processes and
exits with the agent's status. Both processes are non-dumpable, so tools
(the same uid) cannot open their stdio through /proc or ptrace them.`

type agentConfig struct {
	stdio     bool
	socket    string
	workspace string
	dir       string
	roots     repeatFlag
	stateDir  string
	toolSpecs string
	logLevel  string
}

func runAgent(ctx context.Context, std stdio, args []string) error {
	// First thing: the stream this process holds must not be reachable
	// through /proc by the tools it serves (decision 0021).
	if err := agent.Undumpable(); err != nil {
		return err
	}
	var cfg agentConfig
	fs := newFlagSet("agent", std, "[--stdio] [--socket PATH] [flags]", agentHelp)
	fs.BoolVar(&cfg.stdio, "stdio", false, "serve one connection on stdin/stdout")
	fs.StringVar(&cfg.socket, "socket", "", "listen on this unix socket (mode 0600) for any number of connections")
	fs.StringVar(&cfg.workspace, "workspace", "/workspace", "the session's workspace: where tools start and the only place file transfers may touch")
	fs.StringVar(&cfg.dir, "dir", "", "the session's working directory: where the terminal starts when its params name none ('.': this process's own); default: the workspace")
	fs.Var(&cfg.roots, "transfer-root", "a directory file transfers may touch besides the workspace (a session's editable path), repeatable")
	fs.StringVar(&cfg.stateDir, "state-dir", "/tmp/.sandboxd", "where tools keep files for the model (full output of truncated commands)")
	fs.StringVar(&cfg.toolSpecs, "tools", "", `tool specs as JSON, e.g. '[{"name":"terminal","params":{"soft_timeout_seconds":30}}]', or @FILE; default: all built-in tools`)
	fs.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !cfg.stdio && cfg.socket == "" {
		return usageErrorf("give --stdio, --socket PATH, or both")
	}
	if os.Getpid() == 1 {
		// The container's main process: be its init, and run the agent
		// as its only child (decision 0021).
		if code := agent.Init(append([]string{os.Args[0], "agent"}, args...), std.err); code != 0 {
			return exitCodeError(code)
		}
		return nil
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
	err = agent.Run(ctx, agent.RunOptions{
		Stdio:         cfg.stdio,
		Stdin:         std.in,
		Stdout:        std.out,
		Socket:        cfg.socket,
		Workspace:     cfg.workspace,
		TransferRoots: cfg.roots,
		Dir:           cfg.dir,
		StateDir:      cfg.stateDir,
		Registry:      builtin.Registry(),
		Specs:         specs,
		Logger:        log,
	})
	if errors.Is(err, agent.ErrStopped) {
		return exitCodeError(128 + 15) // see agent.ErrStopped
	}
	return err
}

// repeatFlag is a repeatable string flag whose values are taken whole (a
// path may hold a comma).
type repeatFlag []string

func (l *repeatFlag) String() string { return strings.Join(*l, " ") }
func (l *repeatFlag) Set(v string) error {
	*l = append(*l, v)
	return nil
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
