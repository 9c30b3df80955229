package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/server/daemon"
)

var (
	harnessExampleN      = flag.Int("harness-example-n", 10, "harness-example suite: instances per batch, all at once")
	harnessExampleRounds = flag.Int("harness-example-rounds", 2, "harness-example suite: batches per backend (sandboxd and docker alternate which goes first)")
)

func init() {
	register(suite{
		name: "harness-example",
		about: "examples/harness as a harness runs it: N SWE-bench-shaped instances at once (patches, tests, FAIL_TO_PASS/PASS_TO_PASS) " +
			"through sandboxd's WebSocket API (editable /testbed and /opt/venv, 10 GiB quota as serve) vs the same binary's " +
			"-backend docker (docker run + docker exec of the same images, patches and test command) in the same run " +
			"(base image: $SANDBOXD_TASK_IMAGE or sandboxd-task:latest; make task-image)",
		run: runHarnessExampleSuite,
	})
}

// exampleResult is one line of the example's -json output.
type exampleResult struct {
	Instance string  `json:"instance"`
	Resolved bool    `json:"resolved"`
	Seconds  float64 `json:"wall_seconds"`
	Error    string  `json:"error"`
}

// exampleBatch is one run of the example: every instance's wall time
// (open to close) and the batch's (process start to exit).
type exampleBatch struct {
	each []time.Duration
	wall time.Duration
}

func runHarnessExampleSuite(ctx context.Context, e *env) (_ []row, err error) {
	n, rounds := *harnessExampleN, *harnessExampleRounds
	if n < 1 || rounds < 1 {
		return nil, fmt.Errorf("-harness-example-n %d, -harness-example-rounds %d: want at least 1 each", n, rounds)
	}
	bin, err := e.sandboxdBinary()
	if err != nil {
		return nil, err
	}
	base := cmp.Or(os.Getenv("SANDBOXD_TASK_IMAGE"), "sandboxd-task:latest")
	if base != "sandboxd-task:latest" {
		return nil, fmt.Errorf("the example's instances are built on sandboxd-task:latest; SANDBOXD_TASK_IMAGE=%s is not supported by this suite", base)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return nil, err
	}
	harness := filepath.Join(e.tmp, "harness-example")
	build := exec.CommandContext(ctx, "go", "build", "-o", harness, "./examples/harness")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building examples/harness: %v\n%s", err, out)
	}

	scope, err := newRunScope()
	if err != nil {
		return nil, err
	}
	defer scope.end(&err, "harness-example suite")
	quiet := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := startInProcess(ctx, "harness-example", bin, base, quiet, scope.labels(), 2*time.Minute, func(c *daemon.Config) {
		c.DiskBackend = daemon.DiskAuto // serve's default: a 10 GiB quota per volume (in the state folder)
	})
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	addr := srv.ws

	runBatch := func(backend string, count int) (exampleBatch, error) {
		args := []string{"-json", "-n", strconv.Itoa(count), "-parallel", strconv.Itoa(count), "-backend", backend}
		if backend == "sandboxd" {
			args = append(args, "-addr", addr, "-token", srv.token)
		}
		cmd := exec.CommandContext(ctx, harness, args...)
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, e.log
		start := time.Now()
		runErr := cmd.Run()
		b := exampleBatch{wall: time.Since(start)}
		sc := bufio.NewScanner(&stdout)
		var unresolved []string
		for sc.Scan() {
			var r exampleResult
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				return b, fmt.Errorf("the example's output: %w: %q", err, sc.Text())
			}
			if !r.Resolved {
				unresolved = append(unresolved, r.Instance+": "+cmp.Or(r.Error, "not resolved"))
			}
			b.each = append(b.each, time.Duration(r.Seconds*float64(time.Second)))
		}
		switch {
		case len(unresolved) > 0:
			return b, fmt.Errorf("%s: %s", backend, strings.Join(unresolved, "; "))
		case runErr != nil:
			return b, fmt.Errorf("%s: the example: %w", backend, runErr)
		case len(b.each) != count:
			return b, fmt.Errorf("%s: %d results for %d instances", backend, len(b.each), count)
		}
		e.logf("harness-example: %s, %d at once: %.1fs", backend, count, b.wall.Seconds())
		return b, nil
	}

	// Warm-up (untimed): builds the instance images the engine lacks and
	// reads the images once through each backend.
	for _, backend := range []string{"docker", "sandboxd"} {
		if _, err := runBatch(backend, 3); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	var sb, dk []exampleBatch
	for i := range rounds {
		order := []string{"sandboxd", "docker"}
		if i%2 == 1 {
			order = []string{"docker", "sandboxd"}
		}
		for _, backend := range order {
			b, err := runBatch(backend, n)
			if err != nil {
				return nil, err
			}
			if backend == "sandboxd" {
				sb = append(sb, b)
			} else {
				dk = append(dk, b)
			}
		}
	}
	if ctx.Err() != nil {
		return nil, errors.New("interrupted")
	}
	each := func(bs []exampleBatch) (ds []time.Duration) {
		for _, b := range bs {
			ds = append(ds, b.each...)
		}
		return ds
	}
	walls := func(bs []exampleBatch) (ds []time.Duration) {
		for _, b := range bs {
			ds = append(ds, b.wall)
		}
		return ds
	}
	baseline := "examples/harness -backend docker: docker run + docker exec, same images, patches and test command"
	return []row{
		{scenario: fmt.Sprintf("harness-example: one instance of %d at once through sandboxd (create, patches, tests, close)", n),
			s: sampleOfDurations(each(sb)), baseline: baseline + " (one instance)", base: sampleOfDurations(each(dk))},
		{scenario: fmt.Sprintf("harness-example: %d instances at once through sandboxd, the whole batch", n),
			s: sampleOfDurations(walls(sb)), baseline: baseline + " (the batch)", base: sampleOfDurations(walls(dk))},
	}, nil
}
