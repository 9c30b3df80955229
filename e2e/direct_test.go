package e2e

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
)

// directLeftovers lists the session folders left under dir (a runtime's
// folders are <dir>/<scope>/<session>) and removes them.
func directLeftovers(dir string) []string {
	var left []string
	scopes, _ := os.ReadDir(dir)
	for _, sc := range scopes {
		sessions, _ := os.ReadDir(filepath.Join(dir, sc.Name()))
		for _, s := range sessions {
			p := filepath.Join(dir, sc.Name(), s.Name())
			left = append(left, p)
			_ = os.RemoveAll(p)
		}
	}
	return left
}

// directConns returns the descriptors of this process (the daemon) that
// are the daemon's end of a direct connection to the agent of session id:
// sockets bound to a direct socket's name whose peer is a process of the
// sandbox (in the pid namespace of the container's main process).
func directConns(t *testing.T, id string) []int {
	t.Helper()
	pid := containerOf(t, id).State.Pid
	require.NotZero(t, pid)
	pidns := func(pid int) string {
		ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid))
		if err != nil {
			return "none of " + strconv.Itoa(pid)
		}
		return ns
	}
	want := pidns(pid)
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	var fds []int
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cred, err := unix.GetsockoptUcred(fd, unix.SOL_SOCKET, unix.SO_PEERCRED)
		if err != nil || pidns(int(cred.Pid)) != want {
			continue
		}
		sa, err := unix.Getsockname(fd)
		if ua, ok := sa.(*unix.SockaddrUnix); err == nil && ok && strings.Contains(ua.Name, "/d-") {
			fds = append(fds, fd)
		}
	}
	return fds
}

func directFolder(t *testing.T, rt *sdocker.Runtime, id string) string {
	t.Helper()
	dir := rt.DirectFolder(id)
	require.NotEmpty(t, dir)
	require.True(t, strings.HasPrefix(dir, directDir+string(filepath.Separator)), dir)
	return dir
}

// A session's calls go over the direct path: a connection of the daemon's
// whose peer is the agent, through the session's read-only folder, which
// holds no socket once the path is up, and which Close removes.
func TestDirectPathUsed(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t)
	on, why := rt.DirectOn()
	require.True(t, on, "direct path off: %v", why)
	m := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)

	assert.True(t, s.Direct(), "the session calls over the direct path")
	assert.Len(t, directConns(t, s.ID()), 1, "one connection of the daemon's to the agent over the direct path")
	dir := directFolder(t, rt, s.ID())
	fi, err := os.Lstat(dir)
	require.NoError(t, err)
	assert.True(t, fi.IsDir())
	assert.Equal(t, fs.FileMode(0o711), fi.Mode().Perm())
	parent, err := os.Lstat(filepath.Dir(dir))
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o700), parent.Mode().Perm(), "the folders above are the daemon's alone")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents, "the listener is closed and unlinked once the agent's connection is accepted")
	var mounted bool
	for _, mt := range containerOf(t, s.ID()).Mounts {
		if mt.Destination == sandbox.DirectDir {
			mounted = true
			assert.Equal(t, dir, mt.Source)
			assert.False(t, mt.RW, "read-only in the sandbox")
		}
	}
	assert.True(t, mounted, "the folder is mounted at %s", sandbox.DirectDir)

	out := sh(t, s, "echo hi-$((6*7)); ls "+sandbox.DirectDir+" 2>&1; touch "+sandbox.DirectDir+"/x 2>&1; echo end")
	assert.Contains(t, out, "hi-42")
	assert.Contains(t, out, "Permission denied", "the sandbox cannot list its folder")
	assert.NotContains(t, out, "No such file", "the folder is there")

	require.NoError(t, s.Close(ctxT(t)))
	_, err = os.Lstat(dir)
	assert.ErrorIs(t, err, fs.ErrNotExist, "the session's folder is removed with it")
}

// Breaking the direct connection fails the call in flight on it with the
// error of a broken stream, and later calls go over the attach stream.
func TestDirectPathFallback(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t)
	m := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	require.True(t, s.Direct())

	done := make(chan error, 1)
	go func() {
		_, err := tryCall(ctxT(t), s, "terminal", map[string]any{"command": "touch /tmp/started; sleep 60", "timeout": 90})
		done <- err
	}()
	require.Eventually(t, func() bool {
		obs, err := tryCall(ctxT(t), s, "file_editor", map[string]any{"command": "view", "path": "/tmp/started"})
		return err == nil && !obs.IsError
	}, 2*time.Minute, 100*time.Millisecond, "the long call runs")

	fds := directConns(t, s.ID())
	require.Len(t, fds, 1)
	require.NoError(t, unix.Shutdown(fds[0], unix.SHUT_RDWR))

	select {
	case err := <-done:
		require.Error(t, err)
		require.ErrorIs(t, err, proto.ErrDisconnected, "the call in flight fails as on a broken stream")
	case <-time.After(2 * time.Minute):
		t.Fatal("the call in flight did not end with its connection")
	}
	assert.False(t, s.Direct(), "calls go over the attach stream now")
	assert.Equal(t, sandbox.StateReady, s.State())
	assert.Contains(t, sh(t, s, "echo back-$((40+2))"), "back-42")
	assert.Contains(t, call(t, s, "file_editor", map[string]any{"command": "view", "path": "/tmp/started"}), "/tmp/started")
	assert.Empty(t, directConns(t, s.ID()))
	require.NoError(t, s.Close(ctxT(t)))
}

// helloBytes is a direct/hello frame with token, as printf octal escapes.
func helloBytes(token string) string {
	body, _ := json.Marshal(map[string]any{"method": proto.MethodDirectHello, "params": map[string]string{"token": token}})
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	frame = append(frame, body...)
	var b strings.Builder
	for _, c := range frame {
		fmt.Fprintf(&b, `\%03o`, c)
	}
	return b.String()
}

// Connections made from inside the sandbox to a listening direct socket
// are dropped unless they present the token: none, a wrong one, a bad
// header. The one that presents it is accepted (so the socket is
// reachable, and the check is the token).
func TestDirectPathTokenCheck(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t)
	m := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)

	ln, path, err := rt.ListenDirect(s.ID())
	require.NoError(t, err)
	token, err := agentclient.NewDirectToken()
	require.NoError(t, err)
	wrong, err := agentclient.NewDirectToken()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(ctxT(t), 60*time.Second)
	defer cancel()
	type result struct {
		ok  bool
		err error
	}
	got := make(chan result, 1)
	go func() {
		nc, err := agentclient.AcceptDirect(ctx, ln, token)
		if nc != nil {
			nc.Close()
		}
		got <- result{nc != nil, err}
	}()

	// Each hostile client keeps its input open for 60 s: it ends before
	// that only if the daemon hangs up on it.
	proxy := sandbox.AgentPath + " agent-proxy --socket " + path
	hostile := map[string]string{
		"none":   "sleep 60",
		"wrong":  "printf '" + helloBytes(wrong) + "'; sleep 60",
		"header": `printf '\377\377\377\377'; sleep 60`,
	}
	for name, input := range hostile {
		sh(t, s, fmt.Sprintf("( %s ) | ( %s >/dev/null 2>&1; echo ended > /tmp/%s.log ) >/dev/null 2>&1 &", input, proxy, name))
	}
	for name := range hostile {
		require.Eventually(t, func() bool {
			return strings.Contains(sh(t, s, "cat /tmp/"+name+".log"), "ended")
		}, 2*time.Minute, 250*time.Millisecond, "the %s connection is dropped", name)
	}
	select {
	case r := <-got:
		t.Fatalf("a hostile connection was accepted: %+v", r)
	default:
	}

	sh(t, s, fmt.Sprintf("( printf '%s'; sleep 60 ) | %s >/dev/null 2>&1 &", helloBytes(token), proxy))
	r := <-got
	require.NoError(t, r.err)
	assert.True(t, r.ok, "the connection with the token is accepted")
	require.NoError(t, ln.Close())
	ents, err := os.ReadDir(directFolder(t, rt, s.ID()))
	require.NoError(t, err)
	assert.Empty(t, ents, "the socket is unlinked")
	require.NoError(t, s.Close(ctxT(t)))
}

// Code in the sandbox cannot plant anything in its folder (a symlink to a
// host file there would be followed by nothing anyway: the daemon never
// dials a path), and a daemon restart offers a new direct path that works;
// closing the session removes its folder and nothing the sandbox named.
func TestDirectPathAdoptionAndSymlinks(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t)
	ctx := ctxT(t)
	canary := filepath.Join(t.TempDir(), "canary")
	require.NoError(t, os.WriteFile(canary, []byte("keep"), 0o600))

	m1, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: testImage, Runtime: e2eRuntime}, Logger: logger()})
	require.NoError(t, err)
	live, err := m1.Create(ctx, sandbox.SessionOptions{IdleTimeout: time.Hour})
	require.NoError(t, err)
	require.True(t, live.Direct())
	dead, err := m1.Create(ctx, sandbox.SessionOptions{})
	require.NoError(t, err)
	deadDir := directFolder(t, rt, dead.ID())

	out := sh(t, live, strings.Join([]string{
		"ln -s " + canary + " " + sandbox.DirectDir + "/evil 2>&1",
		"ln -s /var/run/docker.sock " + sandbox.DirectDir + "/d-0.sock 2>&1",
		"mv " + sandbox.DirectDir + " " + sandbox.RunDir + "/moved 2>&1",
		"rmdir " + sandbox.DirectDir + " 2>&1",
		"ln -s " + canary + " /workspace/d-1.sock",
		"echo planted",
	}, "; "))
	assert.Contains(t, out, "planted")
	liveDir := directFolder(t, rt, live.ID())
	ents, err := os.ReadDir(liveDir)
	require.NoError(t, err)
	assert.Empty(t, ents, "nothing planted in the folder: %s", out)

	require.NoError(t, m1.Shutdown(ctx, true)) // as if the daemon stopped
	require.NoError(t, docker.ContainerKill(ctx, containerOf(t, dead.ID()).ID, "SIGKILL"))
	_, err = os.Lstat(liveDir)
	require.NoError(t, err, "a kept session keeps its folder (its container mounts it)")

	m2 := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m2.Get(live.ID())
	require.NoError(t, err, "adopted")
	assert.True(t, s.Direct(), "the new daemon offers a new direct path")
	assert.Len(t, directConns(t, s.ID()), 1)
	assert.Contains(t, sh(t, s, "echo adopted-$((40+2))"), "adopted-42")
	_, err = os.Lstat(deadDir)
	require.ErrorIs(t, err, fs.ErrNotExist, "the dead session's folder is reclaimed")

	require.NoError(t, s.Close(ctx))
	_, err = os.Lstat(liveDir)
	require.ErrorIs(t, err, fs.ErrNotExist)
	b, err := os.ReadFile(canary)
	require.NoError(t, err)
	assert.Equal(t, "keep", string(b))
}

// With the direct path off, sessions get no folder and call over the
// attach stream.
func TestDirectPathOff(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, func(o *sdocker.Options) { o.NoDirect = true })
	on, why := rt.DirectOn()
	require.False(t, on)
	require.Error(t, why)
	m := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	assert.False(t, s.Direct())
	_, err = os.Lstat(rt.DirectFolder(s.ID()))
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, _, err = rt.ListenDirect(s.ID())
	require.ErrorIs(t, err, sandbox.ErrNoDirect)
	assert.Contains(t, sh(t, s, "echo off-$((40+2))"), "off-42")
	require.NoError(t, s.Close(ctxT(t)))
}
