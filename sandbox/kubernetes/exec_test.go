package kubernetes

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apihttpstream "k8s.io/apimachinery/pkg/util/httpstream" //nolint:staticcheck // SA1019: the deprecated package is what the test shows to be wrong
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	clientexec "k8s.io/client-go/util/exec"
	streaming "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	"k8s.io/streaming/pkg/httpstream"
	utilexec "k8s.io/utils/exec"

	"github.com/sandboxd/sandboxd/sandbox/kubernetes/kubetest"
)

// fakeContainer is an in-process Executor: a few commands that exercise
// the streams without Docker.
type fakeContainer struct {
	mu    sync.Mutex
	calls [][]string // name, container, then the command
	ended chan error // every ExecInContainer's return, in order
}

func newFakeContainer() *fakeContainer { return &fakeContainer{ended: make(chan error, 16)} }

func (f *fakeContainer) ExecInContainer(ctx context.Context, name, _ string, container string, cmd []string,
	in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan streaming.TerminalSize, _ time.Duration,
) (err error) {
	f.mu.Lock()
	f.calls = append(f.calls, append([]string{name, container}, cmd...))
	f.mu.Unlock()
	defer func() { f.ended <- err }()
	switch cmd[0] {
	case "cat": // stdin to stdout until EOF
		_, err := io.Copy(out, in)
		return err
	case "hello":
		_, err := io.WriteString(out, "hello\n")
		return err
	case "exit": // exit CODE MESSAGE: MESSAGE to stderr, exit CODE
		code, _ := strconv.Atoi(cmd[1])
		fmt.Fprintln(errw, cmd[2])
		return utilexec.CodeExitError{Err: fmt.Errorf("exit status %d", code), Code: code}
	case "spew": // spew N: N KiB on stderr ending in "the end", exit 3
		n, _ := strconv.Atoi(cmd[1])
		for range n {
			if _, err := errw.Write(bytes.Repeat([]byte("x"), 1024)); err != nil {
				return err
			}
		}
		fmt.Fprint(errw, "the end\n")
		return utilexec.CodeExitError{Err: errors.New("exit status 3"), Code: 3}
	}
	return fmt.Errorf("no such command %q", cmd[0])
}

func (f *fakeContainer) lastCall() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.calls) == 0 {
		return nil
	}
	return f.calls[len(f.calls)-1]
}

type execEnv struct {
	srv  *kubetest.ExecServer
	ctr  *fakeContainer
	exec ExecFunc
}

func newExecEnv(t *testing.T, mode serverMode) *execEnv {
	t.Helper()
	ctr := newFakeContainer()
	srv, err := kubetest.NewExecServer(ctr, func(ns, pod string) (string, error) {
		if pod == "missing" {
			return "", fmt.Errorf("pods %q not found", pod)
		}
		return "uid-" + pod, nil
	})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	srv.SetRefuseWebSocket(mode == refuse)
	srv.SetProxyWebSocket(mode == proxyWS)
	ex, err := NewExec(srv.RESTConfig())
	require.NoError(t, err)
	return &execEnv{srv: srv, ctr: ctr, exec: ex}
}

// A server mode of the exec tests: how the API-server endpoint treats a
// WebSocket request.
type serverMode int

const (
	translate serverMode = iota // v5 translated to SPDY for the kubelet, as kube-apiserver ≥ 1.30
	refuse                      // the upgrade refused (400)
	proxyWS                     // proxied untranslated: the kubelet's v1-v4 WebSocket server refuses v5
)

// protocols runs a test over the v5 WebSocket and over the SPDY fallback,
// with the upgrade refused by the endpoint or by the kubelet's legacy
// WebSocket server; check asserts the counts prove which one carried n
// calls.
func protocols(t *testing.T, f func(t *testing.T, env *execEnv, check func(n int64))) {
	for _, m := range []struct {
		name string
		mode serverMode
	}{{"websocket", translate}, {"spdy-fallback", refuse}, {"spdy-fallback-kubelet-refuses", proxyWS}} {
		t.Run(m.name, func(t *testing.T) {
			env := newExecEnv(t, m.mode)
			f(t, env, func(n int64) {
				t.Helper()
				want := map[serverMode]kubetest.ExecCounts{
					translate: {WebSocket: n, Kubelet: n},
					refuse:    {Refused: n, SPDY: n, Kubelet: n},
					proxyWS:   {Proxied: n, SPDY: n, Kubelet: 2 * n}, // the kubelet saw the refused WebSocket too
				}[m.mode]
				assert.Equal(t, want, env.srv.Counts())
			})
		})
	}
}

func wantProtocol(t *testing.T, rwc io.ReadWriteCloser, refused bool) {
	t.Helper()
	want := ProtocolWebSocket
	if refused {
		want = ProtocolSPDY
	}
	p, ok := rwc.(interface{ Protocol() string })
	require.True(t, ok, "the stream reports its protocol")
	assert.Equal(t, want, p.Protocol())
}

func TestExecRoundTrip(t *testing.T) {
	protocols(t, func(t *testing.T, env *execEnv, check func(int64)) {
		cmd := []string{"cat", "an arg with spaces", "ünï", "--flag=a&b", ""}
		rwc, err := env.exec(t.Context(), "ns-1", "sbx-abc", "agent", cmd)
		require.NoError(t, err)
		defer rwc.Close()
		c := env.srv.Counts()
		wantProtocol(t, rwc, c.Refused+c.Proxied > 0)

		// 1 MiB each way, in both directions at once.
		payload := make([]byte, 1<<20)
		_, _ = rand.Read(payload)
		got := make(chan []byte, 1)
		go func() {
			b, _ := io.ReadAll(rwc)
			got <- b
		}()
		for p := payload; len(p) > 0; {
			n := min(len(p), 7919)
			_, err := rwc.Write(p[:n])
			require.NoError(t, err)
			p = p[n:]
		}
		// Closing stdin ends cat; its stdout then ends with EOF, no error.
		require.NoError(t, rwc.(interface{ CloseWrite() error }).CloseWrite())
		b := <-got
		assert.True(t, bytes.Equal(payload, b), "echoed %d bytes of %d", len(b), len(payload))
		require.NoError(t, <-env.ctr.ended)
		assert.Equal(t, append([]string{"ns-1/sbx-abc", "agent"}, cmd...), env.ctr.lastCall(),
			"the command reaches the container argument for argument")
		_, err = rwc.Write([]byte("late"))
		require.Error(t, err, "a write after the command ended fails")
		require.NoError(t, rwc.Close())
		check(1)
	})
}

func TestExecCommandExits(t *testing.T) {
	protocols(t, func(t *testing.T, env *execEnv, check func(int64)) {
		rwc, err := env.exec(t.Context(), "ns", "pod", "agent", []string{"hello"})
		require.NoError(t, err)
		b, err := io.ReadAll(rwc)
		require.NoError(t, err, "exit 0 is EOF")
		assert.Equal(t, "hello\n", string(b))
		require.NoError(t, rwc.Close())

		rwc, err = env.exec(t.Context(), "ns", "pod", "agent", []string{"exit", "7", "agent: cannot reach socket"})
		require.NoError(t, err)
		_, err = io.ReadAll(rwc)
		require.Error(t, err)
		var exit clientexec.CodeExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, 7, exit.Code)
		assert.Contains(t, err.Error(), "ns/pod/agent")
		assert.Contains(t, err.Error(), "agent: cannot reach socket", "the error names the command's stderr")
		require.NoError(t, rwc.Close())
		check(2)
	})
}

func TestExecStderrBounded(t *testing.T) {
	protocols(t, func(t *testing.T, env *execEnv, check func(int64)) {
		rwc, err := env.exec(t.Context(), "ns", "pod", "agent", []string{"spew", "256"})
		require.NoError(t, err)
		_, err = io.ReadAll(rwc)
		var exit clientexec.CodeExitError
		require.ErrorAs(t, err, &exit)
		assert.Equal(t, 3, exit.Code)
		msg := err.Error()
		assert.Less(t, len(msg), MaxExecStderr+512, "256 KiB of stderr are cut to the last %d bytes", MaxExecStderr)
		assert.Contains(t, msg, "the end", "the tail is kept")
		assert.Contains(t, msg, "…", "the cut is marked")
		require.NoError(t, rwc.Close())
		check(1)
	})
}

func TestExecCloseEndsTheCommand(t *testing.T) {
	protocols(t, func(t *testing.T, env *execEnv, check func(int64)) {
		rwc, err := env.exec(t.Context(), "ns", "pod", "agent", []string{"cat"})
		require.NoError(t, err)
		_, err = rwc.Write([]byte("ping"))
		require.NoError(t, err)
		buf := make([]byte, 4)
		_, err = io.ReadFull(rwc, buf)
		require.NoError(t, err)
		require.NoError(t, rwc.Close())
		// The server side's command ends: its stdin went away.
		t.Logf("the command ended with %v", <-env.ctr.ended)
		_, err = rwc.Read(buf)
		require.ErrorIs(t, err, net.ErrClosed)
		_, err = rwc.Write(buf)
		require.ErrorIs(t, err, net.ErrClosed)
		require.NoError(t, rwc.Close(), "Close twice")
		check(1)
	})
}

func TestExecSetupErrors(t *testing.T) {
	protocols(t, func(t *testing.T, env *execEnv, check func(int64)) {
		// No such Pod: the WebSocket upgrade fails (404), so does SPDY's.
		_, err := env.exec(t.Context(), "ns", "missing", "agent", []string{"cat"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "not found")
		assert.Contains(t, err.Error(), "ns/missing/agent")

		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err = env.exec(ctx, "ns", "pod", "agent", []string{"cat"})
		require.ErrorIs(t, err, context.Canceled)
		_ = check
	})
}

func TestExecValidates(t *testing.T) {
	ex, err := NewExec(&rest.Config{Host: "https://127.0.0.1:1"})
	require.NoError(t, err)
	for _, c := range []struct {
		ns, pod, ctr string
		cmd          []string
		want         string
	}{
		{"", "p", "c", []string{"x"}, "namespace"},
		{"NS", "p", "c", []string{"x"}, "namespace"},
		{"ns", "", "c", []string{"x"}, "pod"},
		{"ns", "a/b", "c", []string{"x"}, "pod"},
		{"ns", "p", "", []string{"x"}, "container"},
		{"ns", "p", "c", nil, "empty command"},
		{"ns", "p", "c", []string{""}, "empty command"},
		{"ns", "p", "c", []string{"sh", "a\x00b"}, "NUL"},
	} {
		_, err := ex(t.Context(), c.ns, c.pod, c.ctr, c.cmd)
		require.Error(t, err, "%+v", c)
		assert.Contains(t, err.Error(), c.want)
	}
	var noCtx context.Context
	_, err = ex(noCtx, "ns", "p", "c", []string{"x"})
	require.Error(t, err)

	_, err = NewExec(nil)
	require.Error(t, err)
	_, err = NewExec(&rest.Config{})
	require.Error(t, err)
	_, err = NewExec(&rest.Config{Host: "https://h", BearerToken: "t", Username: "u", Password: "p"})
	require.Error(t, err, "a config the transports refuse fails at NewExec")
}

// TestUpgradeFailurePackages pins the pitfall NewExec avoids: client-go's
// WebSocket executor reports a refused upgrade with k8s.io/streaming's
// error type, which apimachinery's IsUpgradeFailure does not match (so a
// fallback decided with it never fires).
func TestUpgradeFailurePackages(t *testing.T) {
	env := newExecEnv(t, refuse)
	cfg := env.srv.RESTConfig()
	u := cfg.Host + "/api/v1/namespaces/ns/pods/pod/exec?container=agent&command=cat&stdin=true&stdout=true"
	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u)
	require.NoError(t, err)
	err = ws.StreamWithContext(t.Context(), remotecommand.StreamOptions{Stdin: strings.NewReader(""), Stdout: io.Discard})
	require.Error(t, err)
	assert.True(t, httpstream.IsUpgradeFailure(err), "k8s.io/streaming matches: %v", err)
	assert.False(t, apihttpstream.IsUpgradeFailure(err), "apimachinery's does not match: %v", err)
	assert.Equal(t, kubetest.ExecCounts{Refused: 1}, env.srv.Counts())
}

func TestTailBuffer(t *testing.T) {
	var b tailBuffer
	assert.Empty(t, b.String())
	_, _ = b.Write([]byte("  short  \n"))
	assert.Equal(t, "short", b.String())
	_, _ = b.Write(bytes.Repeat([]byte("a"), MaxExecStderr-3))
	_, _ = b.Write([]byte("END"))
	s := b.String()
	assert.True(t, strings.HasPrefix(s, "…"))
	assert.True(t, strings.HasSuffix(s, "aEND"))
	assert.Len(t, b.buf, MaxExecStderr)
	_, _ = b.Write(bytes.Repeat([]byte("z"), 3*MaxExecStderr))
	assert.Equal(t, "…"+strings.Repeat("z", MaxExecStderr), b.String())
}
