package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

// runKit is the toolset Run serves in these tests: "remember" keeps a value
// that every connection shares (the same toolset), "block" runs until its
// call is cancelled.
type runKit struct {
	mu      sync.Mutex
	value   string
	started chan struct{} // a block call is running
	closed  chan struct{} // the toolset was closed
	once    sync.Once
}

func (k *runKit) Close() error { k.once.Do(func() { close(k.closed) }); return nil }

type rememberArgs struct {
	Set string `json:"set,omitempty"`
}

func newRunRegistry(t *testing.T) (*tools.Registry, *runKit) {
	t.Helper()
	k := &runKit{started: make(chan struct{}, 10), closed: make(chan struct{})}
	var r tools.Registry
	require.NoError(t, r.Register("kit", func(tools.Env, json.RawMessage) ([]*tools.Tool, error) {
		remember, err := tools.NewFunc(tools.Definition{Name: "remember", Description: "remember (test)"},
			func(_ context.Context, a rememberArgs) (*tools.Observation, error) {
				k.mu.Lock()
				defer k.mu.Unlock()
				if a.Set != "" {
					k.value = a.Set
				}
				return tools.TextResult(k.value, nil), nil
			}, k)
		if err != nil {
			return nil, err
		}
		block, err := tools.NewFunc(tools.Definition{Name: "block", Description: "block (test)"},
			func(ctx context.Context, _ noArgs) (*tools.Observation, error) {
				k.started <- struct{}{}
				<-ctx.Done()
				return nil, ctx.Err()
			}, k)
		if err != nil {
			return nil, err
		}
		return []*tools.Tool{remember, block}, nil
	}))
	return &r, k
}

// logWatch is a slog.Handler that lets a test wait for a log message: the
// agent's own account of what happened, instead of a guess at how long it
// takes.
type logWatch struct {
	mu   sync.Mutex
	seen map[string]chan struct{}
	done map[string]bool
}

func newLogWatch() *logWatch {
	return &logWatch{seen: map[string]chan struct{}{}, done: map[string]bool{}}
}

func (w *logWatch) ch(msg string) chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	c, ok := w.seen[msg]
	if !ok {
		c = make(chan struct{})
		w.seen[msg] = c
	}
	return c
}

func (w *logWatch) Enabled(context.Context, slog.Level) bool { return true }
func (w *logWatch) WithAttrs([]slog.Attr) slog.Handler       { return w }
func (w *logWatch) WithGroup(string) slog.Handler            { return w }
func (w *logWatch) Handle(_ context.Context, r slog.Record) error {
	c := w.ch(r.Message)
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done[r.Message] {
		w.done[r.Message] = true
		close(c)
	}
	return nil
}

func (w *logWatch) wait(t *testing.T, msg string) {
	t.Helper()
	select {
	case <-w.ch(msg):
	case <-ctxT(t).Done():
		t.Fatalf("the agent never logged %q", msg)
	}
}

// runner is one Run in the background.
type runner struct {
	opts   RunOptions
	kit    *runKit
	log    *logWatch
	cancel context.CancelFunc
	ended  chan error
}

func startRun(t *testing.T, tweak func(*RunOptions)) *runner {
	t.Helper()
	reg, kit := newRunRegistry(t)
	lw := newLogWatch()
	r := &runner{
		opts: RunOptions{
			Workspace: filepath.Join(t.TempDir(), "ws"), // Run creates both
			StateDir:  filepath.Join(t.TempDir(), "state"),
			Registry:  reg,
			Specs:     []tools.Spec{{Name: "kit"}},
			Logger:    slog.New(lw),
		},
		kit: kit, log: lw, ended: make(chan error, 1),
	}
	tweak(&r.opts)
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.ended <- Run(ctx, r.opts) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.ended:
			_ = err // each test checks the outcome it expects (result)
		case <-ctxT(t).Done():
			t.Error("Run did not return after its ctx ended")
		}
	})
	return r
}

// result waits for Run to return.
func (r *runner) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-r.ended:
		r.ended <- err // for the cleanup
		return err
	case <-ctxT(t).Done():
		t.Fatal("Run did not return")
		return nil
	}
}

// stdioPair gives Run a stdio connection and returns the client on it.
func stdioPair(t *testing.T, o *RunOptions) *agentclient.Client {
	hostEnd, agentEnd := net.Pipe()
	t.Cleanup(func() { _ = agentEnd.Close() })
	o.Stdio, o.Stdin, o.Stdout = true, agentEnd, agentEnd
	cli := agentclient.NewClient(hostEnd, agentclient.WithLogger(quiet))
	t.Cleanup(func() { _ = cli.Close() })
	return cli
}

func remember(t *testing.T, cli *agentclient.Client, set string) string {
	t.Helper()
	raw, err := json.Marshal(rememberArgs{Set: set})
	require.NoError(t, err)
	obs, err := cli.Call(ctxT(t), "remember", raw, nil)
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())
	return obs.Text()
}

func TestRunEndsWithTheStdioConnection(t *testing.T) {
	t.Parallel()
	var cli *agentclient.Client
	r := startRun(t, func(o *RunOptions) { cli = stdioPair(t, o) })
	assert.Equal(t, "x", remember(t, cli, "x"))
	fi, err := os.Stat(r.opts.Workspace)
	require.NoError(t, err, "Run creates the workspace")
	assert.True(t, fi.IsDir())
	require.NoError(t, cli.Close())
	require.NoError(t, r.result(t), "the end of the only connection ends Run cleanly")
	<-r.kit.closed
}

func TestRunEndsOnHostShutdown(t *testing.T) {
	t.Parallel()
	var cli *agentclient.Client
	r := startRun(t, func(o *RunOptions) { cli = stdioPair(t, o) })
	require.NoError(t, cli.Shutdown(ctxT(t)))
	require.NoError(t, cli.Close()) // a non-os stdio is the host's to close
	require.NoError(t, r.result(t))
	<-r.kit.closed
	r.log.wait(t, "shutdown requested by the host")
}

func TestRunStopsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	r := startRun(t, func(o *RunOptions) { o.Socket = sock })
	r.log.wait(t, "agent started")
	conn, err := net.Dial("unix", sock)
	require.NoError(t, err)
	cli := agentclient.NewClient(conn, agentclient.WithLogger(quiet))
	defer func() { _ = cli.Close() }()
	pending := make(chan error, 1)
	go func() {
		_, err := cli.Call(context.Background(), "block", json.RawMessage(`{}`), nil)
		pending <- err
	}()
	<-r.kit.started

	r.cancel() // what SIGTERM does to the agent's process
	require.ErrorIs(t, r.result(t), ErrStopped)
	// It fails, it does not hang: cancelled, or cut off if the connection
	// closed before the answer was out.
	err = <-pending
	assert.True(t, errors.Is(err, proto.ErrDisconnected) || errors.Is(err, context.Canceled), "a pending call fails with %v", err)
	<-r.kit.closed
	_, err = os.Stat(sock)
	assert.True(t, os.IsNotExist(err), "the socket is removed on exit")
}

func TestRunSocketOutlivesStdioAndProxyReconnects(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	var cli *agentclient.Client
	r := startRun(t, func(o *RunOptions) { cli = stdioPair(t, o); o.Socket = sock })
	remember(t, cli, "me")
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the socket is private")

	// The host goes away (daemon restart): Run must keep serving.
	require.NoError(t, cli.Close())
	r.log.wait(t, "stdio connection ended; still serving the socket")
	select {
	case err := <-r.ended:
		t.Fatalf("Run returned (%v) when stdio ended although it serves a socket", err)
	default:
	}

	// The host comes back through the proxy (docker exec -i agent-proxy).
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	proxied := make(chan error, 1)
	go func() { proxied <- Proxy(context.Background(), sock, inR, outW); _ = outW.Close() }()
	pcli := agentclient.NewClient(proto.JoinConn(outR, inW), agentclient.WithLogger(quiet))
	defer func() { _ = pcli.Close() }()
	assert.Equal(t, "me", remember(t, pcli, ""), "the toolset survived the reconnect")

	require.NoError(t, pcli.Shutdown(ctxT(t)))
	require.NoError(t, r.result(t))
	require.NoError(t, <-proxied, "the proxy ends cleanly when the agent closes")
	_, err = os.Stat(sock)
	assert.True(t, os.IsNotExist(err), "the socket is removed on exit")
}

func TestRunSocketIsSingleInstance(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "agent.sock")
	first := startRun(t, func(o *RunOptions) { o.Socket = sock })
	first.log.wait(t, "agent started")

	reg, _ := newRunRegistry(t)
	second := RunOptions{Socket: sock, Workspace: t.TempDir(), StateDir: t.TempDir(), Registry: reg, Logger: quiet}
	err := Run(context.Background(), second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "another agent is listening on it")

	first.cancel()
	require.ErrorIs(t, first.result(t), ErrStopped)

	// A stale socket, left by a crashed agent, is replaced.
	stale := filepath.Join(t.TempDir(), "stale.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: stale, Net: "unix"})
	require.NoError(t, err)
	ln.SetUnlinkOnClose(false)
	require.NoError(t, ln.Close())
	r := startRun(t, func(o *RunOptions) { o.Socket = stale })
	r.log.wait(t, "agent started")

	// Anything else at the path is left alone.
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	second.Socket = file
	err = Run(context.Background(), second)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is in the way")
}

func TestRunValidates(t *testing.T) {
	t.Parallel()
	reg, _ := newRunRegistry(t)
	for name, o := range map[string]RunOptions{
		"no stdio, no socket": {Workspace: t.TempDir(), Registry: reg},
		"stdio without pipes": {Stdio: true, Workspace: t.TempDir(), Registry: reg},
		"no registry":         {Socket: filepath.Join(t.TempDir(), "s"), Workspace: t.TempDir()},
	} {
		require.Error(t, Run(context.Background(), o), name)
	}
	var cli *agentclient.Client
	err := Run(context.Background(), func() RunOptions {
		o := RunOptions{Workspace: t.TempDir(), StateDir: t.TempDir(), Registry: reg, Specs: []tools.Spec{{Name: "nope"}}, Logger: quiet}
		cli = stdioPair(t, &o)
		return o
	}())
	require.ErrorIs(t, err, tools.ErrUnknownTool)
	assert.Contains(t, err.Error(), `starting the tools: tools: no factory "nope"`)
	_ = cli
}

func TestProxyWithoutAnAgent(t *testing.T) {
	t.Parallel()
	err := Proxy(context.Background(), "/nonexistent.sock", nil, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no agent socket at /nonexistent.sock")
}
