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
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/daemon"
	"github.com/sandboxd/sandboxd/tools"
)

// hangBound is what "fails within seconds, never hangs" is held to.
const hangBound = 2 * time.Minute

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
	p := startEngineProxy(t)
	cli, err := dockerclient.NewClientWithOpts(dockerclient.WithHost(p.host()), dockerclient.WithAPIVersionNegotiation())
	if err != nil {
		t.Fatal(err)
	}
	scope := auth.NewToken()[:12]
	d := newDaemon(t, func(c *daemon.Config) {
		c.DockerClient = cli
		c.Labels[labelTest] = scope
		// The engine's attach stream, which this suite cuts: over the
		// direct path a call would not need the engine at all.
		c.Direct = false
		c.ManagerHook, c.ServerHook = mset, sset
	})
	// Whatever the test did to the engine, the sessions must be removable.
	hs, shutdown := serveHTTP(t, d, p.restore, func() { cli.Close() })
	return &faultServer{
		harnessServer: &harnessServer{
			apiServer: &apiServer{Server: d.Server, http: hs, token: d.Token, base: hs.URL,
				ws: "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/ws", manager: d.Manager},
			scope: scope, shutdown: shutdown,
		},
		proxy: p,
	}
}

// counts is what the engine holds of this server, read through the
// machine's engine (not the proxy).
func (s *harnessServer) counts(t *testing.T) (ctrs, vols, nets int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	c := dialGoClient(t, ctx, s.apiServer)
	const n = 2
	var err error
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

// The engine stays away longer than the manager waits for it: the session
// fails with a reason naming the engine, and once the engine is back its
// container and volumes are removed (the removal is retried).
func TestEngineOutageLongerThanWaitFails(t *testing.T) {
	t.Parallel()
	const wait = 2 * time.Second
	s := startFaultServer(t, func(o *sandbox.ManagerOptions) { o.EngineOutage = wait }, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := dialGoClient(t, ctx, s.apiServer)
	sess, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ctrs, vols, _ := s.counts(t); ctrs != 1 || vols == 0 {
		t.Fatalf("%d containers and %d volumes, want 1 and some", ctrs, vols)
	}

	s.proxy.cut()
	cutAt := time.Now()
	select {
	case <-sess.Done():
	case <-time.After(hangBound):
		t.Fatalf("the session did not end within %v of an engine away longer than %v", hangBound, wait)
	}
	if d := time.Since(cutAt); d < wait {
		t.Errorf("the session ended %v after the engine went, before the %v it waits", d, wait)
	}
	if r := sess.Reason(); !strings.Contains(r, "engine") {
		t.Errorf("the session ended with %q, want a reason naming the engine", r)
	} else {
		t.Logf("ended: %s", r)
	}
	err = timed(t, "a call on the failed session", hangBound, func() error {
		_, err := term(ctx, sess, "true")
		return err
	})
	if err == nil {
		t.Error("a call on the failed session succeeded")
	}
	if ctrs, _, _ := s.counts(t); ctrs != 1 {
		t.Fatalf("%d containers while the engine is away, want the 1 that could not be removed yet", ctrs)
	}

	s.proxy.restore()
	s.waitNothingLeft(t, "after the engine came back") // nothing else closes it: the retried removal does
}

// An MCP client that never ends its session and sends nothing more (no
// keepalive): its sandbox is removed at the MCP session timeout. The same
// for a sandbox a 2026-07-28 client opened by handle and left.
func TestMCPClientNeverEndsItsSession(t *testing.T) {
	t.Parallel()
	const idle = 2 * time.Second
	s := startFaultServer(t, nil, func(o *server.Options) { o.MCPSessionTimeout = idle })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	waitGone := func(what string, since time.Time) {
		t.Helper()
		for {
			ctrs, vols, nets := s.counts(t)
			if ctrs+vols+nets == 0 {
				break
			}
			if time.Since(since) > hangBound {
				t.Fatalf("%s: %d containers, %d volumes, %d networks %v after the last request (timeout %v)", what, ctrs, vols, nets, time.Since(since), idle)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if d := time.Since(since); d < idle-500*time.Millisecond {
			t.Fatalf("%s: removed %v after the last request, before the timeout %v", what, d, idle)
		}
	}

	legacy := connectGoSDK(ctx, t, s.apiServer, legacyVersion) // KeepAlive unset: no pings
	t.Cleanup(func() { _ = legacy.close() })
	res := mustOK(ctx, t, legacy, "terminal", map[string]any{"command": "echo hi"})
	last := time.Now()
	if !strings.Contains(res.text, "hi") {
		t.Fatalf("terminal: %q", res.text)
	}
	if ctrs, _, _ := s.counts(t); ctrs != 1 {
		t.Fatalf("%d containers for one MCP session, want 1", ctrs)
	}
	waitGone("a 2025-11-25 session never ended", last)

	stateless := connectGoSDK(ctx, t, s.apiServer, "")
	t.Cleanup(func() { _ = stateless.close() })
	h := openSandbox(ctx, t, stateless, idle)
	last = time.Now()
	if ctrs, _, _ := s.counts(t); ctrs != 1 {
		t.Fatalf("%d containers for one handle, want 1", ctrs)
	}
	waitGone("a 2026-07-28 handle never closed", last)
	res = mustCall(ctx, t, stateless, "terminal", withHandle(h, map[string]any{"command": "true"}))
	if !res.isError || !strings.HasPrefix(res.text, "unknown sandbox") {
		t.Errorf("a call on the expired handle: isError=%v %q", res.isError, res.text)
	}
}

// Shutdown under load: eight sessions, each with a call running; the short
// calls finish with their results during the drain, the long ones are
// cancelled with a clear error when it ends, Shutdown returns in bounded
// time and nothing of the server is left in the engine.
func TestShutdownUnderLoad(t *testing.T) {
	t.Parallel()
	const (
		n     = 8
		drain = 4 * time.Second
	)
	s := startFaultServer(t, nil, func(o *server.Options) { o.DrainTimeout = drain })
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	sessions := make([]*client.Session, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
			if err != nil {
				errs[i] = err
				return
			}
			t.Cleanup(func() { c.Close() })
			sessions[i], errs[i] = c.CreateSession(ctx, client.CreateOptions{})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if ctrs, _, _ := s.counts(t); ctrs != n {
		t.Fatalf("%d containers, want %d", ctrs, n)
	}

	type result struct {
		obs *tools.Observation
		err error
		at  time.Time
	}
	results := make([]chan result, n)
	started := make(chan int, n)
	long := func(i int) bool { return i%2 == 1 }
	for i, sess := range sessions {
		results[i] = make(chan result, 1)
		cmd := fmt.Sprintf("echo started; sleep 2; echo short-%d", i)
		if long(i) {
			cmd = "echo started; sleep 30; echo long"
		}
		go func() {
			var once sync.Once
			obs, err := sess.Call(ctx, "terminal", map[string]any{"command": cmd, "timeout": 60}, func(b []byte) {
				if strings.Contains(string(b), "started") {
					once.Do(func() { started <- i })
				}
			})
			results[i] <- result{obs, err, time.Now()}
		}()
	}
	for range n {
		select {
		case <-started:
		case <-ctx.Done():
			t.Fatal("the calls did not all start")
		}
	}

	begun := time.Now()
	shutErr := make(chan error, 1)
	go func() { shutErr <- s.shutdown() }()
	for i := range sessions {
		var r result
		select {
		case r = <-results[i]:
		case <-time.After(drain + hangBound):
			t.Fatalf("call %d did not return within %v of the shutdown", i, drain+hangBound)
		}
		d := r.at.Sub(begun)
		if !long(i) {
			if err := expect(r.obs, r.err, shellText(fmt.Sprintf("started\nshort-%d\n", i), "/workspace")); err != nil {
				t.Errorf("short call %d during the drain: %v", i, err)
			}
			if d > drain {
				t.Errorf("short call %d returned %v after the shutdown began, after the drain (%v)", i, d, drain)
			}
			continue
		}
		if r.err == nil {
			t.Errorf("long call %d was not cancelled: %q", i, r.obs.Text())
			continue
		}
		if msg := r.err.Error(); !strings.Contains(msg, "cancelled") || !strings.Contains(msg, "shutting down") {
			t.Errorf("long call %d: %v, want an error saying it was cancelled by the shutdown", i, r.err)
		}
		if d < drain-time.Second || d > drain+hangBound {
			t.Errorf("long call %d cancelled %v after the shutdown began (drain %v)", i, d, drain)
		}
		if i == 1 {
			t.Logf("long call: %v (after %v)", r.err, d.Round(time.Millisecond))
		}
	}
	select {
	case err := <-shutErr:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(drain + hangBound):
		t.Fatalf("Shutdown did not return within %v", drain+hangBound)
	}
	t.Logf("shutdown took %v (drain %v)", time.Since(begun).Round(time.Millisecond), drain)
	if d := time.Since(begun); d > drain+hangBound {
		t.Errorf("shutdown took %v", d)
	}
	if ctrs, vols, nets := s.counts(t); ctrs+vols+nets != 0 {
		t.Errorf("after Shutdown returned: %d containers, %d volumes, %d networks left", ctrs, vols, nets)
	}
}
