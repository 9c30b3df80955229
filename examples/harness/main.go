// Command harness runs SWE-bench-shaped task instances in parallel through
// sandboxd and prints a results table, as an evaluation harness does: for
// each instance a session of its image, the model's patch applied (here a
// known-good fix), the test patch and the tests run, FAIL_TO_PASS and
// PASS_TO_PASS read from the test log, the session closed.
//
//	make task-image run                                  # one terminal
//	go run ./examples/harness -n 6 -parallel 3           # another (README.md)
//
// It speaks sandboxd's WebSocket API through the Go client (package
// client): a harness puts patches in and takes logs out whole with the file
// transfer calls, which MCP clients do not have, and reads typed errors
// (busy, refused token, unknown profile). -backend docker runs the same work
// with `docker run` and `docker exec` instead, as the baseline of
// `make bench` (suite harness-example).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// Exit codes: every instance resolved, some not (or failed), the run
// could not start or stopped (usage, no server, refused token, unknown
// profile, missing image).
const (
	exitResolved   = 0
	exitUnresolved = 1
	exitError      = 2
)

type config struct {
	addr, token, profile, instances, backend string
	n, parallel                              int
	build, jsonOut                           bool
	timeout                                  time.Duration
}

func run(args []string, stdout, stderr io.Writer) int {
	var c config
	fs := flag.NewFlagSet("harness", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&c.addr, "addr", "127.0.0.1:7070", "sandboxd's address: HOST:PORT (make run serves on 127.0.0.1:7070) or a ws:// URL")
	fs.StringVar(&c.token, "token", "", "the operator token (default: $SANDBOXD_TOKEN, else the token file of a serve run by this user)")
	fs.StringVar(&c.profile, "profile", "", "a session profile of the server (serve --config); default: none, each session "+
		"gets the instance's image with editable /testbed and /opt/venv")
	fs.IntVar(&c.n, "n", 3, "instances to run: the instances in turn, as many copies as it takes")
	fs.IntVar(&c.parallel, "parallel", 3, "instances at once")
	fs.StringVar(&c.instances, "instances", "", "a folder of instance folders (instance.json, patch.diff, test_patch.diff; default: the built-in ones)")
	fs.StringVar(&c.backend, "backend", "sandboxd", "sandboxd, or docker: the same work with docker run + docker exec (the baseline)")
	fs.BoolVar(&c.build, "build", true, "build missing instance images with docker build (base_image + image.diff); false: the images are on sandboxd's engine")
	fs.BoolVar(&c.jsonOut, "json", false, "print one JSON object per instance instead of the table")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "bound of each command in a sandbox (git apply, the tests)")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: harness [flags]\n\nRuns SWE-bench-shaped task instances through sandboxd and prints a results table.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return exitError
	}
	fail := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "harness: "+format+"\n", a...)
		return exitError
	}
	switch {
	case fs.NArg() > 0:
		return fail("unexpected arguments %q (flags only; -h lists them)", fs.Args())
	case c.n < 1 || c.n > 10000:
		return fail("-n %d: want 1 to 10000", c.n)
	case c.parallel < 1 || c.parallel > 1000:
		return fail("-parallel %d: want 1 to 1000", c.parallel)
	case c.timeout < time.Second:
		return fail("-timeout %s: want at least 1s", c.timeout)
	case c.backend != "sandboxd" && c.backend != "docker":
		return fail("-backend %q: want sandboxd or docker", c.backend)
	}
	instances, err := instancesFrom(c.instances)
	if err != nil {
		return fail("%v", err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, format+"\n", a...) }
	if err := ensureImages(ctx, instances, c.build, logf); err != nil {
		return fail("%v", err)
	}
	var b backend = dockerBackend{}
	if c.backend == "sandboxd" {
		cl, err := connect(ctx, c)
		if err != nil {
			return fail("%v", err)
		}
		defer cl.Close()
		b = &sandboxdBackend{c: cl, profile: c.profile}
	}

	start := time.Now()
	results := runAll(ctx, b, instances, c, logf)
	wall := time.Since(start)
	for _, r := range results {
		if r.fatal {
			return fail("%s", r.Error)
		}
	}
	if c.jsonOut {
		enc := json.NewEncoder(stdout)
		for _, r := range results {
			if err := enc.Encode(r); err != nil {
				return fail("%v", err)
			}
		}
	} else if err := printTable(stdout, results, c, len(instances), wall); err != nil {
		return fail("%v", err)
	}
	for _, r := range results {
		if !r.Resolved {
			return exitUnresolved
		}
	}
	return exitResolved
}

// connect dials sandboxd's WebSocket API with the token; its errors say
// what to do (no server there, a refused token).
func connect(ctx context.Context, c config) (*client.Client, error) {
	u := c.addr
	if !strings.Contains(u, "://") {
		u = "ws://" + u + wsproto.Path
	}
	if p, err := url.Parse(u); err != nil || (p.Scheme != "ws" && p.Scheme != "wss") || p.Host == "" {
		return nil, fmt.Errorf("-addr %q: want HOST:PORT or ws://HOST:PORT%s", c.addr, wsproto.Path)
	}
	token, err := findToken(c.token)
	if err != nil {
		return nil, err
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cl, err := client.Dial(dctx, u, token, client.Options{Reconnect: true})
	if err != nil {
		return nil, fmt.Errorf("sandboxd: %w", err)
	}
	return cl, nil
}

// findToken is -token, else $SANDBOXD_TOKEN, else the token file a local
// `sandboxd serve` of this user writes (docs/running.md).
func findToken(flagToken string) (string, error) {
	if flagToken != "" {
		return flagToken, nil
	}
	if t := os.Getenv("SANDBOXD_TOKEN"); t != "" {
		return t, nil
	}
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no token: pass -token or set SANDBOXD_TOKEN (%v)", err)
		}
		dir = filepath.Join(home, ".local", "state")
	}
	file := filepath.Join(dir, "sandboxd", "token")
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("no token: pass -token or set SANDBOXD_TOKEN (serve prints where it keeps its token; %s: %v)", file, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// errStopped is why the instances still running stop after another's
// error stopped the run.
var errStopped = errors.New("stopped by another instance's error")

// runAll runs c.n instances (the instances in turn), c.parallel at once;
// the first error that stops the run (stopError) cancels the rest.
func runAll(ctx context.Context, b backend, instances []*instance, c config, logf func(string, ...any)) []result {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	results := make([]result, c.n)
	sem := make(chan struct{}, c.parallel)
	var wg sync.WaitGroup
	for i := range c.n {
		in := instances[i%len(instances)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
				defer func() { <-sem }()
			case <-ctx.Done():
				results[i] = result{Instance: in.ID, Copy: i / len(instances), Error: "not run: " + context.Cause(ctx).Error()}
				return
			}
			r := runInstance(ctx, b, in, c.timeout)
			r.Copy = i / len(instances)
			results[i] = r
			if r.fatal || errors.Is(context.Cause(ctx), errStopped) {
				cancel(errStopped)
				return // the error that stops the run says it all
			}
			logf("%s: %s in %.1fs%s", r.name(), resolvedText(r), r.Seconds, errText(r))
		}()
	}
	wg.Wait()
	return results
}

func (r result) name() string {
	if r.Copy == 0 {
		return r.Instance
	}
	return fmt.Sprintf("%s#%d", r.Instance, r.Copy)
}

func resolvedText(r result) string {
	switch {
	case r.Resolved:
		return "resolved"
	case r.Error != "":
		return "error"
	}
	return "not resolved"
}

func errText(r result) string {
	if r.Error == "" {
		return ""
	}
	return ": " + r.Error
}

// printTable writes the results table, then the errors, then a summary.
func printTable(w io.Writer, results []result, c config, distinct int, wall time.Duration) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INSTANCE\tFAIL_TO_PASS\tPASS_TO_PASS\tRESOLVED\tWALL")
	resolved := 0
	for _, r := range results {
		yes := "no"
		if r.Resolved {
			yes = "yes"
			resolved++
		} else if r.Error != "" {
			yes = "no (error)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1fs\n", r.name(), r.FailToPass, r.PassToPass, yes, r.Seconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range results {
		if r.Error != "" {
			fmt.Fprintf(w, "%s: %s\n", r.name(), r.Error)
		}
	}
	how := "sandboxd at " + c.addr
	if c.profile != "" {
		how += ", profile " + c.profile
	}
	if c.backend == "docker" {
		how = "docker run + docker exec"
	}
	_, err := fmt.Fprintf(w, "\n%d of %d resolved (%d distinct, at most %d at once, %s) in %.1fs\n",
		resolved, len(results), distinct, min(c.parallel, len(results)), how, wall.Seconds())
	return err
}
