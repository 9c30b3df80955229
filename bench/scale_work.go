package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	dclient "github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
)

var (
	workSessions = flag.String("work-sessions", "10,50,100", "scale-work suite: counts of sessions working at once, comma-separated")
	workImage    = flag.String("work-image", sandbox.DefaultImage, "scale-work, scale-grep and density suites: the session image (needs sh, git, rg, grep, find)")
	workFiles    = flag.Int("work-files", 3000, "scale-work suite: files of the git repository each session makes")
	workPace     = flag.Duration("work-pace", 30*time.Second, "scale-work suite: length of the agent-pace phase (0: none)")
	workSat      = flag.Duration("work-sat", 15*time.Second, "scale-work suite: length of the saturation phase (0: none)")
	workJSON     = flag.String("work-json", "bench-scale-work.json", "scale-work suite: where the raw samples go (\"\": nowhere)")
)

func init() {
	register(suite{
		name: "scale-work",
		about: "N sessions working at once through the WebSocket API (-work-sessions, default 10,50,100): 20 terminal commands " +
			"(git status in a git repository of -work-files files, made on the host and checked out in each session, among them) and 20 file_editor edits each; then, at the largest N, " +
			"an agent's pace (an echo every 100-300 ms per session) and saturation (no pause) with the CPU time per call; " +
			"memory of the daemon and the agents; writes raw samples to -work-json",
		run:   runWorkSuite,
		named: true,
	})
}

// workCall is one timed call of the work phases.
type workCall struct {
	Kind string  `json:"kind"` // terminal, git-status, file_editor, echo
	MS   float64 `json:"ms"`
	Err  string  `json:"err,omitempty"`
}

// workPhase is one phase at one N.
type workPhase struct {
	Phase    string     `json:"phase"` // work, pace, saturation
	N        int        `json:"n"`
	WallMS   float64    `json:"wall_ms"`
	Calls    []workCall `json:"calls"`
	CPU      cpuReport  `json:"cpu"`
	LoadAvg  string     `json:"loadavg"`
	Finished time.Time  `json:"finished"`
}

type cpuReport struct {
	SelfMS, DockerdMS, ContainerdMS, ShimsMS, ContainersMS float64
}

func cpuReportOf(s cpuSnapshot) cpuReport {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	return cpuReport{ms(s.self), ms(s.dockerd), ms(s.containerd), ms(s.shims), ms(s.containers)}
}

func (c cpuReport) totalMS() float64 {
	return c.SelfMS + c.DockerdMS + c.ContainerdMS + c.ShimsMS + c.ContainersMS
}

// workMemory is what the daemon and the agents held at one N.
type workMemory struct {
	N              int     `json:"n"`
	DaemonIdleKB   int64   `json:"daemon_idle_kb"`   // this process before the sessions
	DaemonLoadedKB int64   `json:"daemon_loaded_kb"` // with N sessions open, after the work
	AgentIdleKB    []int64 `json:"agent_idle_kb"`    // each container's first process, right after create
	AgentAfterKB   []int64 `json:"agent_after_kb"`   // the same after the work phase
	ContainerKB    []int64 `json:"container_after_kb"`
}

// workSession is one session of the work suite: its own connection.
type workSession struct {
	c    *client.Client
	sess *client.Session
}

// call runs one tool call and times it; an error observation fails it.
func (w *workSession) call(ctx context.Context, name string, args map[string]any) (*time.Duration, error) {
	t := time.Now()
	obs, err := w.sess.Call(ctx, name, args, nil)
	d := time.Since(t)
	if err != nil {
		return nil, err
	}
	if obs.IsError {
		return nil, fmt.Errorf("%s: %.200s", name, obs.Text())
	}
	return &d, nil
}

func runWorkSuite(ctx context.Context, e *env) (_ []row, err error) {
	var counts []int
	for _, f := range strings.Split(*workSessions, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("scale-work: -work-sessions: %q is not a count ≥ 1", f)
		}
		counts = append(counts, n)
	}
	if *workFiles < 1 {
		return nil, errors.New("scale-work: -work-files must be ≥ 1")
	}
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	const serverKey = "sandboxd.bench.work"
	rs, err := newRunScope()
	if err != nil {
		return nil, err
	}
	defer rs.end(&err, "")
	if _, err := rs.cli.ImageInspect(ctx, *workImage); err != nil {
		return nil, fmt.Errorf("scale-work: image %s (make image): %w", *workImage, err)
	}
	repo := filepath.Join(e.tmp, "repo")
	if err := hostRepo(ctx, repo, *workFiles); err != nil {
		return nil, fmt.Errorf("scale-work: making the repository on the host (git needed): %w", err)
	}
	var phases []workPhase
	var mems []workMemory
	for i, n := range counts {
		last := i == len(counts)-1
		ps, mem, err := workRound(ctx, e, rs.cli, su.bin, repo, n, last, su.quiet, rs.labels(serverKey, strconv.Itoa(n)))
		phases = append(phases, ps...)
		if mem != nil {
			mems = append(mems, *mem)
		}
		if err != nil {
			return nil, fmt.Errorf("scale-work at %d sessions: %w", n, err)
		}
	}
	printWork(os.Stdout, phases, mems)
	if *workJSON != "" {
		b, err := json.MarshalIndent(map[string]any{"phases": phases, "memory": mems}, "", " ")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(*workJSON, b, 0o644); err != nil {
			return nil, err
		}
		e.logf("scale-work: raw samples in %s", *workJSON)
	}
	return nil, nil
}

// hostRepo makes, on the host, a git repository of files small Go files
// in dir (100 a directory), committed and packed (git gc), so that each
// session gets it as an upload of .git and a checkout rather than
// thousands of writes and hashes of its own.
func hostRepo(ctx context.Context, dir string, files int) error {
	for i := range files {
		d := filepath.Join(dir, fmt.Sprintf("pkg%d", i/100))
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		body := fmt.Sprintf("package pkg%d\n\n// F%d is file %d.\nfunc F%d() int { return %d }\n", i/100, i, i, i, i)
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.go", i)), []byte(body), 0o644); err != nil {
			return err
		}
	}
	for _, args := range [][]string{
		{"init", "-q", "-b", "main", "."},
		{"add", "-A"},
		{"-c", "user.email=bench@sandboxd", "-c", "user.name=bench", "commit", "-qm", "init"},
		{"gc", "-q"},
	} {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// workCommands are the 20 terminal commands and 20 file edits each session
// runs in the work phase, interleaved.
func workSteps(i int) (string, map[string]any, string) {
	path := fmt.Sprintf("/workspace/repo/edit%d.go", i/2)
	if i%2 == 1 { // file_editor: create, then str_replace and view in turn
		if i%4 == 1 {
			return "file_editor", map[string]any{"command": "create", "path": path, "file_text": fmt.Sprintf("package edit\n\nvar x = %d\n", i)}, "file_editor"
		}
		prev := fmt.Sprintf("/workspace/repo/edit%d.go", (i-2)/2)
		return "file_editor", map[string]any{"command": "str_replace", "path": prev, "old_str": "package edit", "new_str": "package edited"}, "file_editor"
	}
	cmds := []string{
		"cd /workspace/repo && git status --short | wc -l",
		"echo hello",
		"ls /workspace/repo | wc -l",
		"cat /workspace/repo/pkg1/f1.go",
		"grep -c func /workspace/repo/pkg2/f2.go",
	}
	c := cmds[(i/2)%len(cmds)]
	kind := "terminal"
	if strings.Contains(c, "git status") {
		kind = "git-status"
	}
	return "terminal", map[string]any{"command": c}, kind
}

func workRound(ctx context.Context, e *env, cli *dclient.Client, bin, repo string, n int, last bool, log *slog.Logger, labels map[string]string) ([]workPhase, *workMemory, error) {
	e.logf("scale-work: %d sessions: starting the server", n)
	rssIdle, _ := procStatusKB(os.Getpid(), "VmRSS")
	srv, err := startHarnessServer(ctx, bin, *workImage, labels, 0, 0, log)
	if err != nil {
		return nil, nil, err
	}
	defer srv.stop()
	mem := &workMemory{N: n, DaemonIdleKB: rssIdle}
	// Create the N sessions, 10 at a time (a loaded engine misses its
	// start deadlines in a burst of 50: the burst is the scale suite's
	// business), then give each its repository.
	ws := make([]*workSession, n)
	var wg sync.WaitGroup
	errs := make([]error, n)
	sem := make(chan struct{}, 10)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			cctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
			defer cancel()
			c, err := client.Dial(cctx, srv.url, srv.token, client.Options{})
			if err != nil {
				errs[i] = err
				return
			}
			s, err := c.CreateSession(cctx, client.CreateOptions{})
			if err != nil {
				_ = c.Close()
				errs[i] = err
				return
			}
			ws[i] = &workSession{c: c, sess: s}
		})
	}
	wg.Wait()
	defer func() {
		var wg sync.WaitGroup
		for _, w := range ws {
			if w != nil {
				wg.Go(func() {
					cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
					defer cancel()
					_ = w.sess.Close(cctx)
					_ = w.c.Close()
				})
			}
		}
		wg.Wait()
	}()
	if err := errors.Join(errs...); err != nil {
		return nil, nil, fmt.Errorf("creating the sessions: %w", err)
	}
	ids, err := runContainers(ctx, cli, "sandboxd.bench.work", labels["sandboxd.bench.work"])
	if err != nil {
		return nil, nil, err
	}
	for _, id := range ids {
		if _, agent, _, err := containerRSSKB(ctx, cli, id); err == nil {
			mem.AgentIdleKB = append(mem.AgentIdleKB, agent)
		}
	}
	e.logf("scale-work: %d sessions: uploading the repository (%d files) and checking it out in each", n, *workFiles)
	for i, w := range ws {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := w.call(ctx, "terminal", map[string]any{"command": "mkdir -p /workspace/repo"}); err != nil {
				errs[i] = err
				return
			}
			pr, pw := io.Pipe()
			go tarTree(filepath.Join(repo, ".git"), ".git/", pw)
			if err := w.sess.Upload(ctx, "/workspace/repo", pr); err != nil {
				_ = pr.CloseWithError(err)
				errs[i] = fmt.Errorf("uploading the repository: %w", err)
				return
			}
			obs, err := w.sess.Call(ctx, "terminal", map[string]any{"command": "cd /workspace/repo && git reset -q --hard && git status --short | wc -l && git ls-files | wc -l", "timeout": 600.0}, nil)
			switch {
			case err != nil:
				errs[i] = err
			case obs.IsError || !strings.Contains(obs.Text(), strconv.Itoa(*workFiles)):
				errs[i] = fmt.Errorf("checking out the repository: %.300s", obs.Text())
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, mem, err
	}

	var phases []workPhase
	// The work phase: every session's 40 calls, all sessions at once.
	e.logf("scale-work: %d sessions: work phase", n)
	phases = append(phases, workPhaseRun(ctx, "work", ws, ids, func(ctx context.Context, w *workSession, add func(workCall)) {
		for i := range 40 {
			name, args, kind := workSteps(i)
			d, err := w.call(ctx, name, args)
			c := workCall{Kind: kind}
			if err != nil {
				c.Err = err.Error()
			} else {
				c.MS = float64(d.Microseconds()) / 1000
			}
			add(c)
		}
	}))
	mem.DaemonLoadedKB, _ = procStatusKB(os.Getpid(), "VmRSS")
	for _, id := range ids {
		if total, agent, _, err := containerRSSKB(ctx, cli, id); err == nil {
			mem.AgentAfterKB = append(mem.AgentAfterKB, agent)
			mem.ContainerKB = append(mem.ContainerKB, total)
		}
	}
	echo := func(ctx context.Context, w *workSession, add func(workCall)) {
		d, err := w.call(ctx, "terminal", map[string]any{"command": "echo hi"})
		c := workCall{Kind: "echo"}
		if err != nil {
			c.Err = err.Error()
		} else {
			c.MS = float64(d.Microseconds()) / 1000
		}
		add(c)
	}
	if last && *workPace > 0 {
		e.logf("scale-work: %d sessions: agent pace for %s", n, *workPace)
		phases = append(phases, workPhaseRun(ctx, "pace", ws, ids, func(ctx context.Context, w *workSession, add func(workCall)) {
			end := time.Now().Add(*workPace)
			// Each session starts at a random point of its first pause, so
			// the calls are spread as independent agents' would be.
			for wait := rand.N(200 * time.Millisecond); time.Now().Add(wait).Before(end); wait = 100*time.Millisecond + rand.N(200*time.Millisecond) {
				select {
				case <-ctx.Done():
					return
				case <-time.After(wait):
				}
				echo(ctx, w, add)
			}
		}))
	}
	if last && *workSat > 0 {
		e.logf("scale-work: %d sessions: saturation for %s", n, *workSat)
		phases = append(phases, workPhaseRun(ctx, "saturation", ws, ids, func(ctx context.Context, w *workSession, add func(workCall)) {
			for end := time.Now().Add(*workSat); time.Now().Before(end) && ctx.Err() == nil; {
				echo(ctx, w, add)
			}
		}))
	}
	return phases, mem, nil
}

// workPhaseRun runs body in every session at once and times the whole.
func workPhaseRun(ctx context.Context, name string, ws []*workSession, ids []string, body func(context.Context, *workSession, func(workCall))) workPhase {
	p := workPhase{Phase: name, N: len(ws)}
	var mu sync.Mutex
	add := func(c workCall) {
		mu.Lock()
		p.Calls = append(p.Calls, c)
		mu.Unlock()
	}
	cpu0 := takeCPU(ids)
	start := time.Now()
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() { body(ctx, w, add) })
	}
	wg.Wait()
	p.WallMS = float64(time.Since(start).Microseconds()) / 1000
	p.CPU = cpuReportOf(takeCPU(ids).sub(cpu0))
	p.LoadAvg, p.Finished = loadAvg(), time.Now().UTC()
	return p
}

func printWork(w *os.File, phases []workPhase, mems []workMemory) {
	fmt.Fprintln(w, "sessions working at once (WebSocket API, one connection each); per-call latency in ms; CPU: ms per call, "+
		"sandboxd+clients (this process) / engine (dockerd, containerd, shims) / containers (cgroup cpuacct)")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "phase\tN\tkind\tcalls\tfailed\tp50\tp99\tcalls/s\tCPU/call\tsandboxd\tengine\tcontainers\tload\t")
	for _, p := range phases {
		ok, failed := map[string][]float64{}, map[string]int{}
		var kinds []string
		for _, c := range p.Calls {
			if !slices.Contains(kinds, c.Kind) {
				kinds = append(kinds, c.Kind)
			}
			if c.Err != "" {
				failed[c.Kind]++
				continue
			}
			ok[c.Kind] = append(ok[c.Kind], c.MS)
		}
		all := []float64{}
		for _, k := range kinds {
			all = append(all, ok[k]...)
		}
		nCalls := float64(len(p.Calls))
		per := func(ms float64) float64 { return ms / max(nCalls, 1) }
		line := func(kind string, s []float64, f int, total bool) {
			slices.Sort(s)
			cps, cpu, sd, eng, ctr := "", "", "", "", ""
			if total {
				cps = fmt.Sprintf("%.0f", nCalls/(p.WallMS/1000))
				cpu = fmt.Sprintf("%.2f", per(p.CPU.totalMS()))
				sd = fmt.Sprintf("%.2f", per(p.CPU.SelfMS))
				eng = fmt.Sprintf("%.2f", per(p.CPU.DockerdMS+p.CPU.ContainerdMS+p.CPU.ShimsMS))
				ctr = fmt.Sprintf("%.2f", per(p.CPU.ContainersMS))
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%.1f\t%.1f\t%s\t%s\t%s\t%s\t%s\t%s\t\n", p.Phase, p.N, kind, len(s)+f, f,
				quantile(s, 0.5), quantile(s, 0.99), cps, cpu, sd, eng, ctr, strings.Join(strings.Fields(p.LoadAvg)[:min(3, len(strings.Fields(p.LoadAvg)))], " "))
		}
		nf := 0
		for _, f := range failed {
			nf += f
		}
		line("all", all, nf, true)
		if len(kinds) > 1 {
			for _, k := range kinds {
				line(k, ok[k], failed[k], false)
			}
		}
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "memory (MiB): the daemon (this process's VmRSS: sandboxd in-process with its clients), the agent (VmRSS of each container's first process), a container's processes")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "N\tdaemon idle\tdaemon with N\tper session\tagent idle p50\tagent idle max\tagent after p50\tagent after max\tcontainer after p50\t")
	for _, m := range mems {
		mib := func(kb int64) float64 { return float64(kb) / 1024 }
		med := func(v []int64) float64 { s := slices.Clone(v); slices.Sort(s); return mib(pick(s, 0.5)) }
		mx := func(v []int64) float64 { s := slices.Clone(v); slices.Sort(s); return mib(pick(s, 1)) }
		fmt.Fprintf(tw, "%d\t%.1f\t%.1f\t%.2f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t\n", m.N, mib(m.DaemonIdleKB), mib(m.DaemonLoadedKB),
			mib(m.DaemonLoadedKB-m.DaemonIdleKB)/float64(m.N), med(m.AgentIdleKB), mx(m.AgentIdleKB), med(m.AgentAfterKB), mx(m.AgentAfterKB), med(m.ContainerKB))
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
}

// pick is the q-quantile (nearest rank) of sorted integers.
func pick(sorted []int64, q float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(q*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
