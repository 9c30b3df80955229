package api

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

// The hostile MCP server (e2e/evilmcp) attacks of issue 21
// (../shared/reference/attacks-2026-11b.md, M5-M14, K12), each played
// through a client's session.create against a real serve, while the test
// watches the daemon: its memory (VmRSS), goroutines (/metrics) and log
// bytes (at info, as in the attack run), and another session's echo.

// evilImage is e2e/evilmcp, built by images/build-sidecar-images.sh.
const evilImage = "sandboxd-mcp-evil:latest"

// daemonWatch samples a serve process until stopped and keeps the peaks.
type daemonWatch struct {
	t     *testing.T
	rig   *sidecarRig
	limit func(rssMiB float64) // called with each sample (aborts a runaway attack)

	baseRSS, baseGo, baseLog float64

	mu                  sync.Mutex
	peakRSS, peakGo     float64
	lastLog             float64
	stopOnce            sync.Once
	stop, done          chan struct{}
	victimMS            []float64 // another session's echo, each call
	victimBaseMS        float64   // its median before the attack
	victimErrs          []string
	victim              *client.Session
	victimStop, victimD chan struct{}
}

// rssMiB is the serve process's VmRSS.
func (r *sidecarRig) rssMiB(t *testing.T) float64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", r.serve.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb / 1024
		}
	}
	t.Fatal("no VmRSS in /proc/PID/status")
	return 0
}

// goroutines is go_goroutines of serve's /metrics.
func (r *sidecarRig) goroutines(t *testing.T) float64 {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, r.base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+r.token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Errorf("/metrics: %v", err)
		return -1
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "go_goroutines "); ok {
			n, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no go_goroutines in /metrics")
	return 0
}

// watchDaemon starts sampling serve every 100 ms, and a victim session
// that runs `echo` through its terminal every 200 ms.
func watchDaemon(ctx context.Context, t *testing.T, rig *sidecarRig) *daemonWatch {
	t.Helper()
	victim, err := rig.c.CreateSession(ctx, client.CreateOptions{Image: testImage})
	if err != nil {
		t.Fatal(err)
	}
	w := &daemonWatch{t: t, rig: rig, stop: make(chan struct{}), done: make(chan struct{}),
		victim: victim, victimStop: make(chan struct{}), victimD: make(chan struct{})}
	// The victim's echo before the attack, on this machine as loaded as
	// it is now: the bound during the attack is relative to it.
	var base []float64
	for range 5 {
		began := time.Now()
		obs, err := victim.Call(ctx, "terminal", map[string]any{"command": "echo victim-ok"}, nil)
		if err != nil || obs.IsError {
			t.Fatalf("the victim's echo before the attack: %v %v", err, obs)
		}
		base = append(base, float64(time.Since(began).Microseconds())/1000)
	}
	slices.Sort(base)
	w.victimBaseMS = base[len(base)/2]
	w.baseRSS, w.baseGo, w.baseLog = rig.rssMiB(t), rig.goroutines(t), float64(len(rig.serve.logs()))
	w.peakRSS, w.peakGo, w.lastLog = w.baseRSS, w.baseGo, w.baseLog
	t.Logf("daemon before: RSS %.1f MiB, %v goroutines, %v log bytes; victim echo median %.1f ms", w.baseRSS, w.baseGo, w.baseLog, w.victimBaseMS)
	// A test that fails before it calls end still stops the sampling: a
	// sample that fails after the test returned panics the whole binary.
	t.Cleanup(w.end)
	go func() {
		defer close(w.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			rss, g := rig.rssMiB(t), rig.goroutines(t)
			w.mu.Lock()
			w.peakRSS, w.peakGo, w.lastLog = max(w.peakRSS, rss), max(w.peakGo, g), float64(len(rig.serve.logs()))
			limit := w.limit
			w.mu.Unlock()
			if limit != nil {
				limit(rss)
			}
		}
	}()
	go func() {
		defer close(w.victimD)
		for {
			select {
			case <-w.victimStop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			began := time.Now()
			obs, err := victim.Call(ctx, "terminal", map[string]any{"command": "echo victim-ok"}, nil)
			ms := float64(time.Since(began).Microseconds()) / 1000
			w.mu.Lock()
			switch {
			case err != nil:
				w.victimErrs = append(w.victimErrs, err.Error())
			case obs.IsError || !strings.Contains(obs.Text(), "victim-ok"):
				w.victimErrs = append(w.victimErrs, obs.Text())
			default:
				w.victimMS = append(w.victimMS, ms)
			}
			w.mu.Unlock()
		}
	}()
	return w
}

// end stops the sampling and the victim and says what was seen.
func (w *daemonWatch) end() {
	w.stopOnce.Do(func() {
		close(w.stop)
		close(w.victimStop)
		<-w.done
		<-w.victimD
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = w.victim.Close(ctx)
		w.mu.Lock()
		defer w.mu.Unlock()
		ms := slices.Clone(w.victimMS)
		slices.Sort(ms)
		med, worst := -1.0, -1.0
		if len(ms) > 0 {
			med, worst = ms[len(ms)/2], ms[len(ms)-1]
		}
		w.t.Logf("daemon during the attack: RSS peak %.1f MiB (+%.1f), goroutines peak %v (+%v), log +%v bytes; "+
			"victim echo: %d calls, median %.1f ms, worst %.1f ms, %d failed",
			w.peakRSS, w.peakRSS-w.baseRSS, w.peakGo, w.peakGo-w.baseGo, w.lastLog-w.baseLog, len(ms), med, worst, len(w.victimErrs))
	})
}

// bounds fails the test where the attack made the daemon spend more than
// the given amounts, or slowed the victim session.
func (w *daemonWatch) bounds(rssMiB, goroutines, logBytes float64) {
	w.t.Helper()
	// An attack refused at once leaves the victim little time: let it make
	// its three calls (bounded: a victim that hangs fails below).
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		w.mu.Lock()
		n := len(w.victimMS) + len(w.victimErrs)
		w.mu.Unlock()
		if n >= 3 {
			break
		}
	}
	w.end()
	w.mu.Lock()
	defer w.mu.Unlock()
	if d := w.peakRSS - w.baseRSS; d > rssMiB {
		w.t.Errorf("the daemon's RSS grew by %.1f MiB during the attack, bound %v MiB", d, rssMiB)
	}
	if d := w.peakGo - w.baseGo; d > goroutines {
		w.t.Errorf("the daemon's goroutines grew by %v during the attack, bound %v", d, goroutines)
	}
	if d := w.lastLog - w.baseLog; d > logBytes {
		w.t.Errorf("the daemon logged %v bytes during the attack, bound %v", d, logBytes)
	}
	if len(w.victimErrs) > 0 {
		w.t.Errorf("another session's echo failed %d times: %q", len(w.victimErrs), w.victimErrs[0])
	}
	ms := slices.Clone(w.victimMS)
	slices.Sort(ms)
	if len(ms) < 3 {
		w.t.Errorf("another session's echo ran %d times during the attack, want at least 3", len(ms))
		return
	}
	// The median: the attack must not slow other sessions; a single
	// slow call on a shared 2-core machine is scheduling, not the attack.
	// 100 ms, or three times the median before the attack on a machine
	// whose load makes an echo slower than a third of that anyway: a
	// fixed bound failed by 0.1 ms at load 150 (issue 23) and measured
	// the machine, not the attack.
	bound := max(100, 3*w.victimBaseMS)
	if med := ms[len(ms)/2]; med > bound {
		w.t.Errorf("another session's echo took %.1f ms (median of %d) during the attack, bound %.1f ms (%.1f ms before it)", med, len(ms), bound, w.victimBaseMS)
	}
}

// evilSession creates a session whose one sidecar, "evil", is e2e/evilmcp
// with args (stdio, or http when http is set).
func evilSession(ctx context.Context, t *testing.T, rig *sidecarRig, http bool, args ...string) (*client.Session, error) {
	t.Helper()
	srv := wsproto.MCPServer{Name: "evil", Image: evilImage, Args: args}
	if http {
		srv.Args = append([]string{"-http", "0.0.0.0:8080"}, args...)
		srv.Transport, srv.Port, srv.Path = "http", 8080, "/"
	}
	return rig.c.CreateSession(ctx, client.CreateOptions{Image: testImage, MCPServers: []wsproto.MCPServer{srv}})
}

func startEvilServe(ctx context.Context, t *testing.T) *sidecarRig {
	t.Helper()
	// At info, as the attack run logged.
	return startSidecarServe(ctx, t, "--log-level", "info")
}

// M7: a flood of notifications/tools/list_changed whose re-reads are
// never answered. Each used to start a re-read of its own (34,000
// goroutines, 13 MB of log in 45 s); re-reads are coalesced and the
// warnings rate-limited.
func TestSidecarAttackListChangedFlood(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rig := startEvilServe(ctx, t)
	w := watchDaemon(ctx, t, rig)
	sess, err := evilSession(ctx, t, rig, false, "-attack", "listchanged", "-for", "20s")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Second) // the flood's length (-for)
	w.bounds(150, 200, 64<<10)
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// M8: a flood of server-to-client requests (roots/list,
// sampling/createMessage, elicitation/create, ping), from a server that
// reads the answers and from one that never reads again (so every answer
// the daemon writes blocks). sandboxd offers the server none of these:
// they are refused, and a server that keeps sending them is cut off. The
// bound on goroutines is far above what the cut-off leaves (under 300 on a
// busy 2-core machine) and far below what an unbounded flood makes.
func TestSidecarAttackRequestFlood(t *testing.T) {
	for _, attack := range []string{"requests", "requestsdeaf"} {
		t.Run(attack, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			rig := startEvilServe(ctx, t)
			w := watchDaemon(ctx, t, rig)
			sess, err := evilSession(ctx, t, rig, false, "-attack", attack, "-for", "20s")
			if err != nil {
				// Cut off while it was still starting: the create says why.
				wantAll(t, "the create's error", err.Error(), "requests faster than 10 a second")
				time.Sleep(20 * time.Second) // the flood's length: the daemon must hold meanwhile
				w.bounds(150, 1000, 64<<10)
				return
			}
			time.Sleep(20 * time.Second)
			w.bounds(150, 1000, 64<<10)
			obs, err := sess.Call(ctx, "evil__echo", map[string]any{"text": "still"}, nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("the flooding sidecar's echo afterwards: is_error %v: %s", obs.IsError, obs.Text())
			if obs.IsError && !strings.Contains(obs.Text(), "requests") {
				t.Errorf("the flooding sidecar's call failed without saying why: %s", obs.Text())
			}
			if err := sess.Close(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// M13: an HTTP sidecar answers tools/call with a 1 GiB application/json
// body. The SDK reads a body whole; sandboxd's transport cuts any body at
// the sidecar message limit. A run that passes 1 GiB of daemon memory is
// stopped at once (the host's sake) and fails.
func TestSidecarAttackHugeHTTPBody(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rig := startEvilServe(ctx, t)
	w := watchDaemon(ctx, t, rig)
	sess, err := evilSession(ctx, t, rig, true)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	limit := func(rss float64) {
		if rss-w.baseRSS > 1024 {
			once.Do(func() {
				t.Errorf("the daemon's RSS passed +1 GiB (%.0f MiB): stopping it", rss)
				_ = rig.serve.cmd.Process.Kill()
			})
		}
	}
	w.mu.Lock() // the sampler reads it
	w.limit = limit
	w.mu.Unlock()
	cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
	obs, err := sess.Call(cctx, "evil__bigjson", map[string]any{}, nil)
	ccancel()
	if err != nil {
		w.end()
		t.Fatalf("the call of a sidecar answering 1 GiB failed at the API: %v", err)
	}
	w.bounds(200, 200, 64<<10)
	t.Logf("a 1 GiB answer: is_error %v: %.300s", obs.IsError, obs.Text())
	if !obs.IsError || !strings.Contains(obs.Text(), "MiB") {
		t.Errorf("a 1 GiB answer did not fail saying the limit: is_error %v, %d bytes: %.300s", obs.IsError, len(obs.Text()), obs.Text())
	}
	// The sidecar is still of use after its answer was refused.
	obs, err = sess.Call(ctx, "evil__echo", map[string]any{"text": "after"}, nil)
	if err != nil || obs.IsError || obs.Text() != "after" {
		t.Errorf("echo after the refused answer (the sidecar must stay up): %v %+v", err, obs)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// M5, M6: a sidecar listing 20,000 tools, one tool of 4 MiB, or pages
// without end. Its session fails to start saying which limit, and the
// daemon's memory stays bounded.
func TestSidecarAttackToolLists(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rig := startEvilServe(ctx, t)
	for _, tc := range []struct {
		attack, want string
		rssMiB       float64
	}{
		// 20,000 tools are one 10 MB message, under the 16 MiB a message:
		// the SDK decodes it whole before sandboxd can count the tools.
		{"manytools", "tools", 160},
		{"hugetool", "bytes", 100},
		{"pages", "pages", 100},
	} {
		t.Run(tc.attack, func(t *testing.T) {
			w := watchDaemon(ctx, t, rig)
			began := time.Now()
			sess, err := evilSession(ctx, t, rig, false, "-attack", tc.attack)
			took := time.Since(began)
			w.bounds(tc.rssMiB, 200, 64<<10)
			if err == nil {
				_ = sess.Close(ctx)
				t.Fatalf("a sidecar with attack %s started (in %v)", tc.attack, took)
			}
			t.Logf("refused in %v: %v", took.Round(time.Millisecond), err)
			wantAll(t, "the create's error", err.Error(), "limit", tc.want)
			if took > 20*time.Second {
				t.Errorf("refusing a sidecar took %v, want it refused before the 30 s ready timeout", took)
			}
		})
	}
}

// M12, K12: results over the sidecar limits: 15 MiB of text is cut as
// the terminal's output is (30,000 characters, saying so); a structured
// result nested 500 deep (past sandboxd's 64, under the SDK's 1,000) is
// passed as text, not as structured content;
// a number no float holds is a tool error, not an internal one.
func TestSidecarAttackResults(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rig := startEvilServe(ctx, t)
	sess, err := evilSession(ctx, t, rig, false)
	if err != nil {
		t.Fatal(err)
	}
	obs, err := sess.Call(ctx, "evil__big", map[string]any{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(obs.Text()); n > 31000 || !strings.Contains(obs.Text(), "cut") {
		t.Errorf("a 15 MiB result came back as %d characters, want at most 30,000 and a note saying it was cut: ...%.200s", n, obs.Text()[max(0, len(obs.Text())-200):])
	}
	obs, err = sess.Call(ctx, "evil__deep", map[string]any{}, nil)
	if err != nil {
		t.Fatalf("a 500-deep structured result: %v", err)
	}
	if obs.Structured != nil {
		t.Errorf("a 500-deep structured result was passed on as structured content")
	}
	wantAll(t, "the deep result's text", obs.Text(), "deep", "structured")
	obs, err = sess.Call(ctx, "evil__hugenum", map[string]any{}, nil)
	if err != nil {
		t.Fatalf("-1e999999 in a structured result failed the call: %v", err)
	}
	t.Logf("-1e999999: is_error %v: %s", obs.IsError, obs.Text())
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
}

// M14: a call to an HTTP sidecar that never answers (no reply at all, or
// an event stream that stays silent), and that never takes the
// notifications/cancelled either, returns within 3 s of its cancellation
// (tools.cancel), as the protocol doc promises.
func TestSidecarAttackHungHTTPCall(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	rig := startEvilServe(ctx, t)
	sess, err := evilSession(ctx, t, rig, true, "-attack", "holdcancel")
	if err != nil {
		t.Fatal(err)
	}
	for i, tool := range []string{"evil__hang", "evil__hangsse", "evil__hang", "evil__hangsse"} {
		cctx, ccancel := context.WithCancel(ctx)
		at := make(chan time.Time, 1)
		timer := time.AfterFunc(time.Second, func() { at <- time.Now(); ccancel() })
		_, err := sess.Call(cctx, tool, map[string]any{}, nil)
		returned := time.Now()
		timer.Stop()
		ccancel()
		cancelled := <-at
		if err == nil {
			t.Fatalf("call %d: a cancelled hung call returned no error", i)
		}
		if d := returned.Sub(cancelled); d > 3*time.Second {
			t.Errorf("call %d (%s): a cancelled call to a hung HTTP sidecar returned %v after its cancellation, want within 3 s", i, tool, d.Round(time.Millisecond))
		} else {
			t.Logf("call %d (%s): returned %v after its cancellation: %v", i, tool, d.Round(time.Millisecond), err)
		}
	}
	obs, err := sess.Call(ctx, "evil__echo", map[string]any{"text": "alive"}, nil)
	if err != nil || obs.IsError || obs.Text() != "alive" {
		t.Errorf("echo after the cancelled calls: %v %+v", err, obs)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
