package e2e

import (
	"context"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/tools"
)

func TestSessionCallAndClose(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Env: map[string]string{"GREETING": "hi there"}})
	require.NoError(t, err)
	assert.Equal(t, sandbox.StateReady, s.State())

	defs, err := s.Tools(ctxT(t))
	require.NoError(t, err)
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	assert.Subset(t, names, []string{"terminal", "file_editor", "grep", "glob"})

	out := sh(t, s, `echo "$GREETING from $(id -u)"`)
	assert.Contains(t, out, "hi there from 1000")

	sh(t, s, "mkdir -p /workspace/src")
	call(t, s, "file_editor", map[string]any{"command": "create", "path": "/workspace/src/main.go",
		"file_text": "package main\n\nfunc main() { println(\"needle\") }\n"})
	assert.Contains(t, call(t, s, "file_editor", map[string]any{"command": "view", "path": "/workspace/src/main.go"}), "needle")
	assert.Contains(t, call(t, s, "grep", map[string]any{"pattern": "needle"}), "/workspace/src/main.go")
	assert.Contains(t, call(t, s, "glob", map[string]any{"pattern": "**/*.go"}), "/workspace/src/main.go")

	require.NoError(t, s.Close(ctxT(t)))
	assert.Equal(t, sandbox.StateClosed, s.State())
	assert.Zero(t, sessionResources(t, s.ID()), "Close removes container, volume and network")
	_, err = m.Get(s.ID())
	assert.ErrorIs(t, err, sandbox.ErrNotFound)
}

func TestCwdAndToolSelection(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Cwd: "/tmp",
		Tools: []tools.Spec{{Name: "terminal"}, {Name: "grep"}}})
	require.NoError(t, err)
	assert.Contains(t, sh(t, s, "pwd"), "/tmp\n")
	defs, err := s.Tools(ctxT(t))
	require.NoError(t, err)
	require.Len(t, defs, 2)
	assert.Equal(t, "terminal", defs[0].Name)
	assert.Equal(t, "grep", defs[1].Name)
	_, err = s.Call(ctxT(t), "file_editor", []byte(`{"command":"view","path":"/workspace"}`), nil)
	assert.ErrorIs(t, err, tools.ErrUnknownTool)
}

// A cwd under /workspace that does not exist is created, owned by the
// session user; one elsewhere that the image lacks is refused, naming it;
// one the image has is used.
func TestCwdCreatedOrRefused(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Cwd: "/workspace/a/b"})
	require.NoError(t, err)
	assert.Contains(t, sh(t, s, `pwd; stat -c %u:%g /workspace/a /workspace/a/b | paste -sd' '; touch x && echo writable`),
		"/workspace/a/b\n1000:1000 1000:1000\nwritable\n")

	_, err = m.Create(ctxT(t), sandbox.SessionOptions{Cwd: "/no/such/dir"})
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	assert.Contains(t, err.Error(), `cwd: "/no/such/dir" does not exist in image`)
	_, err = m.Create(ctxT(t), sandbox.SessionOptions{Cwd: "/etc/passwd"})
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	assert.Contains(t, err.Error(), `cwd: "/etc/passwd" is not a directory`)

	s, err = m.Create(ctxT(t), sandbox.SessionOptions{Cwd: "/etc"})
	require.NoError(t, err)
	assert.Contains(t, sh(t, s, "pwd"), "/etc\n")
}

// terminal.no_change_timeout is the session's soft timeout: a silent command
// returns after it with exit code -1 and the note naming it.
func TestTerminalNoChangeTimeout(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Terminal: sandbox.TerminalOptions{NoChangeTimeout: time.Second}})
	require.NoError(t, err)
	obs, err := tryCall(ctxT(t), s, "terminal", map[string]any{"command": "sleep 30"})
	require.NoError(t, err)
	assert.Contains(t, obs.Text(), "no new output after 1 seconds", obs.Text())
	structured, err := json.Marshal(obs.Structured)
	require.NoError(t, err)
	assert.Contains(t, string(structured), `"exit_code":-1`)
	call(t, s, "terminal", map[string]any{"command": "C-c", "is_input": true})
}

func TestCloseIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	errs := make([]error, 5)
	for i := range errs {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = s.Close(ctxT(t)) }()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// Every caller returned only once all was gone.
	assert.Zero(t, sessionResources(t, s.ID()))
	require.NoError(t, s.Close(ctxT(t)), "closing twice")
	assert.ErrorIs(t, m.Close(ctxT(t), s.ID()), sandbox.ErrNotFound)
}

// Tool calls on one session run at once: file_editor calls complete while a
// terminal command is still running on the same stream.
func TestConcurrentCallsOverlap(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	sh(t, s, "echo warm > /workspace/f.txt")

	type ended struct {
		obs *tools.Observation
		err error
		at  time.Time
	}
	long := make(chan ended, 1)
	go func() {
		obs, err := tryCall(ctxT(t), s, "terminal", map[string]any{"command": "sleep 2; echo slept"})
		long <- ended{obs, err, time.Now()}
	}()
	time.Sleep(200 * time.Millisecond) // the terminal command is running
	var wg sync.WaitGroup
	ends := make(chan time.Time, 16)
	for range cap(ends) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs, err := tryCall(ctxT(t), s, "file_editor", map[string]any{"command": "view", "path": "/workspace/f.txt"})
			if assert.NoError(t, err) && assert.False(t, obs.IsError, obs.Text()) {
				assert.Contains(t, obs.Text(), "warm")
			}
			ends <- time.Now()
		}()
	}
	wg.Wait()
	close(ends)
	l := <-long
	require.NoError(t, l.err)
	require.False(t, l.obs.IsError, l.obs.Text())
	longEnd := l.at
	for end := range ends {
		assert.True(t, end.Before(longEnd), "a short call waited for the long one")
	}
}

func TestIdleTimeoutClosesSession(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{IdleTimeout: time.Second})
	require.NoError(t, err)
	sh(t, s, "true") // activity
	select {
	case <-s.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("idle session not closed")
	}
	require.Eventually(t, func() bool { return s.State() == sandbox.StateClosed }, 2*time.Minute, 50*time.Millisecond)
	assert.Zero(t, sessionResources(t, s.ID()))
	_, err = s.Call(ctxT(t), "terminal", []byte(`{"command":"true"}`), nil)
	assert.ErrorIs(t, err, sandbox.ErrClosed)
}

// An agent stopped from inside (SIGSTOP; same uid, so a command can) fails
// its session within the health timeout, with the reason, and the call
// that stopped it returns instead of hanging; Close removes the sandbox.
func TestStoppedAgentFailsSession(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{HealthTimeout: time.Second})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	sh(t, s, "true")
	start := time.Now()
	// The shell's parent is the agent. The sleep keeps the command from
	// ending before the stop has taken effect: kill(2) returns once
	// SIGSTOP is queued, and the agent stops only when the kernel next
	// runs one of its threads; on a busy host its other threads can first
	// read the command's end and answer (TestAgentStoppedAfterAnswer).
	_, err = s.Call(ctxT(t), "terminal", []byte(`{"command":"kill -STOP $PPID; sleep 30","timeout":60}`), nil)
	require.ErrorIs(t, err, sandbox.ErrFailed)
	assert.Contains(t, err.Error(), "did not answer a ping within 1s")
	t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
	require.NoError(t, s.Close(ctxT(t)))
	_, err = docker.ContainerInspect(ctxT(t), "sandboxd-"+s.ID())
	assert.Error(t, err, "the stopped sandbox is removed")
}

// A stop that takes effect after the command has ended, as kill -STOP
// $PPID's may (see TestStoppedAgentFailsSession), leaves that call's
// answer as it was, and the session fails at the next health ping. The
// stop is sent from outside once the call has answered: that order,
// which the flake of the test above hit by chance, is then certain.
func TestAgentStoppedAfterAnswer(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{HealthTimeout: time.Second})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	// The answered call: it gives the agent's pid (the shell's parent).
	agent, _, _ := strings.Cut(sh(t, s, "echo $PPID"), "\n")
	_, err = strconv.Atoi(agent)
	require.NoError(t, err, "the agent's pid")
	ctr := containerOf(t, s.ID()).ID
	ex, err := docker.ContainerExecCreate(ctxT(t), ctr, container.ExecOptions{Cmd: []string{"sh", "-c", "kill -STOP " + agent}, AttachStdout: true, AttachStderr: true})
	require.NoError(t, err)
	att, err := docker.ContainerExecAttach(ctxT(t), ex.ID, container.ExecAttachOptions{})
	require.NoError(t, err)
	out, _ := io.ReadAll(att.Reader)
	att.Close()
	st, err := docker.ContainerExecInspect(ctxT(t), ex.ID)
	require.NoError(t, err)
	require.Zero(t, st.ExitCode, "kill -STOP %s in the sandbox: %q", agent, out)
	select {
	case <-s.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("session not failed after its agent was stopped")
	}
	require.ErrorIs(t, s.Err(), sandbox.ErrFailed)
	assert.Contains(t, s.Err().Error(), "did not answer a ping within 1s")
}

// `docker stop` reads as a stop, not as a clean exit: the agent leaves
// with 143 after SIGTERM.
func TestStoppedContainerSaysSIGTERM(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	timeout := 5
	require.NoError(t, docker.ContainerStop(ctxT(t), containerOf(t, s.ID()).ID, container.StopOptions{Timeout: &timeout}))
	select {
	case <-s.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("session not marked failed after docker stop")
	}
	require.ErrorIs(t, s.Err(), sandbox.ErrFailed)
	assert.Contains(t, s.Err().Error(), "exited with code 143 (SIGTERM")
}

func TestKilledContainerFailsSession(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	sh(t, s, "true")

	inflight := make(chan error, 1)
	go func() {
		_, err := s.Call(context.Background(), "terminal", []byte(`{"command":"sleep 60","timeout":120}`), nil)
		inflight <- err
	}()
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, docker.ContainerKill(ctxT(t), containerOf(t, s.ID()).ID, "SIGKILL"))

	select {
	case <-s.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("session not marked failed after docker kill")
	}
	assert.Equal(t, sandbox.StateFailed, s.State())
	require.ErrorIs(t, s.Err(), sandbox.ErrFailed)
	assert.Contains(t, s.Err().Error(), "137")
	t.Log("failure:", s.Err())

	select {
	case err := <-inflight:
		require.Error(t, err)
		t.Log("in-flight call:", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("the in-flight call hangs")
	}
	start := time.Now()
	_, err = s.Call(ctxT(t), "terminal", []byte(`{"command":"true"}`), nil)
	require.ErrorIs(t, err, sandbox.ErrFailed)
	// A hang, not slowness: the call fails from the recorded state instead of
	// waiting for the dead agent until ctxT's 2 minutes run out.
	assert.Less(t, time.Since(start), 10*time.Second, "fails fast")

	require.NoError(t, s.Close(ctxT(t)))
	assert.Zero(t, sessionResources(t, s.ID()))
}

func TestWarmPoolHandOut(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{Pools: []sandbox.PoolOptions{{Size: 1}}})
	require.Eventually(t, func() bool { return m.Pools()[0].Ready == 1 }, time.Minute, 20*time.Millisecond)
	assert.Empty(t, m.List(), "a warm sandbox is no session")

	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, m.Pools()[0].Ready, "handed out from the pool")
	assert.Contains(t, sh(t, s, "echo warm"), "warm")
	// Claimed: renamed out of the pool's names.
	require.Eventually(t, func() bool {
		return containerOf(t, s.ID()).Name == "/sandboxd-"+s.ID()
	}, 2*time.Minute, 20*time.Millisecond)
	// And the pool refills.
	require.Eventually(t, func() bool { return m.Pools()[0].Ready == 1 }, time.Minute, 20*time.Millisecond)

	// Other options do not take from the pool.
	other, err := m.Create(ctxT(t), sandbox.SessionOptions{Env: map[string]string{"X": "1"}})
	require.NoError(t, err)
	assert.Equal(t, 1, m.Pools()[0].Ready)
	require.NoError(t, other.Close(ctxT(t)))
}

func TestRestartAdoptsLiveSession(t *testing.T) {
	rt := newRuntime(t)
	ctx := ctxT(t)
	m1, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: testImage, Runtime: e2eRuntime}, Logger: logger()})
	require.NoError(t, err)
	live, err := m1.Create(ctx, sandbox.SessionOptions{IdleTimeout: time.Hour})
	require.NoError(t, err)
	sh(t, live, "cd /tmp; export X=1")
	dead, err := m1.Create(ctx, sandbox.SessionOptions{})
	require.NoError(t, err)
	require.NoError(t, m1.Shutdown(ctx, true)) // as if the daemon stopped
	assert.Equal(t, sandbox.StateClosed, live.State())
	assert.NotZero(t, sessionResources(t, live.ID()), "kept running")
	require.NoError(t, docker.ContainerKill(ctx, containerOf(t, dead.ID()).ID, "SIGKILL"))

	m2 := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m2.Get(live.ID())
	require.NoError(t, err, "the live session is adopted")
	assert.Equal(t, sandbox.StateReady, s.State())
	assert.Equal(t, time.Hour, s.Options().IdleTimeout, "options come back from the label")
	out := sh(t, s, "pwd; echo X=$X")
	assert.Contains(t, out, "/tmp")
	assert.Contains(t, out, "X=1", "shell state survived the restart")

	_, err = m2.Get(dead.ID())
	require.ErrorIs(t, err, sandbox.ErrNotFound)
	assert.Zero(t, sessionResources(t, dead.ID()), "the dead session was reaped")
	require.NoError(t, s.Close(ctx))
	assert.Zero(t, sessionResources(t, live.ID()))
}

func TestUploadDownloadRoundTrip(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)

	files := map[string]string{
		"proj/README.md":     "# hello\n",
		"proj/src/a.txt":     strings.Repeat("a", 300_000),
		"proj/src/deep/b.sh": "#!/bin/sh\necho b\n",
	}
	require.NoError(t, s.Upload(ctxT(t), "/workspace/in", makeTar(t, files)))
	out := sh(t, s, "cd /workspace/in/proj && find . -type f | sort && wc -c src/a.txt && ls -ln src/deep/b.sh")
	assert.Contains(t, out, "./src/deep/b.sh")
	assert.Contains(t, out, "300000 src/a.txt")
	assert.Contains(t, out, " 1000 ", "extracted as the session user")

	var buf strings.Builder
	require.NoError(t, s.Download(ctxT(t), "/workspace/in/proj", &buf))
	got := readTar(t, buf.String())
	for name, body := range files {
		assert.Equal(t, body, got[name], name)
	}

	// Transfers are confined to the workspace.
	require.Error(t, s.Download(ctxT(t), "/etc/passwd", &buf))
	assert.Error(t, s.Upload(ctxT(t), "/tmp", makeTar(t, map[string]string{"x": "y"})))
}

func TestContainerRemovedFromOutside(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	require.NoError(t, docker.ContainerRemove(ctxT(t), containerOf(t, s.ID()).ID, container.RemoveOptions{Force: true}))
	select {
	case <-s.Done():
	case <-time.After(2 * time.Minute):
		t.Fatal("session not marked failed after docker rm -f")
	}
	require.ErrorIs(t, s.Err(), sandbox.ErrFailed)
	t.Log("failure:", s.Err())
	_, err = s.Call(ctxT(t), "terminal", []byte(`{"command":"true"}`), nil)
	require.ErrorIs(t, err, sandbox.ErrFailed)
	require.NoError(t, s.Close(ctxT(t)), "closing what is half gone")
	assert.Zero(t, sessionResources(t, s.ID()), "its volume went too")
}
