package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// workDir is where the patches, the evaluation script and its log go in
// each sandbox: under /workspace, which sandboxd's file transfers reach in
// every kind of session.
const workDir = "/workspace/harness"

// maxLog bounds the evaluation log read back: what comes out of a sandbox
// is the sandbox's to choose, so it is bounded and only parsed, never
// printed whole.
const maxLog = 16 << 20

// box is one task's sandbox, as the work below needs it. The sandboxd
// backend (sandboxd.go) and the docker baseline (docker.go) implement it.
type box interface {
	// put writes data to workDir/name.
	put(ctx context.Context, name string, data []byte) error
	// run runs a shell command in /testbed and returns its exit code and
	// the end of its output.
	run(ctx context.Context, command string, timeout time.Duration) (exit int, out string, err error)
	// get reads workDir/name back whole, at most maxLog bytes.
	get(ctx context.Context, name string) ([]byte, error)
	close(ctx context.Context) error
}

// backend opens a box for an instance.
type backend interface {
	open(ctx context.Context, in *instance) (box, error)
}

// tally is x of y tests passed.
type tally struct {
	Passed int `json:"passed"`
	Total  int `json:"total"`
}

func (t tally) String() string { return fmt.Sprintf("%d/%d", t.Passed, t.Total) }

// result is one run of one instance: a row of the table.
type result struct {
	Instance   string  `json:"instance"`
	Copy       int     `json:"copy"` // which copy of the instance (0-based)
	FailToPass tally   `json:"fail_to_pass"`
	PassToPass tally   `json:"pass_to_pass"`
	Resolved   bool    `json:"resolved"`
	Seconds    float64 `json:"wall_seconds"` // open to close
	Error      string  `json:"error,omitempty"`

	fatal bool // the error stops the run (stopError)
}

// evalScript is the evaluation as SWE-bench runs it, after the model's
// patch: the files the test patch touches back at the base commit (the
// model may have edited tests), the test patch, the test command; all
// output to eval.log, read back whole rather than through the terminal's
// 30,000-character view. Exit 3: the test patch does not apply.
const evalScript = `#!/bin/bash
cd /testbed || exit 2
log=` + workDir + `/eval.log
git apply --numstat ` + workDir + `/test_patch.diff | while IFS=$'\t' read -r _ _ f; do
    git cat-file -e "HEAD:$f" 2>/dev/null && git checkout -q HEAD -- "$f"
done
git apply -v ` + workDir + `/test_patch.diff > "$log" 2>&1 || { echo '>>>>> test patch does not apply' >> "$log"; exit 3; }
echo '>>>>> tests start' >> "$log"
{ TEST_COMMAND ; } >> "$log" 2>&1
echo ">>>>> tests exit $?" >> "$log"
`

// runInstance does one instance's work in a box of b: put the patches in,
// apply the model's patch, run the evaluation, read its log, close.
// Every failure is in the result's Error; the box is always closed.
func runInstance(ctx context.Context, b backend, in *instance, timeout time.Duration) (r result) {
	r = result{Instance: in.ID, FailToPass: tally{Total: len(in.FailToPass)}, PassToPass: tally{Total: len(in.PassToPass)}}
	start := time.Now()
	defer func() { r.Seconds = time.Since(start).Seconds() }()
	bx, err := b.open(ctx, in)
	if err != nil {
		r.Error = "create: " + err.Error()
		r.fatal = errors.As(err, new(stopError))
		return r
	}
	defer func() {
		// Close even when ctx is done: a session left open holds a
		// container until its idle timeout.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if err := bx.close(cctx); err != nil && r.Error == "" {
			r.Error = "close: " + err.Error()
		}
	}()
	if err := evaluate(ctx, bx, in, timeout, &r); err != nil {
		r.Error = err.Error()
	}
	return r
}

func evaluate(ctx context.Context, bx box, in *instance, timeout time.Duration, r *result) error {
	for name, data := range map[string][]byte{
		"patch.diff": in.patch, "test_patch.diff": in.testPatch, "eval.sh": []byte(strings.Replace(evalScript, "TEST_COMMAND", in.TestCommand, 1)),
	} {
		if err := bx.put(ctx, name, data); err != nil {
			return fmt.Errorf("putting %s in: %w", name, err)
		}
	}
	// The model's patch. (The first git command in a new container of the
	// image may re-read every file: it gets the same timeout as the tests.)
	code, out, err := bx.run(ctx, "git -C /testbed apply -v "+workDir+"/patch.diff", timeout)
	if err != nil {
		return fmt.Errorf("applying the patch: %w", err)
	}
	if code != 0 {
		return fmt.Errorf("the patch does not apply (git apply exit %d): %s", code, gitError(out))
	}
	code, _, err = bx.run(ctx, "bash "+workDir+"/eval.sh", timeout)
	if err != nil {
		return fmt.Errorf("running the evaluation: %w", err)
	}
	log, err := bx.get(ctx, "eval.log")
	if err != nil {
		return fmt.Errorf("reading the evaluation log: %w", err)
	}
	if code == 3 {
		return fmt.Errorf("the test patch does not apply: %s", gitError(string(log)))
	}
	if !bytes.Contains(log, []byte(">>>>> tests exit ")) {
		return fmt.Errorf("the evaluation did not finish (exit %d): %s", code, lastLine(string(log)))
	}
	status := parseUnittest(log)
	r.FailToPass.Passed = countPassed(status, in.FailToPass)
	r.PassToPass.Passed = countPassed(status, in.PassToPass)
	r.Resolved = r.FailToPass.Passed == r.FailToPass.Total && r.PassToPass.Passed == r.PassToPass.Total
	return nil
}

func countPassed(status map[string]bool, tests []string) int {
	n := 0
	for _, t := range tests {
		if status[t] {
			n++
		}
	}
	return n
}

var (
	// "test_mean (tests.test_stats.TestStats.test_mean)" (Python 3.11+) or
	// "test_mean (tests.test_stats.TestStats)" (before), then the rest.
	unittestTest = regexp.MustCompile(`^([A-Za-z_][A-Za-z0-9_]*) \(([A-Za-z0-9_.]+)\)(.*)$`)
	// How a verbose run ends a test's line.
	unittestStatus = regexp.MustCompile(`(?:^| \.\.\. )(ok|FAIL|ERROR|skipped.*|expected failure|unexpected success)$`)
)

// parseUnittest reads `python -m unittest -v` output: test id to whether it
// passed (ok or an expected failure). A test with a docstring has its
// status on the next line; a test that prints has it on a later one.
func parseUnittest(log []byte) map[string]bool {
	status := map[string]bool{}
	pending := ""
	sc := bufio.NewScanner(bytes.NewReader(log))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimRight(sc.Text(), "\r")
		if m := unittestTest.FindStringSubmatch(line); m != nil {
			id := m[2]
			if !strings.HasSuffix(id, "."+m[1]) {
				id += "." + m[1]
			}
			pending = id
			line = m[3]
		}
		if pending == "" {
			continue
		}
		if m := unittestStatus.FindStringSubmatch(line); m != nil {
			status[pending] = m[1] == "ok" || m[1] == "expected failure"
			pending = ""
		}
	}
	return status
}

// gitError is the last "error: ..." line of git's output, else its last
// line, made printable and short.
func gitError(out string) string {
	lines := strings.Split(out, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "error: ") || strings.HasPrefix(lines[i], "fatal: ") {
			return printable(strings.TrimSpace(lines[i]), 200)
		}
	}
	return lastLine(out)
}

// lastLine is the last non-empty line of s, made printable and short:
// it may come from the sandbox.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return printable(s, 200)
}

// printable drops control characters and cuts s to n runes.
func printable(s string, n int) string {
	var b strings.Builder
	for _, c := range s {
		if n == 0 {
			b.WriteString("…")
			break
		}
		if c < 0x20 || c == 0x7f || (c >= 0x80 && c < 0xa0) {
			c = ' '
		}
		b.WriteRune(c)
		n--
	}
	return b.String()
}

// stopError is an error no other instance can get past (a refused token,
// an unknown profile): the run stops at the first one.
type stopError struct{ error }

func (e stopError) Unwrap() error { return e.error }
