package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"net/http/httptest"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"
	dclient "github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/daemon"
)

// The harness suite's own flags (registered before main parses the flags).
var (
	harnessSessions = flag.Int("harness-sessions", 16, "harness suite: sessions created at once per round")
	harnessCalls    = flag.Int("harness-calls", 10, "harness suite: no-op tool calls per session")
	harnessPool     = flag.Int("harness-pool", -1, "harness suite: size of the warm pool of the pooled rounds (-1: as many as -harness-sessions)")
	harnessStarts   = flag.Int("harness-starts", 0, "harness and scale suites: sandbox.ManagerOptions.MaxConcurrentStarts (0: the manager's default)")
)

func init() {
	register(suite{
		name: "harness",
		about: "an evaluation harness: N sessions created at once through the WebSocket API (one connection each), " +
			"10 no-op tool calls each, closed at once; cold and from a warm pool, vs N concurrent `docker run` " +
			"(image: $SANDBOXD_TEST_IMAGE or sandboxd-test:latest)",
		run: runHarnessSuite,
	})
}

// harnessNoop is the no-op-sized call of the harness rows: file_editor view
// of a one-line file every container has, so no setup call is needed.
var harnessNoop = map[string]any{"command": "view", "path": "/etc/hostname"}

// harnessRound is what one round measured.
type harnessRound struct {
	wall   time.Duration   // first dial to last close
	ready  []time.Duration // session.create, per session
	calls  []time.Duration // tool calls, all sessions
	closes []time.Duration // session.close, per session
	pooled int             // sessions handed out from the warm pool
	ids    []string
}

// harnessServer is an in-process sandboxd serving the WebSocket API.
type harnessServer struct {
	url, token string
	http       string // http://host:port, the base of /mcp
	m          *sandbox.Manager
	rt         sandbox.Runtime
	stop       func()
}

// runLabels scopes one run of a suite's runtime.
func runLabels() map[string]string {
	return map[string]string{"sandboxd.bench.run": strconv.FormatInt(time.Now().UnixNano(), 36)}
}

// startHarnessServer starts a server on a runtime of its own, scoped by
// labels: managers sharing a scope would reclaim each other's sandboxes.
func startHarnessServer(ctx context.Context, bin, image string, labels map[string]string, pool, starts int, log *slog.Logger) (*harnessServer, error) {
	ip, err := startInProcess(ctx, "harness", bin, image, log, labels, 2*time.Minute, func(c *daemon.Config) {
		c.MaxSessions = -1
		c.Pool = daemon.Pool{Min: pool, Max: pool} // serve --pool N
		if starts > 0 {
			c.MaxStarts = starts
		}
	})
	if err != nil {
		return nil, err
	}
	return &harnessServer{url: ip.ws, token: ip.token, http: ip.http, m: ip.d.Manager, rt: ip.d.Runtime, stop: ip.stop}, nil
}

// inProcess is an in-process sandboxd, assembled as `sandboxd serve`
// assembles it (package daemon), served by httptest.
type inProcess struct {
	ws, http, token string // the WebSocket URL, the base URL, the operator token
	d               *daemon.Daemon
	stop            func() // shuts the daemon down within its bound, then closes its listener
}

// startInProcess assembles a daemon for image as serve does (the direct
// path to the agent on, decision 0035), in a state folder of its own,
// scoped by labels, without a disk quota; adjust (may be nil) changes its
// configuration first. stop gives its shutdown at most shutdown.
func startInProcess(ctx context.Context, suite, bin, image string, log *slog.Logger, labels map[string]string, shutdown time.Duration,
	adjust func(*daemon.Config)) (*inProcess, error) {
	stateDir, err := os.MkdirTemp("", "sandboxd-bench-state-")
	if err != nil {
		return nil, err
	}
	c := daemon.Defaults()
	c.StateDir, c.AgentBinary, c.Logger, c.Token = stateDir, bin, log, auth.NewToken()
	c.Image, c.MCPImage, c.ShutdownTimeout = image, image, shutdown
	c.Labels = daemon.KeyValues(maps.Clone(labels))
	c.DiskBackend = daemon.DiskNone
	if adjust != nil {
		adjust(&c)
	}
	d, err := daemon.New(ctx, c)
	if err != nil {
		_ = os.RemoveAll(stateDir)
		return nil, fmt.Errorf("%s suite (is the Docker engine up?): %w", suite, err)
	}
	hs := httptest.NewServer(d.Handler())
	return &inProcess{
		ws: "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/ws", http: hs.URL, token: d.Token, d: d,
		stop: func() {
			sctx, cancel := context.WithTimeout(context.Background(), shutdown)
			defer cancel()
			_ = d.Shutdown(sctx)
			hs.CloseClientConnections()
			hs.Close()
			_ = os.RemoveAll(stateDir)
		},
	}, nil
}

// waitPoolFull waits until the server's warm pool holds size sandboxes; it
// returns how long that took.
func (s *harnessServer) waitPoolFull(ctx context.Context, size int) (time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		if p := s.m.Pools(); len(p) == 1 && p[0].Ready >= size {
			return time.Since(start), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("the warm pool did not fill: %+v: %w", s.m.Pools(), ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// round runs n sessions at once: dial, create, calls no-op calls, close.
// The creates go out together once every connection is up, as do the closes.
func (s *harnessServer) round(ctx context.Context, n, calls int, poolKey string) (*harnessRound, error) {
	ctx, cancel := context.WithTimeoutCause(ctx, 5*time.Minute, errors.New("a harness round took over 5 minutes"))
	defer cancel()
	ctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	r := &harnessRound{}
	var mu sync.Mutex
	var wg, created sync.WaitGroup
	// The closes wait for the count of pooled sessions too (their
	// containers go at close).
	dialed, closing := newGate(n), newGate(n+1)
	start := time.Now()
	created.Add(n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.session(ctx, calls, dialed, closing, &created, r, &mu); err != nil {
				fail(err)
			}
		}()
	}
	if poolKey != "" {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer closing.arrive()
			created.Wait()
			pooled, err := s.countPooled(ctx, r.ids)
			if err != nil {
				fail(err)
			}
			r.pooled = pooled
		}()
	} else {
		closing.arrive()
	}
	wg.Wait()
	r.wall = time.Since(start)
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	return r, nil
}

// countPooled counts the sessions of ids whose container was started for
// the warm pool (labelled with its key) rather than for their create.
func (s *harnessServer) countPooled(ctx context.Context, ids []string) (int, error) {
	res, err := s.rt.List(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, x := range res {
		if x.Kind == sandbox.KindContainer && x.Labels[sandbox.LabelPool] != "" && slices.Contains(ids, x.SessionID) {
			n++
		}
	}
	return n, nil
}

func (s *harnessServer) session(ctx context.Context, calls int, dialed, closing *gate, created *sync.WaitGroup, r *harnessRound, mu *sync.Mutex) error {
	c, err := client.Dial(ctx, s.url, s.token, client.Options{})
	if err != nil {
		created.Done()
		dialed.arrive()
		closing.arrive()
		return err
	}
	defer c.Close()
	if err := dialed.wait(ctx); err != nil {
		created.Done()
		closing.arrive()
		return err
	}
	t0 := time.Now()
	sess, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		created.Done()
		closing.arrive()
		return fmt.Errorf("session.create: %w", err)
	}
	ready := time.Since(t0)
	mu.Lock()
	r.ids = append(r.ids, sess.ID)
	mu.Unlock()
	created.Done()
	ds := make([]time.Duration, 0, calls)
	var callErr error
	for range calls {
		t := time.Now()
		obs, err := sess.Call(ctx, "file_editor", harnessNoop, nil)
		if err == nil && obs.IsError {
			err = fmt.Errorf("file_editor view: %s", obs.Text())
		}
		if err != nil {
			callErr = err
			break
		}
		ds = append(ds, time.Since(t))
	}
	werr := closing.wait(ctx)
	t1 := time.Now()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute) // close even after a failure
	cerr := sess.Close(cctx)
	cancel()
	closed := time.Since(t1)
	mu.Lock()
	r.ready = append(r.ready, ready)
	r.calls = append(r.calls, ds...)
	r.closes = append(r.closes, closed)
	mu.Unlock()
	return errors.Join(callErr, werr, cerr)
}

// gate lets n goroutines start something together.
type gate struct {
	mu   sync.Mutex
	n    int
	open chan struct{}
}

func newGate(n int) *gate { return &gate{n: n, open: make(chan struct{})} }

func (g *gate) arrive() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n--; g.n == 0 {
		close(g.open)
	}
}

func (g *gate) wait(ctx context.Context) error {
	g.arrive()
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// dockerRuns runs n `docker run --rm --network none IMAGE true` at once
// through the engine's Go client, as the CLI does it: create (auto-remove),
// wait for removal, start, read the exit status. It returns the wall time
// and each run's latency.
func dockerRuns(ctx context.Context, cli *dclient.Client, image string, labels map[string]string, n int) (time.Duration, []time.Duration, error) {
	var mu sync.Mutex
	var wg sync.WaitGroup
	var errs []error
	var each []time.Duration
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.Now()
			err := dockerRun(ctx, cli, image, labels)
			d := time.Since(t)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			each = append(each, d)
		}()
	}
	wg.Wait()
	return time.Since(start), each, errors.Join(errs...)
}

func dockerRun(ctx context.Context, cli *dclient.Client, image string, labels map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := cli.ContainerCreate(ctx, &container.Config{Image: image, Cmd: []string{"true"}, Labels: labels},
		&container.HostConfig{AutoRemove: true, NetworkMode: "none"}, nil, nil, "")
	if err != nil {
		return fmt.Errorf("docker run: create: %w", err)
	}
	waitC, errC := cli.ContainerWait(ctx, c.ID, container.WaitConditionRemoved)
	if err := cli.ContainerStart(ctx, c.ID, container.StartOptions{}); err != nil {
		_ = cli.ContainerRemove(context.WithoutCancel(ctx), c.ID, container.RemoveOptions{Force: true})
		return fmt.Errorf("docker run: start: %w", err)
	}
	select {
	case w := <-waitC:
		if w.Error != nil || w.StatusCode != 0 {
			return fmt.Errorf("docker run: exit %d %v", w.StatusCode, w.Error)
		}
		return nil
	case err := <-errC:
		return fmt.Errorf("docker run: wait: %w", err)
	}
}

// roundSamples are the samples of several rounds together.
type roundSamples struct {
	wall, ready, calls, closes []time.Duration
	pooled                     int
}

func aggregate(rs []*harnessRound) (a roundSamples) {
	for _, r := range rs {
		a.wall = append(a.wall, r.wall)
		a.ready = append(a.ready, r.ready...)
		a.calls = append(a.calls, r.calls...)
		a.closes = append(a.closes, r.closes...)
		a.pooled += r.pooled
	}
	return a
}

// sampleOfDurations summarises durations as measure does.
func sampleOfDurations(ds []time.Duration) sample {
	if len(ds) == 0 {
		return sample{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	return sample{n: n, p50: s[(n-1)/2], p99: s[int(math.Ceil(float64(n)*0.99))-1]}
}

func runHarnessSuite(ctx context.Context, e *env) (_ []row, err error) {
	n, calls := *harnessSessions, *harnessCalls
	pool := *harnessPool
	if pool < 0 {
		pool = n
	}
	if n < 1 || calls < 0 || *harnessStarts < 0 {
		return nil, fmt.Errorf("harness: -harness-sessions must be ≥ 1, -harness-calls and -harness-starts ≥ 0")
	}
	bin, err := e.sandboxdBinary()
	if err != nil {
		return nil, err
	}
	image := os.Getenv("SANDBOXD_TEST_IMAGE")
	if image == "" {
		image = testenv.DefaultTestImage
	}
	quiet := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	const scopeKey, serverKey = "sandboxd.bench.run", "sandboxd.bench.harness"
	scope := strconv.FormatInt(time.Now().UnixNano(), 36)
	labels := map[string]string{scopeKey: scope}
	cli, err := dclient.NewClientWithOpts(dclient.FromEnv, dclient.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	if _, err := cli.ImageInspect(ctx, image); err != nil {
		return nil, fmt.Errorf("harness: image %s (is the engine up? make test-image): %w", image, err)
	}
	defer func() { // after the servers' shutdown
		if left := testenv.Leftovers(context.Background(), cli, scopeKey, scope); len(left) > 0 {
			err = errors.Join(err, fmt.Errorf("harness: left behind (now removed): %s", strings.Join(left, ", ")))
		}
	}()

	cold, err := startHarnessServer(ctx, bin, image, map[string]string{scopeKey: scope, serverKey: "cold"}, 0, *harnessStarts, quiet)
	if err != nil {
		return nil, err
	}
	defer cold.stop()
	var warm *harnessServer
	var poolKey string
	if pool > 0 {
		if warm, err = startHarnessServer(ctx, bin, image, map[string]string{scopeKey: scope, serverKey: "pool"}, pool, *harnessStarts, quiet); err != nil {
			return nil, err
		}
		defer warm.stop()
		o, err := warm.m.Resolve(sandbox.SessionOptions{})
		if err != nil {
			return nil, err
		}
		poolKey = o.Key()
	}

	starts := *harnessStarts
	if starts == 0 {
		starts = sandbox.DefaultMaxConcurrentStarts
	}
	rounds := e.n(5)
	e.logf("harness: %d rounds of %d sessions x %d calls, cold and with a pool of %d, MaxConcurrentStarts %d; baseline %d concurrent docker runs",
		rounds, n, calls, pool, starts, n)
	// One round of each first, untimed: image cache, engine warm-up.
	if _, _, err := dockerRuns(ctx, cli, image, labels, n); err != nil {
		return nil, err
	}
	if _, err := cold.round(ctx, n, calls, ""); err != nil {
		return nil, fmt.Errorf("harness: warm-up round: %w", err)
	}
	if warm != nil {
		if _, err := warm.waitPoolFull(ctx, pool); err != nil {
			return nil, err
		}
	}
	var (
		dockerWall, dockerEach []time.Duration
		coldR, warmR, burstR   []*harnessRound
		cycles                 []time.Duration
	)
	for i := range rounds {
		// Alternate, so that drift and other load hit every variant alike.
		e.logf("harness: round %d/%d", i+1, rounds)
		w, each, err := dockerRuns(ctx, cli, image, labels, n)
		if err != nil {
			return nil, err
		}
		dockerWall, dockerEach = append(dockerWall, w), append(dockerEach, each...)
		r, err := cold.round(ctx, n, calls, "")
		if err != nil {
			return nil, fmt.Errorf("harness: cold round: %w", err)
		}
		coldR = append(coldR, r)
		if warm != nil {
			a, err := warm.round(ctx, n, calls, poolKey)
			if err != nil {
				return nil, fmt.Errorf("harness: pooled round: %w", err)
			}
			// A second burst at once: the pool is empty, its refill under way.
			b, err := warm.round(ctx, n, calls, poolKey)
			if err != nil {
				return nil, fmt.Errorf("harness: second pooled round: %w", err)
			}
			warmR, burstR = append(warmR, a), append(burstR, b)
			// The refill runs on; let it end before the next round (it would
			// load the baseline), and time the whole cycle.
			d, err := warm.waitPoolFull(ctx, pool)
			if err != nil {
				return nil, err
			}
			cycles = append(cycles, a.wall+b.wall+d)
		}
	}

	runBase := fmt.Sprintf("%d concurrent docker run --rm --network none IMAGE true (Go client), wall", n)
	dw, de := sampleOfDurations(dockerWall), sampleOfDurations(dockerEach)
	rows := []row{
		{scenario: fmt.Sprintf("harness baseline: %d concurrent docker run, wall (%.1f containers/s)", n, float64(n)/dw.p50.Seconds()), s: dw},
		{scenario: fmt.Sprintf("harness baseline: one docker run among %d concurrent", n), s: de},
	}
	add := func(kind string, rs []*harnessRound, all bool) {
		a := aggregate(rs)
		ws := sampleOfDurations(a.wall)
		rows = append(rows,
			row{scenario: fmt.Sprintf("harness %s: %d sessions at once, wall: dial, create, %d calls, close (%.1f sessions/s; %d of %d from a pool; %d start slots)",
				kind, n, calls, float64(n)/ws.p50.Seconds(), a.pooled, len(a.ready), starts), s: ws, baseline: runBase, base: dw},
			row{scenario: fmt.Sprintf("harness %s: session ready (session.create) under %d concurrent creates", kind, n),
				s: sampleOfDurations(a.ready), baseline: fmt.Sprintf("one docker run among %d concurrent", n), base: de})
		if all {
			rows = append(rows,
				row{scenario: fmt.Sprintf("harness %s: no-op call (file_editor view, 1 line) across %d sessions", kind, n), s: sampleOfDurations(a.calls)},
				row{scenario: fmt.Sprintf("harness %s: session.close under %d concurrent closes", kind, n), s: sampleOfDurations(a.closes)})
		}
	}
	add("cold", coldR, true)
	if warm != nil {
		add(fmt.Sprintf("pool %d", pool), warmR, true)
		add(fmt.Sprintf("pool %d, 2nd burst right after the 1st", pool), burstR, false)
		c := sampleOfDurations(cycles)
		rows = append(rows, row{scenario: fmt.Sprintf("harness pool %d: two bursts, then until the pool is full again (%.1f sessions/s sustained)",
			pool, float64(2*n)/c.p50.Seconds()), s: c})
	}
	return rows, nil // no issue sets a target: the table prints "—"
}
