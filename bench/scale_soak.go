package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	dclient "github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/client"
)

var (
	densityN      = flag.Int("density-n", 200, "density suite: idle sessions")
	densitySettle = flag.Duration("density-settle", 10*time.Second, "density suite: wait this long after the last create before reading memory")
	soakCycles    = flag.Int("soak-cycles", 1000, "soak suite: create/echo/close cycles (WebSocket and MCP in turn)")
	soakPool      = flag.Int("soak-pool", 4, "soak suite: warm pool size")
	soakJSON      = flag.String("soak-json", "bench-soak.json", "soak and density suites: where the readings go (\"\": nowhere)")
)

func init() {
	register(suite{
		name: "density",
		about: "memory of idle sessions (image: -work-image): the host's MemAvailable before and after -density-n idle sessions " +
			"(one WebSocket connection each), the daemon's RSS idle, at half and at all of them, each agent's RSS; how many fit in 24 GiB",
		run:   runDensitySuite,
		named: true,
	})
	register(suite{
		name: "soak",
		about: "-soak-cycles create/echo/close cycles with a warm pool of -soak-pool (WebSocket and MCP 2025-11-25 in turn; image: " +
			"$SANDBOXD_TEST_IMAGE or sandboxd-test:latest), then the run's containers, volumes and networks, the daemon's goroutines, " +
			"open descriptors and RSS at start, middle and end",
		run:   runSoakSuite,
		named: true,
	})
}

// reading is the state of the in-process daemon at one point.
type reading struct {
	At         string  `json:"at"`
	Cycles     int     `json:"cycles"`
	RSSKB      int64   `json:"rss_kb"`
	HeapKB     uint64  `json:"heap_inuse_kb"`
	Goroutines int     `json:"goroutines"`
	FDs        int     `json:"fds"`
	Containers int     `json:"containers"`
	Volumes    int     `json:"volumes"`
	Networks   int     `json:"networks"`
	TTIp50MS   float64 `json:"tti_p50_ms,omitempty"` // of the cycles since the last reading
	TTIp99MS   float64 `json:"tti_p99_ms,omitempty"`
	LoadAvg    string  `json:"loadavg"`
}

// labelled counts the engine's containers (all, running or not), volumes
// and networks that carry key=value.
func labelled(ctx context.Context, cli *dclient.Client, key, value string) (ctrs, vols, nets int, err error) {
	f := filters.NewArgs(filters.Arg("label", key+"="+value))
	c, err1 := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	v, err2 := cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	n, err3 := cli.NetworkList(ctx, network.ListOptions{Filters: f})
	if err := errors.Join(err1, err2, err3); err != nil {
		return 0, 0, 0, err
	}
	return len(c), len(v.Volumes), len(n), nil
}

// settle lets the process come to rest before a reading: idle client
// connections closed (the MCP client's HTTP keep-alives), a collection.
func settle() {
	if t, ok := http.DefaultTransport.(*http.Transport); ok {
		t.CloseIdleConnections()
	}
	time.Sleep(2 * time.Second)
	runtime.GC()
}

func read(ctx context.Context, cli *dclient.Client, key, value, at string, cycles int) reading {
	r := reading{At: at, Cycles: cycles, Goroutines: runtime.NumGoroutine(), LoadAvg: loadAvg()}
	r.RSSKB, _ = procStatusKB(os.Getpid(), "VmRSS")
	r.FDs, _ = openFDs(os.Getpid())
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapKB = ms.HeapInuse / 1024
	r.Containers, r.Volumes, r.Networks, _ = labelled(ctx, cli, key, value)
	return r
}

func runSoakSuite(ctx context.Context, e *env) (_ []row, err error) {
	n, pool := *soakCycles, *soakPool
	if n < 2 || pool < 1 {
		return nil, errors.New("soak: -soak-cycles must be ≥ 2 and -soak-pool ≥ 1")
	}
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	rs, err := newRunScope()
	if err != nil {
		return nil, err
	}
	var readings []reading
	var failures []string
	done := 0 // cycles run, interrupted or not
	defer func() {
		// After the server's shutdown: nothing of the run may be left.
		r := read(context.Background(), rs.cli, scopeKey, rs.value, "after shutdown", done)
		readings = append(readings, r)
		printSoak(os.Stdout, readings, failures, done, n, pool)
		rs.end(&err, "")
		if *soakJSON != "" {
			b, _ := json.MarshalIndent(map[string]any{"readings": readings, "failures": failures}, "", " ")
			if werr := os.WriteFile(*soakJSON, b, 0o644); werr != nil {
				err = errors.Join(err, werr)
			}
		}
	}()
	srv, err := startHarnessServer(ctx, su.bin, su.image, rs.labels(), pool, 0, su.quiet)
	if err != nil {
		return nil, err
	}
	stopped := false
	defer func() {
		if !stopped {
			srv.stop()
		}
	}()
	profile := func(at string) {
		p := fmt.Sprintf("%s/soak-goroutines-%s.txt", e.tmp, at)
		if f, err := os.Create(p); err == nil {
			_ = pprof.Lookup("goroutine").WriteTo(f, 1)
			_ = f.Close()
		}
	}
	rest := func(at string, done int, samples []float64) error {
		if err := srv.waitPoolIdle(ctx, pool); err != nil {
			return err
		}
		settle()
		r := read(ctx, rs.cli, scopeKey, rs.value, at, done)
		slices.Sort(samples)
		r.TTIp50MS, r.TTIp99MS = quantile(samples, 0.5), quantile(samples, 0.99)
		readings = append(readings, r)
		profile(at)
		e.logf("soak: %s (%d cycles): RSS %.1f MiB, %d goroutines, %d fds, %d containers, %d volumes, %d networks",
			at, done, float64(r.RSSKB)/1024, r.Goroutines, r.FDs, r.Containers, r.Volumes, r.Networks)
		return nil
	}
	// A few cycles first, untimed: the first connections, caches, the
	// runtime's pools grown to their working size.
	for i := range 10 {
		one := srv.tti
		if i%2 == 1 {
			one = srv.mcpSessionTTI
		}
		if _, err := one(ctx); err != nil {
			return nil, fmt.Errorf("soak: warm-up: %w", err)
		}
	}
	if err := rest("start", 0, nil); err != nil {
		return nil, err
	}
	var samples []float64
	for i := range n {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		one := srv.tti
		if i%2 == 1 {
			one = srv.mcpSessionTTI
		}
		d, err := one(ctx)
		done = i + 1
		if err != nil {
			failures = append(failures, fmt.Sprintf("cycle %d: %v", i, err))
		} else {
			samples = append(samples, float64(d.Microseconds())/1000)
		}
		if i+1 == n/2 || i+1 == n {
			at := "middle"
			if i+1 == n {
				at = "end"
			}
			if err := rest(at, i+1, samples); err != nil {
				return nil, err
			}
			samples = nil
		} else if (i+1)%100 == 0 {
			// Unsettled (the pool refills, connections close): a trace, not a reading.
			rss, _ := procStatusKB(os.Getpid(), "VmRSS")
			fds, _ := openFDs(os.Getpid())
			e.logf("soak: %d/%d cycles, %d failed; now RSS %.1f MiB, %d goroutines, %d fds", i+1, n, len(failures), float64(rss)/1024, runtime.NumGoroutine(), fds)
		}
	}
	srv.stop()
	stopped = true
	settle()
	return nil, nil
}

func printSoak(w *os.File, rs []reading, failures []string, done, n, pool int) {
	fmt.Fprintf(w, "soak: %d of %d create/echo/close cycles (WebSocket and MCP in turn), warm pool %d; %d failed\n", done, n, pool, len(failures))
	for _, f := range failures[:min(5, len(failures))] {
		fmt.Fprintln(w, "  ", f)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "at\tcycles\tRSS MiB\theap MiB\tgoroutines\tfds\tcontainers\tvolumes\tnetworks\tTTI p50\tTTI p99\tload\t")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.1f\t%d\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%s\t\n", r.At, r.Cycles, float64(r.RSSKB)/1024, float64(r.HeapKB)/1024,
			r.Goroutines, r.FDs, r.Containers, r.Volumes, r.Networks, r.TTIp50MS, r.TTIp99MS, strings.Join(strings.Fields(r.LoadAvg)[:3], " "))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}

// densityReading is the host and the daemon at one count of idle sessions.
type densityReading struct {
	Sessions       int     `json:"sessions"`
	MemAvailableKB int64   `json:"mem_available_kb"`
	DaemonRSSKB    int64   `json:"daemon_rss_kb"`
	AgentKB        []int64 `json:"agent_rss_kb,omitempty"`
	ContainerKB    []int64 `json:"container_rss_kb,omitempty"`
	LoadAvg        string  `json:"loadavg"`
}

func runDensitySuite(ctx context.Context, e *env) (_ []row, err error) {
	n := *densityN
	if n < 2 {
		return nil, errors.New("density: -density-n must be ≥ 2")
	}
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	scope, err := newRunScope()
	if err != nil {
		return nil, err
	}
	defer scope.end(&err, "")
	srv, err := startHarnessServer(ctx, su.bin, *workImage, scope.labels(), 0, 0, su.quiet)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	var rs []densityReading
	defer func() { // what was read, even when a later create failed
		if len(rs) < 2 {
			return
		}
		printDensity(os.Stdout, rs)
		if *soakJSON != "" {
			b, _ := json.MarshalIndent(rs, "", " ")
			p := strings.TrimSuffix(*soakJSON, ".json") + "-density.json"
			if werr := os.WriteFile(p, b, 0o644); werr != nil {
				err = errors.Join(err, werr)
				return
			}
			e.logf("density: readings in %s", p)
		}
	}()
	take := func(k int, agents bool) error {
		settle()
		r := densityReading{Sessions: k, LoadAvg: loadAvg()}
		r.DaemonRSSKB, _ = procStatusKB(os.Getpid(), "VmRSS")
		var err error
		if r.MemAvailableKB, err = fileKB("/proc/meminfo", "MemAvailable"); err != nil {
			return err
		}
		if agents {
			ids, err := runContainers(ctx, scope.cli, scopeKey, scope.value)
			if err != nil {
				return err
			}
			for _, id := range ids {
				if total, agent, _, err := containerRSSKB(ctx, scope.cli, id); err == nil {
					r.AgentKB, r.ContainerKB = append(r.AgentKB, agent), append(r.ContainerKB, total)
				}
			}
		}
		rs = append(rs, r)
		e.logf("density: %d sessions: MemAvailable %.0f MiB, daemon RSS %.1f MiB", k, float64(r.MemAvailableKB)/1024, float64(r.DaemonRSSKB)/1024)
		return nil
	}
	if err := take(0, false); err != nil {
		return nil, err
	}
	type open struct {
		c *client.Client
		s *client.Session
	}
	var mu sync.Mutex
	var live []open
	defer func() {
		var wg sync.WaitGroup
		for _, o := range live {
			wg.Go(func() {
				cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
				defer cancel()
				_ = o.s.Close(cctx)
				_ = o.c.Close()
			})
		}
		wg.Wait()
	}()
	// Create in two halves, 10 at a time (a loaded engine times out a
	// burst of hundreds), reading at each half.
	for _, half := range []int{n / 2, n - n/2} {
		sem := make(chan struct{}, 10)
		var wg sync.WaitGroup
		var errs []error
		for range half {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
				defer cancel()
				c, err := client.Dial(cctx, srv.url, srv.token, client.Options{})
				if err == nil {
					var s *client.Session
					if s, err = c.CreateSession(cctx, client.CreateOptions{}); err == nil {
						// One call, so the shell of the terminal is up as in a used session.
						if _, err = s.Call(cctx, "terminal", map[string]any{"command": "true"}, nil); err == nil {
							mu.Lock()
							live = append(live, open{c, s})
							mu.Unlock()
							return
						}
						_ = s.Close(context.WithoutCancel(cctx))
					}
					_ = c.Close()
				}
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, fmt.Errorf("density: %d creates failed: %w", len(errs), err)
		}
		e.logf("density: %d sessions up; waiting %s", len(live), *densitySettle)
		time.Sleep(*densitySettle)
		if err := take(len(live), len(live) == n); err != nil {
			return nil, err
		}
	}
	return nil, nil
}

func printDensity(w *os.File, rs []densityReading) {
	base, last := rs[0], rs[len(rs)-1]
	mib := func(kb int64) float64 { return float64(kb) / 1024 }
	fmt.Fprintln(w, "density: idle sessions (one WebSocket connection and one terminal call each); host memory from /proc/meminfo MemAvailable (shared host: other work moves it)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "sessions\tMemAvailable MiB\thost used per session MiB\tdaemon RSS MiB\tdaemon per session MiB\tload\t")
	for _, r := range rs {
		per, dper := "", ""
		if r.Sessions > 0 {
			per = fmt.Sprintf("%.1f", mib(base.MemAvailableKB-r.MemAvailableKB)/float64(r.Sessions))
			dper = fmt.Sprintf("%.3f", mib(r.DaemonRSSKB-base.DaemonRSSKB)/float64(r.Sessions))
		}
		fmt.Fprintf(tw, "%d\t%.0f\t%s\t%.1f\t%s\t%s\t\n", r.Sessions, mib(r.MemAvailableKB), per, mib(r.DaemonRSSKB), dper, strings.Join(strings.Fields(r.LoadAvg)[:3], " "))
	}
	_ = tw.Flush()
	a, c := slices.Clone(last.AgentKB), slices.Clone(last.ContainerKB)
	slices.Sort(a)
	slices.Sort(c)
	if per := mib(base.MemAvailableKB-last.MemAvailableKB) / float64(last.Sessions); per > 0 {
		fmt.Fprintf(w, "idle sessions in 24 GiB at %.1f MiB each: %.0f\n", per, 24*1024/per)
	}
	if len(a) > 0 {
		fmt.Fprintf(w, "agent RSS (MiB) p50 %.1f max %.1f; a container's processes p50 %.1f max %.1f (%d containers)\n",
			mib(pick(a, 0.5)), mib(pick(a, 1)), mib(pick(c, 0.5)), mib(pick(c, 1)), len(a))
	}
	fmt.Fprintln(w)
}

// waitPoolIdle waits until the warm pool holds size sandboxes and starts
// none: a start in flight owns goroutines, a volume and descriptors that a
// leak count must not take for leaks.
func (s *harnessServer) waitPoolIdle(ctx context.Context, size int) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		if p := s.m.Pools(); len(p) == 1 && p[0].Ready >= size && p[0].Starting == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the warm pool did not settle: %+v: %w", s.m.Pools(), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
