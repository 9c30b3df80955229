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

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxd/sandboxd/internal/testenv"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/server/daemon"
)

var (
	harnessExampleN      = flag.Int("harness-example-n", 10, "harness-example suite: instances per batch, all at once")
	harnessExampleRounds = flag.Int("harness-example-rounds", 2, "harness-example suite: batches per backend (sandboxd, sandboxd with user: image, docker; each round starts with the next)")
)

func init() {
	register(suite{
		name: "harness-example",
		about: "examples/harness as a harness runs it: N SWE-bench-shaped instances at once (patches, tests, FAIL_TO_PASS/PASS_TO_PASS) " +
			"through sandboxd's WebSocket API (editable /testbed and /opt/venv, 10 GiB quota as serve; and a user: image profile) vs the same binary's " +
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

// exampleBatch is one run of the example: the wall time (open to close)
// of every resolved instance, the batch's (process start to exit), and
// why the others were not resolved.
type exampleBatch struct {
	each       []time.Duration
	wall       time.Duration
	ran        int
	unresolved []string
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
	// The image's user as its harness expects it (docs/harness.md §2): no
	// seeding, the mode the issue found at parity with Docker.
	configFile := filepath.Join(e.tmp, "harness-example.yaml")
	if err := os.WriteFile(configFile, []byte("profiles:\n  swe-as-image:\n    image: "+base+"\n    user: image\n    writable_rootfs: true\n"), 0o600); err != nil {
		return nil, err
	}
	quiet := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	srv, err := startInProcess(ctx, "harness-example", bin, base, quiet, scope.labels(), 2*time.Minute, func(c *daemon.Config) {
		c.DiskBackend = daemon.DiskAuto // serve's default: a 10 GiB quota per volume (in the state folder)
		c.ConfigPath = configFile
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		srv.stop()
		// A writable root's shared agent volume outlives the daemon (issue
		// 24, part 4): this run's own, removed before the leftover check.
		vols, lerr := scope.cli.VolumeList(context.Background(), volume.ListOptions{Filters: filters.NewArgs(
			filters.Arg("label", scopeKey+"="+scope.value), filters.Arg("label", sdocker.LabelAgent))})
		if lerr == nil {
			for _, v := range vols.Volumes {
				_ = scope.cli.VolumeRemove(context.Background(), v.Name, false)
			}
		}
	}()
	addr := srv.ws

	runBatch := func(backend string, count int) (exampleBatch, error) {
		args := []string{"-json", "-n", strconv.Itoa(count), "-parallel", strconv.Itoa(count)}
		switch backend {
		case "docker":
			args = append(args, "-backend", "docker")
		case "sandboxd":
			args = append(args, "-addr", addr, "-token", srv.token)
		case "sandboxd-image":
			args = append(args, "-addr", addr, "-token", srv.token, "-profile", "swe-as-image")
		}
		cmd := exec.CommandContext(ctx, harness, args...)
		var stdout bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, e.log
		start := time.Now()
		runErr := cmd.Run()
		b := exampleBatch{wall: time.Since(start)}
		sc := bufio.NewScanner(&stdout)
		for sc.Scan() {
			var r exampleResult
			if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
				return b, fmt.Errorf("the example's output: %w: %q", err, sc.Text())
			}
			b.ran++
			if !r.Resolved {
				b.unresolved = append(b.unresolved, r.Instance+": "+cmp.Or(r.Error, "not resolved"))
				continue
			}
			b.each = append(b.each, time.Duration(r.Seconds*float64(time.Second)))
		}
		var exit *exec.ExitError
		switch {
		case runErr != nil && (!errors.As(runErr, &exit) || exit.ExitCode() != 1): // 1: some not resolved
			return b, fmt.Errorf("%s: the example: %w", backend, runErr)
		case b.ran != count:
			return b, fmt.Errorf("%s: %d results for %d instances", backend, b.ran, count)
		}
		e.logf("harness-example: %s, %d at once: %.1fs, %d resolved", backend, count, b.wall.Seconds(), count-len(b.unresolved))
		return b, nil
	}

	// Warm-up (untimed): builds the instance images the engine lacks and
	// reads the images once through each backend.
	backends := []string{"sandboxd", "sandboxd-image", "docker"}
	for _, backend := range backends {
		if b, err := runBatch(backend, 3); err != nil || len(b.unresolved) > 0 {
			return nil, fmt.Errorf("warm-up: %w", cmp.Or(err, fmt.Errorf("%s: %s", backend, strings.Join(b.unresolved, "; "))))
		}
	}
	batches := map[string][]exampleBatch{}
	for i := range rounds {
		for j := range backends { // each round starts with the next backend
			backend := backends[(i+j)%len(backends)]
			b, err := runBatch(backend, n)
			if err != nil {
				return nil, err
			}
			batches[backend] = append(batches[backend], b)
		}
	}
	sb, si, dk := batches["sandboxd"], batches["sandboxd-image"], batches["docker"]
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
	// Instances that were not resolved (a create lost to the server's
	// start deadline under load, issue 24) are counted in the scenario and
	// fail the suite; the rows keep the resolved ones' times.
	var lost []string
	resolved := func(backend string) string {
		ran, failed := 0, 0
		for _, b := range batches[backend] {
			ran += b.ran
			failed += len(b.unresolved)
			if len(b.unresolved) > 0 {
				lost = append(lost, fmt.Sprintf("%s: %d of %d not resolved, e.g. %s", backend, len(b.unresolved), b.ran, b.unresolved[0]))
			}
		}
		return fmt.Sprintf("%d of %d resolved", ran-failed, ran)
	}
	baseline := "examples/harness -backend docker: docker run + docker exec, same images, patches and test command"
	dockerDone := resolved("docker")
	rows := []row{
		{scenario: fmt.Sprintf("harness-example: one instance of %d at once through sandboxd, editable /testbed and /opt/venv (create, patches, tests, close; %s)", n, resolved("sandboxd")),
			s: sampleOfDurations(each(sb)), baseline: baseline + " (one instance; " + dockerDone + ")", base: sampleOfDurations(each(dk))},
		{scenario: fmt.Sprintf("harness-example: %d instances at once through sandboxd, editable paths, the whole batch", n),
			s: sampleOfDurations(walls(sb)), baseline: baseline + " (the batch)", base: sampleOfDurations(walls(dk))},
		{scenario: fmt.Sprintf("harness-example: one instance of %d at once through sandboxd, the image's user (root) and a writable root (%s)", n, resolved("sandboxd-image")),
			s: sampleOfDurations(each(si)), baseline: baseline + " (one instance)", base: sampleOfDurations(each(dk))},
		{scenario: fmt.Sprintf("harness-example: %d instances at once through sandboxd, the image's user, the whole batch", n),
			s: sampleOfDurations(walls(si)), baseline: baseline + " (the batch)", base: sampleOfDurations(walls(dk))},
	}
	if len(lost) > 0 {
		return rows, errors.New(strings.Join(lost, "; "))
	}
	return rows, nil
}
