package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

// agentProc is a real `sandboxd agent` child process and a Client on its
// stdin/stdout, the way the host talks to a sandbox.
type agentProc struct {
	cmd    *exec.Cmd
	cli    *agentclient.Client
	ws     string
	stderr *syncBuffer
	exited chan struct{}
	err    error // of cmd.Wait, once exited is closed
	socket bool  // it also serves a socket: the end of stdin does not end it
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAgent starts `sandboxd agent --stdio` (plus args) on a fresh
// workspace. Plain os.Pipes, not exec's StdoutPipe: Wait must not close
// the read side under the client before it has read the last frames.
func startAgent(t *testing.T, args ...string) *agentProc {
	t.Helper()
	p := &agentProc{ws: t.TempDir(), stderr: &syncBuffer{}, exited: make(chan struct{}), socket: slices.Contains(args, "--socket")}
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	p.cmd = exec.Command(binPath, append([]string{"agent", "--stdio", "--workspace", p.ws, "--state-dir", t.TempDir(), "--log-level", "debug"}, args...)...)
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = inR, outW, p.stderr
	require.NoError(t, p.cmd.Start())
	closeChildEnds(t, inR, outW)
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	p.cli = agentclient.NewClient(proto.JoinConn(outR, inW))
	t.Cleanup(func() {
		_ = p.cli.Close() // ends a --stdio-only agent
		if p.socket {
			// One that also serves a socket outlives its stdin: stop it
			// as docker stop would. (An error: it has exited already.)
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
		select {
		case <-p.exited:
		case <-time.After(time.Minute): // a hang guard, not a timing assert
			_ = p.cmd.Process.Kill() // the test fails below either way
			<-p.exited
			t.Errorf("the agent did not exit")
		}
		if strings.Contains(p.stderr.String(), "DATA RACE") || t.Failed() {
			t.Logf("agent stderr:\n%s", p.stderr.String())
		}
		assert.NotContains(t, p.stderr.String(), "DATA RACE")
	})
	return p
}

// closeChildEnds closes the pipe ends a started child now holds.
func closeChildEnds(t *testing.T, ends ...*os.File) {
	t.Helper()
	for _, f := range ends {
		require.NoError(t, f.Close())
	}
}

// wait waits for the agent to exit and returns its exit code.
func (p *agentProc) wait(t *testing.T) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(time.Minute):
		t.Fatalf("the agent did not exit; stderr:\n%s", p.stderr.String())
	}
	return p.cmd.ProcessState.ExitCode()
}

// ctxT bounds a test's calls: a guard on a hang, not a timing assert (a
// loaded machine is slow, issue 23).
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func call(t *testing.T, cli *agentclient.Client, name string, args any) *tools.Observation {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	obs, err := cli.Call(ctxT(t), name, raw, nil)
	require.NoError(t, err)
	return obs
}

func TestAgentServesTheBuiltinTools(t *testing.T) {
	t.Parallel()
	p := startAgent(t)
	ctx := ctxT(t)
	require.NoError(t, p.cli.Ping(ctx))
	defs, err := p.cli.ListTools(ctx)
	require.NoError(t, err)
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	assert.Equal(t, []string{"terminal", "file_editor", "grep", "glob"}, names)

	obs := call(t, p.cli, "terminal", map[string]any{"command": "echo hello from $((6*7))"})
	require.False(t, obs.IsError, obs.Text())
	assert.Contains(t, obs.Text(), "hello from 42")

	file := filepath.Join(p.ws, "src", "main.go")
	require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o755))
	obs = call(t, p.cli, "file_editor", map[string]any{"command": "create", "path": file, "file_text": "package main\n\nfunc main() { println(\"needle\") }\n"})
	require.False(t, obs.IsError, obs.Text())
	obs = call(t, p.cli, "file_editor", map[string]any{"command": "view", "path": file})
	require.False(t, obs.IsError, obs.Text())
	assert.Contains(t, obs.Text(), "     3\tfunc main()")

	obs = call(t, p.cli, "grep", map[string]any{"pattern": "needle", "path": p.ws})
	require.False(t, obs.IsError, obs.Text())
	assert.Contains(t, obs.Text(), file)

	obs = call(t, p.cli, "glob", map[string]any{"pattern": "**/*.go", "path": p.ws})
	require.False(t, obs.IsError, obs.Text())
	assert.Contains(t, obs.Text(), file)

	// Streaming: the terminal's output arrives while the command runs.
	var mu sync.Mutex
	var streamed strings.Builder
	obs, err = p.cli.Call(ctx, "terminal", json.RawMessage(`{"command":"for i in 1 2 3; do echo line$i; sleep 0.05; done"}`), func(b []byte) {
		mu.Lock()
		streamed.Write(b)
		mu.Unlock()
	})
	require.NoError(t, err)
	assert.Contains(t, obs.Text(), "line3")
	mu.Lock()
	assert.Contains(t, streamed.String(), "line1", "terminal output is streamed")
	mu.Unlock()
}

func TestAgentBadInput(t *testing.T) {
	t.Parallel()
	p := startAgent(t)
	cases := []struct {
		name, tool string
		args       string
		errIs      error  // a protocol error...
		want       string // ...or an is_error observation containing this
	}{
		{"unknown tool", "nope", `{}`, tools.ErrUnknownTool, `unknown tool "nope"; available tools: [terminal file_editor grep glob]`},
		{"glob: bad pattern", "glob", `{"pattern":"[unclosed"}`, nil, "[unclosed"},
		{"glob: relative path", "glob", `{"pattern":"*","path":"rel"}`, nil, "rel"},
		{"empty tool name", "", `{}`, proto.ErrInvalidParams, "needs the name of a tool"},
		{"wrong type", "terminal", `{"command":5}`, nil, "command"},
		{"wrong type in array", "file_editor", `{"command":"view","path":"/w","view_range":["a"]}`, nil, "view_range"},
		{"missing field", "file_editor", `{"command":"view"}`, nil, "path"},
		{"unknown field", "grep", `{"pattern":"x","colour":true}`, nil, "colour"},
		{"bad enum", "file_editor", `{"command":"delete","path":"/workspace/x"}`, nil, "command"},
		{"not an object", "terminal", `["ls"]`, nil, "expected a JSON object"},
		{"not JSON", "terminal", `{"command":`, nil, "not valid JSON"},
		{"relative path", "file_editor", `{"command":"view","path":"relative.txt"}`, nil, "absolute"},
		{"bad regex", "grep", `{"pattern":"(unclosed"}`, nil, "(unclosed"},
		{"huge argument", "terminal", `{"command":"echo ` + strings.Repeat("x", tools.MaxArgumentBytes) + `"}`, nil, "exceed the limit"},
		{"argument above the frame limit", "terminal", `{"command":"echo ` + strings.Repeat("x", proto.MaxFrameSize) + `"}`, proto.ErrFrameTooLarge, "the limit is 33554432"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.name == "huge argument" && testing.Short() && raceEnabled {
				// ~20 s of encoding/json under -race for 24 MiB each way.
				// In -short, agent's TestMaxFrameFitsTheLargestArgument
				// checks that such a call fits a frame and tools'
				// TestToolValidatesArguments that the tool refuses it.
				t.Skip("a 24 MiB argument under -race; runs without -short")
			}
			obs, err := p.cli.Call(ctxT(t), c.tool, json.RawMessage(c.args), nil)
			if c.errIs != nil {
				require.ErrorIs(t, err, c.errIs)
				assert.Contains(t, err.Error(), c.want)
			} else {
				require.NoError(t, err)
				assert.True(t, obs.IsError, "want an is_error observation, got %q", obs.Text())
				assert.Contains(t, obs.Text(), c.want)
			}
			require.NoError(t, p.cli.Ping(ctxT(t)), "the agent still answers")
		})
	}
	obs := call(t, p.cli, "terminal", map[string]any{"command": "echo still fine"})
	assert.Contains(t, obs.Text(), "still fine")
}

// pidOf runs a background sleep through the terminal and returns its pid.
func startSleep(t *testing.T, cli *agentclient.Client) int {
	t.Helper()
	obs := call(t, cli, "terminal", map[string]any{"command": "sleep 1000 & echo PID=$!"})
	m := regexp.MustCompile(`PID=(\d+)`).FindStringSubmatch(obs.Text())
	require.NotNil(t, m, obs.Text())
	pid, err := strconv.Atoi(m[1])
	require.NoError(t, err)
	require.True(t, alive(pid), "sleep %d should run", pid)
	return pid
}

// alive: the process exists and is not a zombie waiting to be reaped.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i > 0 && len(s) > i+2 && s[i+2] != 'Z' && s[i+2] != 'X'
}

// waitGone waits for a process of the agent to be gone. Another process's
// end cannot be waited on, only polled.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool { return !alive(pid) }, time.Minute, 10*time.Millisecond,
		"process %d still runs after the agent shut down", pid)
}

// callInFlight starts a terminal call of `sleep`, which outlasts the test,
// and returns once the command runs (its first output has streamed back),
// with the channel its outcome arrives on.
func callInFlight(t *testing.T, cli *agentclient.Client, sleep int) <-chan error {
	t.Helper()
	started := make(chan struct{})
	var once sync.Once
	ended := make(chan error, 1)
	go func() {
		args := fmt.Sprintf(`{"command":"echo started; sleep %d","timeout":%d}`, sleep, 2*sleep)
		_, err := cli.Call(context.Background(), "terminal", json.RawMessage(args), func(b []byte) {
			if bytes.Contains(b, []byte("started")) {
				once.Do(func() { close(started) })
			}
		})
		ended <- err
	}()
	select {
	case <-started:
	case err := <-ended:
		t.Fatalf("the call ended before it ran: %v", err)
	case <-ctxT(t).Done():
		t.Fatal("the call never started")
	}
	return ended
}

func TestAgentShutdownEndsChildProcesses(t *testing.T) {
	t.Parallel()
	p := startAgent(t)
	pid := startSleep(t, p.cli)
	// A call in flight during shutdown is cancelled, not left hanging.
	inflight := callInFlight(t, p.cli, 30)
	require.NoError(t, p.cli.Shutdown(ctxT(t)))
	assert.Equal(t, 0, p.wait(t), "clean shutdown exits 0")
	waitGone(t, pid)
	select {
	case err := <-inflight:
		t.Logf("the call in flight ended with: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("a call in flight hangs after shutdown")
	}
	select {
	case <-p.cli.Done():
	case <-time.After(time.Minute):
		t.Fatal("client not told the connection ended")
	}
	assert.Contains(t, p.stderr.String(), `"msg":"toolset closed"`)
	assert.NotContains(t, p.stderr.String(), "killed processes left", "the terminal ends its own processes")
}

func TestAgentSIGTERM(t *testing.T) {
	t.Parallel()
	p := startAgent(t)
	pid := startSleep(t, p.cli)
	pending := callInFlight(t, p.cli, 30)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	// A clean shutdown, reported as a SIGTERM exit: the host tells a
	// `docker stop` from the shutdown it asks for itself (exit 0).
	assert.Equal(t, 143, p.wait(t))
	waitGone(t, pid)
	select {
	case err := <-pending:
		require.ErrorIs(t, err, proto.ErrDisconnected, "a pending call fails with ErrDisconnected, it does not hang")
	case <-time.After(time.Minute):
		t.Fatal("a pending call hangs after the agent exited")
	}
	assert.Contains(t, p.stderr.String(), "signal received")
}

func TestAgentKilledFailsPendingCalls(t *testing.T) {
	t.Parallel()
	p := startAgent(t)
	pending := callInFlight(t, p.cli, 5)
	require.NoError(t, p.cmd.Process.Kill()) // the container is killed
	select {
	case err := <-pending:
		require.ErrorIs(t, err, proto.ErrDisconnected)
		assert.Contains(t, err.Error(), "the agent closed the stream")
	case <-time.After(time.Minute):
		t.Fatal("a pending call hangs after the agent was killed")
	}
	<-p.cli.Done()
	require.ErrorIs(t, p.cli.Err(), proto.ErrDisconnected)
	p.wait(t)
	// The sleep may outlive a SIGKILLed agent (nobody is left to end it; in
	// a sandbox the container's end takes it down): it is short for that.
}

func TestAgentStdinEOFExits(t *testing.T) {
	t.Parallel()
	p := startAgent(t)
	require.NoError(t, p.cli.Ping(ctxT(t)))
	require.NoError(t, p.cli.Close())
	assert.Equal(t, 0, p.wait(t), "the end of the only connection ends the agent cleanly")
}

func TestAgentSocketSurvivesStdioAndProxyReconnects(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "run", "agent.sock")
	p := startAgent(t, "--socket", sock)
	obs := call(t, p.cli, "terminal", map[string]any{"command": "export REMEMBER=me; cd " + p.ws})
	require.False(t, obs.IsError, obs.Text())
	fi, err := os.Stat(sock)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the socket is private")

	// The host goes away (daemon restart): the agent must keep running.
	require.NoError(t, p.cli.Close())
	require.Eventually(t, func() bool {
		return strings.Contains(p.stderr.String(), "stdio connection ended; still serving the socket")
	}, time.Minute, 10*time.Millisecond, "the agent saw its stdin end")
	select {
	case <-p.exited:
		t.Fatalf("the agent exited when stdin closed although it serves a socket:\n%s", p.stderr.String())
	default:
	}

	// The host comes back through `sandboxd agent-proxy` (docker exec -i).
	proxy := exec.Command(binPath, "agent-proxy", "--socket", sock)
	inR, inW, err := os.Pipe()
	require.NoError(t, err)
	outR, outW, err := os.Pipe()
	require.NoError(t, err)
	proxy.Stdin, proxy.Stdout, proxy.Stderr = inR, outW, p.stderr
	require.NoError(t, proxy.Start())
	closeChildEnds(t, inR, outW)
	cli := agentclient.NewClient(proto.JoinConn(outR, inW))
	defer func() { _ = cli.Close() }()
	require.NoError(t, cli.Ping(ctxT(t)))
	obs = call(t, cli, "terminal", map[string]any{"command": "echo REMEMBER=$REMEMBER"})
	assert.Contains(t, obs.Text(), "REMEMBER=me", "the session's shell survived the reconnect")

	require.NoError(t, cli.Shutdown(ctxT(t)))
	assert.Equal(t, 0, p.wait(t))
	require.NoError(t, proxy.Wait(), "the proxy exits cleanly when the agent closes")
	_, err = os.Stat(sock)
	assert.True(t, os.IsNotExist(err), "the socket is removed on exit")
}

func TestAgentSecondInstanceRefusesLiveSocket(t *testing.T) {
	t.Parallel()
	// Anything that answers on the socket is a live agent; agent's
	// TestRunSocketIsSingleInstance runs two real ones.
	sock := filepath.Join(t.TempDir(), "agent.sock")
	ln, err := net.Listen("unix", sock)
	require.NoError(t, err)
	defer func() { _ = ln.Close() }()
	var errOut bytes.Buffer
	code := run([]string{"agent", "--socket", sock, "--workspace", t.TempDir(), "--state-dir", t.TempDir()},
		stdio{in: strings.NewReader(""), out: &bytes.Buffer{}, err: &errOut})
	assert.Equal(t, exitError, code)
	assert.Contains(t, errOut.String(), "another agent is listening on it")
}

func TestAgentUploadDownload(t *testing.T) {
	t.Parallel()
	p := startAgent(t)
	ctx := ctxT(t)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	body := []byte("#!/bin/sh\necho uploaded\n")
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "pkg/run.sh", Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg}))
	_, err := tw.Write(body)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, p.cli.Upload(ctx, p.ws, &buf))

	obs := call(t, p.cli, "terminal", map[string]any{"command": filepath.Join(p.ws, "pkg/run.sh")})
	assert.Contains(t, obs.Text(), "uploaded", "the mode survived: the script runs")

	var out bytes.Buffer
	require.NoError(t, p.cli.Download(ctx, "pkg", &out))
	tr := tar.NewReader(&out)
	var names []string
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, h.Name)
	}
	assert.Equal(t, []string{"pkg/", "pkg/run.sh"}, names)

	bad := bytes.NewBuffer(nil)
	tw = tar.NewWriter(bad)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "../../escape", Mode: 0o644, Typeflag: tar.TypeReg}))
	require.NoError(t, tw.Close())
	err = p.cli.Upload(ctx, p.ws, bad)
	require.ErrorIs(t, err, proto.ErrBadArchive)
	require.NoError(t, p.cli.Ping(ctx))
}
