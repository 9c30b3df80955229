package api

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/server/auth"
)

// examples/harness, built from this tree and run as its README says
// against a `sandboxd serve`: three instances at once, each resolved
// (every FAIL_TO_PASS and PASS_TO_PASS test passing after the patches,
// which fails when a patch does not apply); then an instance whose patch
// does not apply, which the table must report as such.
func TestHarnessExample(t *testing.T) {
	harnessTaskImage(t) // the instances' base image, or skip
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	harness := filepath.Join(t.TempDir(), "harness")
	build := exec.CommandContext(ctx, "go", "build", "-o", harness, "./examples/harness")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building examples/harness: %v\n%s", err, out)
	}
	state := t.TempDir()
	serve := startServe(t, state)
	defer serve.stop(t)
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimSuffix(strings.TrimPrefix(serve.url, "ws://"), "/v1/ws")
	runHarness := func(args ...string) (string, int) {
		t.Helper()
		cmd := exec.CommandContext(ctx, harness, append([]string{"-addr", addr}, args...)...)
		cmd.Env = append(os.Environ(), "SANDBOXD_TOKEN="+token)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatalf("harness %v: %v\n%s", args, err, stderr.String())
		}
		t.Logf("harness %v: exit %d\n%s%s", args, cmd.ProcessState.ExitCode(), stdout.String(), stderr.String())
		return stdout.String(), cmd.ProcessState.ExitCode()
	}

	out, code := runHarness("-n", "3", "-parallel", "3")
	rows := tableRows(out)
	if code != 0 || len(rows) != 3 {
		t.Fatalf("exit %d, %d rows; want 0 and 3:\n%s\n%s", code, len(rows), out, serve.logs())
	}
	seen := map[string]bool{}
	for _, f := range rows {
		// INSTANCE FAIL_TO_PASS PASS_TO_PASS RESOLVED WALL
		if len(f) != 5 || f[3] != "yes" || !allPassed(f[1]) || !allPassed(f[2]) {
			t.Errorf("not resolved: %q", f)
		}
		seen[f[0]] = true
	}
	if len(seen) != 3 {
		t.Errorf("want 3 distinct instances, got %v", seen)
	}
	if !strings.Contains(out, "3 of 3 resolved") {
		t.Errorf("no summary line:\n%s", out)
	}

	// A patch that does not apply: calc-mean with its patch's context changed.
	dir := filepath.Join(t.TempDir(), "calc-mean")
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(root, "examples/harness/testdata/calc-mean"))); err != nil {
		t.Fatal(err)
	}
	patch := filepath.Join(dir, "patch.diff")
	b, err := os.ReadFile(patch)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(patch, bytes.Replace(b, []byte("-    return sum(xs) / (len(xs) + 1)"), []byte("-    return sum(xs) / (len(xs) + 2)"), 1), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = runHarness("-n", "1", "-instances", filepath.Dir(dir))
	rows = tableRows(out)
	if code != 1 || len(rows) != 1 || rows[0][3] != "no" || !strings.Contains(out, "calc-mean: the patch does not apply (git apply exit 1): error: ") {
		t.Fatalf("a patch that does not apply: exit %d (want 1):\n%s", code, out)
	}
}

// tableRows are the fields of the harness table's rows (the header and
// what follows the first blank line left out).
func tableRows(out string) [][]string {
	var rows [][]string
	for _, line := range strings.Split(out, "\n")[1:] {
		if strings.TrimSpace(line) == "" {
			break
		}
		f := strings.Fields(line)
		if len(f) == 6 && f[3] == "no" && f[4] == "(error)" { // RESOLVED "no (error)"
			f = append(f[:4], f[5])
		}
		if len(f) > 0 && !strings.Contains(f[0], ":") {
			rows = append(rows, f)
		}
	}
	return rows
}

// allPassed reports whether "x/y" has x == y (every test passed).
func allPassed(s string) bool {
	x, y, ok := strings.Cut(s, "/")
	return ok && x == y
}
