// Command bench measures sandboxd end to end and prints a markdown table:
//
//	go run ./bench                 # every suite
//	go run ./bench -suite agent    # one suite (comma-separate several)
//	go run ./bench -list           # the suites
//
// A suite is a named function that returns rows (scenario, p50, p99, an
// optional baseline and target). Suites register themselves from the init
// of their own file (see agent_suite.go), so adding one touches no other
// file. Timing is wall clock per operation on this machine; each scenario
// runs a few warm-up iterations first.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"
)

// suite is one group of scenarios sharing a setup.
type suite struct {
	name  string
	about string
	run   func(ctx context.Context, env *env) ([]row, error)
	// named: the suite runs only when -suite names it, not in "all" (the
	// scale suites: hundreds of sessions, minutes each; `make bench-scale`).
	named bool
}

var suites []suite

// register adds a suite; call it from an init function.
func register(s suite) { suites = append(suites, s) }

// env is what suites share: flags and helpers.
type env struct {
	iterations float64 // multiplier of each scenario's default iteration count
	agentBin   string  // a prebuilt sandboxd binary, or "" to build one
	tmp        string  // scratch directory, removed at the end
	log        io.Writer
}

// n scales a scenario's default iteration count by -scale (at least 5).
func (e *env) n(def int) int { return max(5, int(float64(def)*e.iterations)) }

func (e *env) logf(format string, args ...any) { fmt.Fprintf(e.log, format+"\n", args...) }

func main() { os.Exit(run()) }

// run is main's body; it returns the exit code so that its deferred cleanup
// (the scratch directory, the signal handler) runs before the process exits.
func run() int {
	suiteFlag := flag.String("suite", "all", "suites to run, comma-separated, or all")
	list := flag.Bool("list", false, "list the suites and exit")
	scale := flag.Float64("scale", 1, "multiply every scenario's iteration count (e.g. 0.2 for a smoke run, 5 for tighter p99s)")
	agentBin := flag.String("agent", "", "sandboxd binary to benchmark (default: build ./cmd/sandboxd with CGO_ENABLED=0)")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the bench process (the in-process servers and clients) to this file")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
		defer func() { _ = f.Close() }()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
		defer pprof.StopCPUProfile()
	}
	if *list {
		for _, s := range suites {
			note := ""
			if s.named {
				note = " [only when named: not in -suite all]"
			}
			fmt.Printf("%-10s %s%s\n", s.name, s.about, note)
		}
		return 0
	}
	selected, err := selectSuites(*suiteFlag)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	tmp, err := os.MkdirTemp("", "sandboxd-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	e := &env{iterations: *scale, agentBin: *agentBin, tmp: tmp, log: os.Stderr}

	start := time.Now()
	var rows []row
	failed := false
	for _, s := range selected {
		e.logf("== suite %s: %s", s.name, s.about)
		r, err := s.run(ctx, e)
		rows = append(rows, r...)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: suite %s: %v\n", s.name, err)
			failed = true
		}
	}
	fmt.Printf("sandboxd bench: %s, %d CPUs, %s, %s, total %.1fs\n\n", runtime.GOOS+"/"+runtime.GOARCH, runtime.NumCPU(), runtime.Version(),
		time.Now().UTC().Format("2006-01-02"), time.Since(start).Seconds())
	if err := printTable(os.Stdout, rows); err != nil {
		fmt.Fprintln(os.Stderr, "bench: printing the table:", err)
		return 1
	}
	if failed {
		return 1
	}
	return 0
}

func selectSuites(spec string) ([]suite, error) {
	if spec == "all" || spec == "" {
		var out []suite
		for _, s := range suites {
			if !s.named {
				out = append(out, s)
			}
		}
		return out, nil
	}
	var out []suite
	for _, name := range strings.Split(spec, ",") {
		i := slices.IndexFunc(suites, func(s suite) bool { return s.name == strings.TrimSpace(name) })
		if i < 0 {
			var names []string
			for _, s := range suites {
				names = append(names, s.name)
			}
			return nil, fmt.Errorf("unknown suite %q; have %s", name, strings.Join(names, ", "))
		}
		out = append(out, suites[i])
	}
	return out, nil
}
