package api

// The evaluation-harness use case: many isolated sessions at once, each on
// its own connection, through the Go client, against real Docker.

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/daemon"
	"github.com/sandboxd/sandboxd/tools"
)

// harnessSessions is how many sessions a harness run starts at once.
const harnessSessions = 16

// harnessServer is an in-process server as startServer makes it, with a warm
// pool of poolSize (what `serve --pool N` configures: one pool of the
// default options) and its own scope label.
type harnessServer struct {
	*apiServer
	scope    string // value of labelTest on everything it makes
	shutdown func() error
}

func startHarnessServer(t *testing.T, poolSize int) *harnessServer {
	t.Helper()
	scope := auth.NewToken()[:12]
	d := newDaemon(t, func(c *daemon.Config) {
		c.Labels[labelTest] = scope
		c.Pool = daemon.Pool{Min: poolSize, Max: poolSize} // serve --pool N
	})
	hs, shutdown := serveHTTP(t, d, nil, nil)
	return &harnessServer{
		apiServer: &apiServer{Server: d.Server, http: hs, token: d.Token, base: hs.URL,
			ws: "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/ws", manager: d.Manager},
		scope: scope, shutdown: shutdown,
	}
}

// resources lists what the engine holds of this server: containers (name
// and whether it was started for a warm pool), volumes, networks.
func (s *harnessServer) resources(ctx context.Context) (ctrs map[string]bool, vols, nets []string, err error) {
	f := filters.NewArgs(filters.Arg("label", labelTest+"="+s.scope))
	cs, err := engine.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, nil, nil, err
	}
	ctrs = map[string]bool{}
	for _, c := range cs {
		ctrs[strings.Join(c.Names, ",")] = c.Labels[sandbox.LabelPool] != ""
	}
	vs, err := engine.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, nil, nil, err
	}
	for _, v := range vs.Volumes {
		vols = append(vols, v.Name)
	}
	ns, err := engine.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		return nil, nil, nil, err
	}
	for _, n := range ns {
		nets = append(nets, n.Name)
	}
	return ctrs, vols, nets, nil
}

// fromPool reports whether a session's container was started for the warm
// pool (and handed out) rather than cold for this create.
func (s *harnessServer) fromPool(ctx context.Context, id string) (bool, error) {
	f := filters.NewArgs(filters.Arg("label", labelTest+"="+s.scope), filters.Arg("label", sandbox.LabelSession+"="+id))
	cs, err := engine.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return false, err
	}
	if len(cs) != 1 {
		return false, fmt.Errorf("session %s has %d containers", id, len(cs))
	}
	return cs[0].Labels[sandbox.LabelPool] != "", nil
}

// liveSessions is the server's session count, as the core and the manager
// see it and as session.list answers the operator.
func (s *harnessServer) liveSessions(ctx context.Context) (core, manager, listed int, err error) {
	c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
	if err != nil {
		return 0, 0, 0, err
	}
	defer c.Close()
	l, err := c.ListSessions(ctx)
	return s.LiveSessions(), len(s.manager.List()), len(l), err
}

// barrier lets n goroutines wait for each other; a cancelled ctx releases
// the waiters (one worker's failure cancels the run).
type barrier struct {
	mu    sync.Mutex
	n     int
	ready chan struct{}
}

func newBarrier(n int) *barrier { return &barrier{n: n, ready: make(chan struct{})} }

func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	if b.n--; b.n == 0 {
		close(b.ready)
	}
	b.mu.Unlock()
	select {
	case <-b.ready:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// harnessRun is what one session of a run saw.
type harnessRun struct {
	id       string
	ready    time.Duration // session.create until it answered
	pooled   bool
	duringOK time.Time // when its calls made while session 0 slept had all returned
}

// shellText is the terminal's text for a command that printed out and
// exited 0 in dir.
func shellText(out, dir string) string {
	return out + "[The command completed with exit code 0.]\n[Current working directory: " + dir + "]"
}

// viewText is file_editor's view of session i's notes file.
func viewText(path string, i int) string {
	return fmt.Sprintf("Here's the result of running `cat -n` on %s:\n     1\tharness session %d\n     2\tline two\n", path, i)
}

// expect checks a tool result exactly.
func expect(obs *tools.Observation, err error, want string) error {
	if err != nil {
		return err
	}
	if obs.IsError || obs.Text() != want {
		return fmt.Errorf("got (is_error=%v) %q, want %q", obs.IsError, obs.Text(), want)
	}
	return nil
}

// runHarness runs harnessSessions sessions at once against s, each on its own
// connection as a harness would, and checks every result.
func runHarness(t *testing.T, s *harnessServer) []harnessRun {
	t.Helper()
	ctx, cancel := context.WithTimeoutCause(context.Background(), 5*time.Minute, errors.New("the harness run took over 5 minutes: a hang"))
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	const n = harnessSessions
	var (
		dialed, written, slept, closing = newBarrier(n), newBarrier(n), newBarrier(n), newBarrier(n)
		sleepStarted                    = make(chan struct{})
		sleepDone                       time.Time
		runs                            = make([]harnessRun, n)
		errs                            = make([]error, n)
		wg                              sync.WaitGroup
	)
	const sleepFor = 2 * time.Second
	worker := func(i int) (err error) {
		r := &runs[i]
		step := "dialing"
		defer func() {
			if err != nil {
				err = fmt.Errorf("session #%d (%s): %s: %w", i, r.id, step, err)
				fail(err)
			}
		}()
		c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
		if err != nil {
			return err
		}
		defer c.Close()
		if err := dialed.wait(ctx); err != nil { // all creates go out at once
			return err
		}
		step = "creating"
		start := time.Now()
		sess, err := c.CreateSession(ctx, client.CreateOptions{})
		if err != nil {
			return err
		}
		r.ready, r.id = time.Since(start), sess.ID
		if r.pooled, err = s.fromPool(ctx, sess.ID); err != nil {
			return err
		}
		term := func(cmd, want string) error {
			obs, err := sess.Call(ctx, "terminal", map[string]any{"command": cmd}, nil)
			return expect(obs, err, want)
		}
		edit := func(args map[string]any, want string) error {
			obs, err := sess.Call(ctx, "file_editor", args, nil)
			return expect(obs, err, want)
		}

		step = "terminal"
		if err := term(fmt.Sprintf(`echo "session %d: $((6*7)) $(id -u)"`, i), shellText(fmt.Sprintf("session %d: 42 1000\n", i), "/workspace")); err != nil {
			return err
		}
		if err := term(fmt.Sprintf("cd /tmp && export HARNESS_I=%d", i), shellText("", "/tmp")); err != nil {
			return err
		}
		if err := term(`pwd; echo "$HARNESS_I"; cd /workspace`, shellText(fmt.Sprintf("/tmp\n%d\n", i), "/workspace")); err != nil {
			return err
		}
		step = "file_editor"
		notes := fmt.Sprintf("/workspace/notes-%d.txt", i)
		if err := edit(map[string]any{"command": "create", "path": notes, "file_text": fmt.Sprintf("harness session %d\nline two\n", i)},
			"File created successfully at: "+notes); err != nil {
			return err
		}
		if err := edit(map[string]any{"command": "view", "path": notes}, viewText(notes, i)); err != nil {
			return err
		}
		step = "marker"
		if err := term(fmt.Sprintf("printf %%s %s | tee /workspace/marker-%d /tmp/marker-%d >/dev/null", sess.ID, i, i), shellText("", "/workspace")); err != nil {
			return err
		}
		if err := written.wait(ctx); err != nil { // every marker exists now
			return err
		}
		step = "isolation"
		if err := term("ls -1A /workspace; ls -1A /tmp | grep marker; cat /workspace/marker-* /tmp/marker-*; echo",
			shellText(fmt.Sprintf("marker-%d\nnotes-%d.txt\nmarker-%d\n%s%s\n", i, i, i, sess.ID, sess.ID), "/workspace")); err != nil {
			return err
		}

		step = "while session 0 sleeps"
		if i == 0 {
			var once sync.Once
			stream := func(b []byte) {
				if strings.Contains(string(b), "sleeping") {
					once.Do(func() { close(sleepStarted) })
				}
			}
			type result struct {
				obs *tools.Observation
				err error
			}
			done := make(chan result, 1)
			began := time.Now()
			go func() {
				obs, err := sess.Call(ctx, "terminal", map[string]any{"command": fmt.Sprintf("echo sleeping; sleep %g; echo woke", sleepFor.Seconds())}, stream)
				sleepDone = time.Now()
				done <- result{obs, err}
			}()
			select {
			case <-sleepStarted:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			// The same session answers other tools meanwhile.
			if err := edit(map[string]any{"command": "view", "path": notes}, viewText(notes, i)); err != nil {
				return err
			}
			r.duringOK = time.Now()
			res := <-done
			if err := expect(res.obs, res.err, shellText("sleeping\nwoke\n", "/workspace")); err != nil {
				return err
			}
			if took := sleepDone.Sub(began); took < sleepFor {
				return fmt.Errorf("the %v sleep returned after %v", sleepFor, took)
			}
		} else {
			select {
			case <-sleepStarted:
			case <-ctx.Done():
				return context.Cause(ctx)
			}
			for k := range 3 {
				if err := term(fmt.Sprintf("echo %d-%d", i, k), shellText(fmt.Sprintf("%d-%d\n", i, k), "/workspace")); err != nil {
					return err
				}
				if err := edit(map[string]any{"command": "view", "path": notes}, viewText(notes, i)); err != nil {
					return err
				}
			}
			r.duringOK = time.Now()
		}
		if err := slept.wait(ctx); err != nil {
			return err
		}

		step = "closing"
		if err := closing.wait(ctx); err != nil { // all closes go out at once
			return err
		}
		if err := sess.Close(ctx); err != nil {
			return err
		}
		select {
		case <-sess.Done():
		default:
			return errors.New("Done not closed after Close")
		}
		return nil
	}
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = worker(i)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	// The first failure cancelled the others: report it, not their echoes.
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		t.Fatal(cause)
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ids := map[string]bool{}
	for i, r := range runs {
		if ids[r.id] {
			t.Fatalf("session #%d got the id %s of another", i, r.id)
		}
		ids[r.id] = true
		if !r.duringOK.Before(sleepDone) {
			t.Errorf("session #%d's calls while session 0 slept ended %v after the sleep: a 2 s command held them up",
				i, r.duringOK.Sub(sleepDone))
		}
	}
	t.Logf("%d sessions in %v; ready p50 %v, max %v", n, elapsed.Round(time.Millisecond),
		pct(runs, 0.5), pct(runs, 1))
	return runs
}

func pct(runs []harnessRun, q float64) time.Duration {
	d := make([]time.Duration, len(runs))
	for i, r := range runs {
		d[i] = r.ready
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// waitNoSessions waits until the server counts no session (the core forgets
// a closed session from a watcher, a moment after the close returns).
func waitNoSessions(t *testing.T, s *harnessServer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for {
		core, mgr, listed, err := s.liveSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if core == 0 && mgr == 0 && listed == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("sessions after every close: core %d, manager %d, session.list %d", core, mgr, listed)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Sixteen sessions created at once, cold, each on its own connection: every
// one runs its commands and edits with exact results, sees only its own
// files, keeps answering while another runs a 2 s command, and after the
// concurrent closes nothing of them is left, in the server or the engine.
func TestHarnessParallelSessions(t *testing.T) {
	s := startHarnessServer(t, 0)
	runs := runHarness(t, s)
	for i, r := range runs {
		if r.pooled {
			t.Errorf("session #%d came from a pool; the server has none", i)
		}
	}
	waitNoSessions(t, s)
	// Close returns once everything is gone: check before the shutdown.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ctrs, vols, nets, err := s.resources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrs)+len(vols)+len(nets) != 0 {
		t.Fatalf("left after the closes: containers %v, volumes %v, networks %v", ctrs, vols, nets)
	}
}

// The same with a warm pool smaller than the demand: the pool's sandboxes
// are handed out, the rest start cold (none fails or waits for a refill),
// and at shutdown the refilled pool is removed too.
func TestHarnessParallelSessionsWarmPool(t *testing.T) {
	const poolSize = 4
	s := startHarnessServer(t, poolSize)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for { // a full pool before the demand
		if p := s.manager.Pools(); len(p) == 1 && p[0].Ready == poolSize {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the pool did not fill: %+v", s.manager.Pools())
		case <-time.After(20 * time.Millisecond):
		}
	}
	runs := runHarness(t, s)
	var pooled []int
	var warm, cold []time.Duration
	for i, r := range runs {
		if r.pooled {
			pooled = append(pooled, i)
			warm = append(warm, r.ready)
		} else {
			cold = append(cold, r.ready)
		}
	}
	// All 16 creates arrive within milliseconds, a refill takes a start
	// (hundreds of ms): exactly the pool's sandboxes are handed out.
	if len(pooled) != poolSize {
		t.Errorf("%d sessions from the pool (%v), want %d: the rest must start cold", len(pooled), pooled, poolSize)
	}
	t.Logf("ready: from the pool %v, cold %v", warm, cold)
	waitNoSessions(t, s)

	// What is left is the refilled pool, nothing of the sessions. The
	// listing gets a bound of its own: the one above covered the fill and
	// the 16 sessions, which a loaded machine can spend almost whole.
	lctx, lcancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer lcancel()
	ctrs, vols, nets, err := s.resources(lctx)
	if err != nil {
		t.Fatal(err)
	}
	for name, pool := range ctrs {
		if !pool || !strings.HasPrefix(name, "/sandboxd-pool-") {
			t.Errorf("container %s left after the closes", name)
		}
	}
	if len(ctrs) > poolSize || len(nets) != 0 {
		t.Errorf("after the closes: containers %v, networks %v; want at most %d pool containers", ctrs, nets, poolSize)
	}
	for _, r := range runs {
		for _, v := range vols {
			if strings.Contains(v, r.id) {
				t.Errorf("volume %s of closed session %s left", v, r.id)
			}
		}
	}
	if err := s.shutdown(); err != nil {
		t.Fatal(err)
	}
	// So does the listing after the shutdown (the first bound was spent
	// by then: CI ran 23.5 s of its 30 s on the 16 sessions).
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer scancel()
	ctrs, vols, nets, err = s.resources(sctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrs)+len(vols)+len(nets) != 0 {
		t.Fatalf("left after the shutdown: containers %v, volumes %v, networks %v", ctrs, vols, nets)
	}
}

// serveHTTP serves srv on a test listener. shutdown, idempotent and run at
// the test's cleanup too, runs before, shuts srv down (calls drained,
// sessions closed), closes the listener and its connections, then runs
// after.
func serveHTTP(t *testing.T, d *daemon.Daemon, before, after func()) (*httptest.Server, func() error) {
	t.Helper()
	hs := httptest.NewServer(d.Handler())
	var once sync.Once
	var shutErr error
	shutdown := func() error {
		once.Do(func() {
			if before != nil {
				before()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			shutErr = d.Shutdown(ctx)
			hs.CloseClientConnections()
			hs.Close()
			if after != nil {
				after()
			}
		})
		return shutErr
	}
	t.Cleanup(func() {
		if err := shutdown(); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return hs, shutdown
}
