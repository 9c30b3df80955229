package api

// Faults not tried before (issue 11, item 6), each checked on the host
// through the real engine: the engine unreachable for a while, an MCP client
// that never ends its session, and a graceful shutdown under load.
//
// The engine outage is a unix-socket proxy in front of the machine's engine
// that the test cuts (listener and every live connection closed, the socket
// file gone: what a restarting engine looks like to its clients) and
// restores; the daemon under test reaches the engine only through it. The
// machine's engine itself is never touched.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/sandboxmgr"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/tools"
)

// hangBound is what "fails within seconds, never hangs" is held to.
const hangBound = 30 * time.Second

// engineProxy forwards connections on a unix socket of its own to the
// machine's engine; cut makes the engine unreachable, restore brings it
// back on the same path.
type engineProxy struct {
	path, target string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func startEngineProxy(t *testing.T) *engineProxy {
	t.Helper()
	host := engine.DaemonHost()
	target, ok := strings.CutPrefix(host, "unix://")
	if !ok {
		t.Skipf("the engine is at %s, not on a unix socket", host)
	}
	dir, err := os.MkdirTemp("", "sbxf-") // short: a socket path has ~100 bytes
	if err != nil {
		t.Fatal(err)
	}
	p := &engineProxy{path: filepath.Join(dir, "engine.sock"), target: target, conns: map[net.Conn]struct{}{}}
	p.restore()
	t.Cleanup(func() {
		p.cut()
		p.wg.Wait()
		os.RemoveAll(dir)
	})
	return p
}

// host is the DOCKER_HOST of the proxy.
func (p *engineProxy) host() string { return "unix://" + p.path }

// restore listens again (a no-op while listening).
func (p *engineProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		return
	}
	ln, err := net.Listen("unix", p.path)
	if err != nil {
		panic(fmt.Sprintf("engine proxy: %v", err))
	}
	p.ln = ln
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if !p.track(c, ln) {
				c.Close()
				continue
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.forward(c, ln)
			}()
		}
	}()
}

// track records a live connection, unless its listener was cut meanwhile.
func (p *engineProxy) track(c net.Conn, ln net.Listener) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != ln {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *engineProxy) forward(c net.Conn, ln net.Listener) {
	defer c.Close()
	e, err := net.Dial("unix", p.target)
	if err != nil {
		return
	}
	if !p.track(e, ln) {
		e.Close()
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(e, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, e); done <- struct{}{} }()
	<-done // either side ended: end both (hijacked streams are not half-closed politely)
	c.Close()
	e.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, e)
	p.mu.Unlock()
}

// cut closes the listener (its socket file goes with it) and every live
// connection, both sides.
func (p *engineProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// faultServer is an in-process server as startServer makes it, with its own
// scope label, whose runtime reaches the engine through an engineProxy.
type faultServer struct {
	*harnessServer
	proxy *engineProxy
}

func startFaultServer(t *testing.T, mset func(*sandbox.ManagerOptions), sset func(*server.Options)) *faultServer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p := startEngineProxy(t)
	cli, err := dockerclient.NewClientWithOpts(dockerclient.WithHost(p.host()), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	scope := auth.NewToken()[:12]
	rt, err := docker.New(ctx, docker.Options{Client: cli, AgentBinary: binary, Logger: slog.Default(),
		Labels: map[string]string{labelRun: runID, labelTest: scope}})
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	mopts := sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: testImage}, Logger: slog.Default()}
	if mset != nil {
		mset(&mopts)
	}
	m, err := sandbox.NewManager(ctx, rt, mopts)
	if err != nil {
		cli.Close()
		t.Fatal(err)
	}
	token := auth.NewToken()
	opts := server.Options{
		Backend: sandboxmgr.New(m), OperatorToken: token, StateDir: t.TempDir(),
		MCPImage: testImage, Logger: slog.Default(),
	}
	if sset != nil {
		sset(&opts)
	}
	srv, err := server.New(opts)
	if err != nil {
		sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
		defer scancel()
		_ = m.Shutdown(sctx, false)
		cli.Close()
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	var once sync.Once
	var shutErr error
	shutdown := func() error {
		once.Do(func() {
			p.restore() // whatever the test did, the sessions must be removable
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			shutErr = srv.Shutdown(ctx)
			hs.CloseClientConnections()
			hs.Close()
			cli.Close()
		})
		return shutErr
	}
	t.Cleanup(func() {
		if err := shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &faultServer{
		harnessServer: &harnessServer{
			apiServer: &apiServer{Server: srv, http: hs, token: token, base: hs.URL,
				ws: "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/ws", manager: m},
			scope: scope, shutdown: shutdown,
		},
		proxy: p,
	}
}

// counts is what the engine holds of this server, read through the
// machine's engine (not the proxy).
func (s *harnessServer) counts(t *testing.T) (ctrs, vols, nets int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, v, n, err := s.resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return len(c), len(v), len(n)
}

// waitNothingLeft waits (bounded) until the engine holds nothing of s.
func (s *harnessServer) waitNothingLeft(t *testing.T, what string) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for {
		c, v, n := s.counts(t)
		if c+v+n == 0 {
			return
		}
		if time.Now().After(deadline) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			cs, vs, ns, _ := s.resources(ctx)
			t.Fatalf("%s: left in the engine: containers %v, volumes %v, networks %v", what, cs, vs, ns)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// timed runs f and fails the test if it took longer than bound.
func timed(t *testing.T, what string, bound time.Duration, f func() error) error {
	t.Helper()
	start := time.Now()
	err := f()
	if d := time.Since(start); d > bound {
		t.Errorf("%s took %v (bound %v): a hang", what, d.Round(time.Millisecond), bound)
	}
	return err
}

// mentionsEngine reports whether an error says the container engine is
// the trouble.
func mentionsEngine(err error) bool {
	s := strings.ToLower(err.Error())
	return strings.Contains(s, "engine") || strings.Contains(s, "docker daemon")
}

// term runs a terminal command in sess (bounded).
func term(ctx context.Context, sess *client.Session, cmd string) (*tools.Observation, error) {
	ctx, cancel := context.WithTimeout(ctx, hangBound)
	defer cancel()
	return sess.Call(ctx, "terminal", map[string]any{"command": cmd}, nil)
}

// The engine goes away for a few seconds (a restart): creates and calls
// fail within seconds with an error that names the engine, a call in flight
// returns, and when the engine is back the live sessions come back with
// their shell state (reconnected through agent-proxy); then everything is
// removed.
func TestEngineOutageSessionsComeBack(t *testing.T) {
	t.Parallel()
	s := startFaultServer(t, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 2
	sessions := make([]*client.Session, n)
	for i := range sessions {
		if sessions[i], err = c.CreateSession(ctx, client.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		obs, err := term(ctx, sessions[i], fmt.Sprintf("cd /tmp && export FAULT_I=%d", i))
		if err := expect(obs, err, shellText("", "/tmp")); err != nil {
			t.Fatal(err)
		}
	}
	if ctrs, _, _ := s.counts(t); ctrs != n {
		t.Fatalf("%d containers, want %d", ctrs, n)
	}

	// A call in flight when the engine goes.
	inflight := make(chan error, 1)
	started := make(chan struct{})
	var once sync.Once
	go func() {
		cctx, ccancel := context.WithTimeout(ctx, 2*hangBound)
		defer ccancel()
		_, err := sessions[0].Call(cctx, "terminal", map[string]any{"command": "echo sleeping; sleep 60"}, func(b []byte) {
			if strings.Contains(string(b), "sleeping") {
				once.Do(func() { close(started) })
			}
		})
		inflight <- err
	}()
	select {
	case <-started:
	case <-ctx.Done():
		t.Fatal("the long call did not start")
	}

	s.proxy.cut()
	cutAt := time.Now()
	select {
	case err := <-inflight:
		if err == nil {
			t.Error("the call in flight when the engine went succeeded")
		} else {
			t.Logf("call in flight: %v (after %v)", err, time.Since(cutAt).Round(time.Millisecond))
		}
	case <-time.After(hangBound):
		t.Fatalf("the call in flight did not return within %v of the engine going", hangBound)
	}
	err = timed(t, "a create while the engine is away", hangBound, func() error {
		_, err := c.CreateSession(ctx, client.CreateOptions{})
		return err
	})
	if err == nil || !mentionsEngine(err) {
		t.Errorf("a create while the engine is away: %v, want an error naming the engine", err)
	} else {
		t.Logf("create: %v", err)
	}
	err = timed(t, "a call while the engine is away", hangBound, func() error {
		_, err := term(ctx, sessions[1], "echo hello")
		return err
	})
	if err == nil || !mentionsEngine(err) {
		t.Errorf("a call while the engine is away: %v, want an error naming the engine", err)
	} else {
		t.Logf("call: %v", err)
	}
	if d := time.Since(cutAt); d < 3*time.Second {
		time.Sleep(3*time.Second - d)
	}

	s.proxy.restore()
	restoredAt := time.Now()
	for i, sess := range sessions {
		// The first call that goes through. Session 0's agent still runs
		// the call cut off (its stdin stays open in the engine, so the
		// agent never saw that stream end): the terminal is busy until that
		// call's soft timeout (10 s without output), then the sleep still
		// runs in the shell and gets a C-c.
		args := map[string]any{"command": "true"}
		if i == 0 {
			args = map[string]any{"command": "C-c", "is_input": true, "timeout": 2}
		}
		for {
			cctx, ccancel := context.WithTimeout(ctx, hangBound)
			obs, err := sess.Call(cctx, "terminal", args, nil)
			ccancel()
			if err == nil && strings.HasPrefix(obs.Text(), "Another terminal call is still in flight") {
				err = errors.New(obs.Text())
			}
			if err == nil {
				break
			}
			if time.Since(restoredAt) > hangBound {
				t.Fatalf("session %d did not come back within %v of the engine: %v", i, hangBound, err)
			}
			time.Sleep(250 * time.Millisecond)
		}
		obs, err := term(ctx, sess, `echo "back $FAULT_I $(pwd)"`)
		if err := expect(obs, err, shellText(fmt.Sprintf("back %d /tmp\n", i), "/tmp")); err != nil {
			t.Fatalf("session %d after the engine came back (its shell state kept): %v", i, err)
		}
	}
	t.Logf("sessions back %v after the engine", time.Since(restoredAt).Round(time.Millisecond))
	if _, err := c.CreateSession(ctx, client.CreateOptions{}); err != nil {
		t.Fatalf("a create after the engine came back: %v", err)
	}
	if ctrs, _, _ := s.counts(t); ctrs != n+1 {
		t.Errorf("%d containers after the engine came back, want %d (nothing leaked by the failed create)", ctrs, n+1)
	}
	if err := s.shutdown(); err != nil {
		t.Fatal(err)
	}
	s.waitNothingLeft(t, "after shutdown")
}

