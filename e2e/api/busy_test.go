package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cpuHog runs stress-ng with n CPU workers beside the test, as issue 24's
// load did; it is killed when the test ends (and ends by itself after
// limit). The test is skipped without stress-ng (apt-get install
// stress-ng), unless SANDBOXD_E2E_REQUIRE_IMAGES is set.
func cpuHog(t *testing.T, n int, limit time.Duration) {
	t.Helper()
	bin, err := exec.LookPath("stress-ng")
	if err != nil {
		if os.Getenv("SANDBOXD_E2E_REQUIRE_IMAGES") != "" {
			t.Fatalf("stress-ng is missing although SANDBOXD_E2E_REQUIRE_IMAGES is set: %v", err)
		}
		t.Skipf("stress-ng is missing (apt-get install stress-ng): %v", err)
	}
	cmd := exec.Command(bin, "--cpu", fmt.Sprint(n), "--timeout", fmt.Sprintf("%ds", int(limit.Seconds())), "--quiet")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // its workers are its children
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // only the hog's own group
		_ = cmd.Wait()                                      // killed: its exit status says so
	})
}

// Issue 24's acceptance: 20 `sandboxd run --profile` at once of an
// editable-paths profile (the task image: /testbed and /opt/venv seeded),
// with --max-concurrent-starts 4 and stress-ng --cpu 4 beside. Every one
// starts, directly or after the typed busy answer ("retry after N s",
// which run retries by itself); none fails at a deadline. --max-start-wait
// is short here so that the busy path is taken by a burst of this size.
func TestBurstOfEditableCreatesUnderLoad(t *testing.T) {
	img := harnessTaskImage(t)
	const n, slots = 20, 4
	cpuHog(t, 4, 170*time.Second)
	state := t.TempDir()
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("profiles:\n  swe:\n    image: %s\n    editable_paths: [/testbed, /opt/venv]\n", img)), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := startServe(t, state, "--config", config, "--max-concurrent-starts", fmt.Sprint(slots), "--max-start-wait", "30s")
	defer serve.stop(t)

	type result struct {
		code     int
		out, err string
		took     time.Duration
	}
	results := make([]result, n)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			cmd := exec.CommandContext(ctx, binary, "run", "--server", serve.url, "--state-dir", state, "--profile", "swe", "--",
				"id -u; stat -c %u /testbed/setup.py; touch /opt/venv/written && echo ok")
			var out, errOut bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errOut
			start := time.Now()
			err := cmd.Run()
			r := result{out: out.String(), err: errOut.String(), took: time.Since(start)}
			var ee *exec.ExitError
			switch {
			case errors.As(err, &ee):
				r.code = ee.ExitCode()
			case err != nil:
				r.code, r.err = -1, r.err+err.Error()
			}
			results[i] = r
		})
	}
	wg.Wait()
	wall := time.Since(began)

	started, retried := 0, 0
	var took []time.Duration
	for i, r := range results {
		if strings.Contains(r.err, "retrying in") {
			retried++
			if !strings.Contains(r.err, "sandboxd is busy") || !strings.Contains(r.err, "retry after") {
				t.Errorf("run %d retried on something other than the typed busy answer: %s", i, r.err)
			}
		}
		if strings.Contains(r.err, "deadline") {
			t.Errorf("run %d failed at a deadline: %s", i, r.err)
		}
		if r.code != 0 || r.out != "1000\n1000\nok\n" {
			t.Errorf("run %d: exit %d, %q; stderr %s", i, r.code, r.out, r.err)
			continue
		}
		started++
		took = append(took, r.took)
	}
	slices.Sort(took)
	if len(took) > 0 {
		t.Logf("%d of %d started (%d after a busy answer) in %v; per run: min %v, median %v, max %v",
			started, n, retried, wall.Round(time.Second), took[0].Round(100*time.Millisecond),
			took[len(took)/2].Round(100*time.Millisecond), took[len(took)-1].Round(100*time.Millisecond))
	}
	if started != n {
		t.Fatalf("%d of %d started\n%s", started, n, serve.logs())
	}
}
