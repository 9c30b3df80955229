package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	dclient "github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/client"
)

var (
	scaleN       = flag.Int("scale-n", 100, "scale suite: sessions per mode")
	scaleStagger = flag.Duration("scale-stagger", 200*time.Millisecond, "scale suite: time between launches in staggered mode")
	scaleJSON    = flag.String("scale-json", "bench-scale.json", "scale suite: where the raw samples go (\"\": nowhere)")
	scaleModes   = flag.String("scale-modes", "sequential,staggered,burst", "scale suite: modes, comma-separated")
	scaleAPIs    = flag.String("scale-apis", "ws,mcp-session,mcp-handle", "scale suite: ways in, comma-separated: ws (WebSocket), "+
		"mcp-session (MCP 2025-11-25, a sandbox per MCP session), mcp-handle (stateless MCP 2026-07-28, sandbox_open)")
	scaleSetups = flag.String("scale-setups", "docker,cold,pool", "scale suite: setups, comma-separated: docker (the `docker run` baseline), cold (no pool), pool (a warm pool of -scale-n)")
)

func init() {
	register(suite{
		name: "scale",
		about: "time to interactive as evaluation harnesses measure it (create to the first `echo` answered; WebSocket API, one connection per session, and MCP, one go-sdk client per session): " +
			"sequential, staggered and burst, cold and from a warm pool of -scale-n, beside `docker run --rm IMAGE true` in the same modes; " +
			"prints its own table (median/p95/p99/success/wall) and writes raw samples to -scale-json",
		run:   runScaleSuite,
		named: true,
	})
}

// scaleResult is one mode of one setup: every sample and the failures.
type scaleResult struct {
	Setup   string    `json:"setup"` // ws-cold, ws-pool, mcp-session-cold, ..., docker-run
	Mode    string    `json:"mode"`  // sequential, staggered, burst
	N       int       `json:"n"`
	OK      int       `json:"ok"`
	WallMS  float64   `json:"wall_ms"`
	Samples []float64 `json:"samples_ms"` // successful ones, in launch order
	// CreateMS is, beside each sample, the part until the session was
	// created (session.create, initialize, sandbox_open answered).
	CreateMS  []float64 `json:"create_ms,omitempty"`
	Errors    []string  `json:"errors,omitempty"`
	LoadStart string    `json:"loadavg_start"` // /proc/loadavg at the start
	LoadAvg   string    `json:"loadavg"`       // /proc/loadavg at the end
	Finished  time.Time `json:"finished"`
}

// launch runs n attempts of one in the mode and collects their durations.
func launch(ctx context.Context, mode string, n int, stagger time.Duration, one func(context.Context) (time.Duration, error)) scaleResult {
	r := scaleResult{Mode: mode, N: n, LoadStart: loadAvg()}
	var mu sync.Mutex
	samples := make([]float64, n)
	created := make([]float64, n)
	ok := make([]bool, n)
	do := func(i int) {
		var c time.Duration
		d, err := one(context.WithValue(ctx, createdKey{}, &c))
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			r.Errors = append(r.Errors, err.Error())
			return
		}
		samples[i], ok[i] = float64(d.Microseconds())/1000, true
		created[i] = float64(c.Microseconds()) / 1000
	}
	start := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		switch mode {
		case "sequential":
			do(i)
		case "staggered":
			if i > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(stagger):
				}
			}
			wg.Add(1)
			go func() { defer wg.Done(); do(i) }()
		default: // burst
			wg.Add(1)
			go func() { defer wg.Done(); do(i) }()
		}
	}
	wg.Wait()
	r.WallMS = float64(time.Since(start).Microseconds()) / 1000
	for i := range n {
		if ok[i] {
			r.Samples = append(r.Samples, samples[i])
			r.CreateMS = append(r.CreateMS, created[i])
		}
	}
	r.OK = len(r.Samples)
	r.LoadAvg = loadAvg()
	r.Finished = time.Now().UTC()
	return r
}

// createdKey carries, in a sample's context, where the sample notes how
// long its create took (markCreated).
type createdKey struct{}

// markCreated notes that the sample begun at start has its session now.
func markCreated(ctx context.Context, start time.Time) {
	if p, ok := ctx.Value(createdKey{}).(*time.Duration); ok {
		*p = time.Since(start)
	}
}

// load1 is the one-minute load average of a /proc/loadavg line.
func load1(s string) string {
	if f := strings.Fields(s); len(f) > 0 {
		return f[0]
	}
	return "?"
}

// quantile of the sorted samples (nearest rank).
func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// tti is one session's time to interactive: create, then the first echo
// answered. The connection is dialled before the clock starts and the
// session closed after it stops.
func (s *harnessServer) tti(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, s.url, s.token, client.Options{})
	if err != nil {
		return 0, fmt.Errorf("dial: %w", err)
	}
	defer func() { _ = c.Close() }()
	start := time.Now()
	sess, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("session.create: %w", err)
	}
	markCreated(ctx, start)
	defer func() { _ = sess.Close(context.WithoutCancel(ctx)) }()
	obs, err := sess.Call(ctx, "terminal", map[string]any{"command": "echo ready"}, nil)
	d := time.Since(start)
	switch {
	case err != nil:
		return 0, fmt.Errorf("echo: %w", err)
	case obs.IsError || !strings.Contains(obs.Text(), "ready"):
		return 0, fmt.Errorf("echo: %q", obs.Text())
	}
	return d, nil
}

// dockerTTI is the baseline: `docker run --rm IMAGE true`, created to removed.
func dockerTTI(cli *dclient.Client, image string, labels map[string]string) func(context.Context) (time.Duration, error) {
	return func(ctx context.Context) (time.Duration, error) {
		t := time.Now()
		err := dockerRun(ctx, cli, image, labels)
		markCreated(ctx, t)
		return time.Since(t), err
	}
}

func runScaleSuite(ctx context.Context, e *env) (_ []row, err error) {
	n := *scaleN
	if n < 1 {
		return nil, errors.New("scale: -scale-n must be ≥ 1")
	}
	modes := strings.Split(*scaleModes, ",")
	for _, m := range modes {
		if !slices.Contains([]string{"sequential", "staggered", "burst"}, m) {
			return nil, fmt.Errorf("scale: unknown mode %q in -scale-modes (have sequential, staggered, burst)", m)
		}
	}
	apis := strings.Split(*scaleAPIs, ",")
	for _, a := range apis {
		if !slices.Contains([]string{"ws", "mcp-session", "mcp-handle"}, a) {
			return nil, fmt.Errorf("scale: unknown way in %q in -scale-apis (have ws, mcp-session, mcp-handle)", a)
		}
	}
	setups := strings.Split(*scaleSetups, ",")
	var pools []int
	for _, x := range setups {
		switch x {
		case "docker":
		case "cold":
			pools = append(pools, 0)
		case "pool":
			pools = append(pools, n)
		default:
			return nil, fmt.Errorf("scale: unknown setup %q in -scale-setups (have docker, cold, pool)", x)
		}
	}
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	bin, image, quiet := su.bin, su.image, su.quiet
	const serverKey = "sandboxd.bench.scale"
	rs, err := newRunScope()
	if err != nil {
		return nil, err
	}
	defer rs.end(&err, "scale")
	cli := rs.cli
	if _, err := cli.ImageInspect(ctx, image); err != nil {
		return nil, fmt.Errorf("scale: image %s (is the engine up? make test-image): %w", image, err)
	}
	var results []scaleResult
	add := func(setup string, r scaleResult) {
		r.Setup = setup
		e.logf("scale: %s %s: %d/%d ok, wall %.0f ms", setup, r.Mode, r.OK, r.N, r.WallMS)
		results = append(results, r)
	}
	labels := rs.labels(serverKey, "docker")
	if slices.Contains(setups, "docker") {
		for _, m := range modes {
			add("docker-run", launch(ctx, m, n, *scaleStagger, dockerTTI(cli, image, labels)))
		}
	}
	for _, pool := range pools {
		kind := "cold"
		if pool > 0 {
			kind = "pool"
		}
		// One server per pool setting; every way in draws from it in turn.
		srv, err := startHarnessServer(ctx, bin, image, rs.labels(serverKey, kind), pool, *harnessStarts, quiet)
		if err != nil {
			return nil, err
		}
		for _, api := range apis {
			one := map[string]func(context.Context) (time.Duration, error){
				"ws": srv.tti, "mcp-session": srv.mcpSessionTTI, "mcp-handle": srv.mcpHandleTTI,
			}[api]
			for _, m := range modes {
				if pool > 0 {
					if _, err := srv.waitPoolFull(ctx, pool); err != nil {
						srv.stop()
						return nil, err
					}
				}
				add(api+"-"+kind, launch(ctx, m, n, *scaleStagger, one))
			}
		}
		srv.stop()
	}
	printScale(os.Stdout, results)
	if *scaleJSON != "" {
		b, err := json.MarshalIndent(results, "", " ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(*scaleJSON, b, 0o644); err != nil {
			return nil, err
		}
		e.logf("scale: raw samples in %s", *scaleJSON)
	}
	return nil, nil
}

func printScale(w *os.File, results []scaleResult) {
	fmt.Fprintln(w, "time to interactive (ms): create → first echo answered; docker-run: `docker run --rm IMAGE true`")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "setup\tmode\tN\tmedian\tp95\tp99\tsuccess\twall\tcreate p50\tload\t")
	for _, r := range results {
		s := slices.Clone(r.Samples)
		slices.Sort(s)
		c := slices.Clone(r.CreateMS)
		slices.Sort(c)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%.1f\t%.1f\t%.1f\t%.0f%%\t%.0f\t%.1f\t%s→%s\t\n", r.Setup, r.Mode, r.N,
			quantile(s, 0.5), quantile(s, 0.95), quantile(s, 0.99), 100*float64(r.OK)/float64(r.N), r.WallMS,
			quantile(c, 0.5), load1(r.LoadStart), load1(r.LoadAvg))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}
