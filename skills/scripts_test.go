package skills

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The built-in skills' scripts, run on the host against fixture projects:
// bash, coreutils, git and go are here; the other runners are tested where
// they are installed and skipped, saying so, where not.

// scriptResult is what one run of a script gave.
type scriptResult struct {
	out    map[string]any
	code   int
	stderr string
}

// runScript runs a built-in skill's script in dir and decodes its stdout,
// which must be exactly one JSON object.
func runScript(t *testing.T, script, dir string, env []string, args ...string) scriptResult {
	t.Helper()
	abs, err := filepath.Abs(script)
	require.NoError(t, err)
	cmd := exec.Command("bash", append([]string{abs}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN=local", "GOPROXY=off", "GOFLAGS=", "CARGO_TERM_COLOR=never",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	cmd.Env = append(cmd.Env, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err = cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	var out map[string]any
	dec := json.NewDecoder(&stdout)
	require.NoError(t, dec.Decode(&out), "stdout is not a JSON object; stderr: %s", stderr.String())
	assert.False(t, dec.More(), "more than one JSON value on stdout")
	return scriptResult{out: out, code: code, stderr: stderr.String()}
}

const runTests = "run-tests/scripts/run_tests.sh"

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

func needTool(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s is not installed on this host: the %s runner is not tested here", tool, tools[0])
		}
	}
}

// failures returns the failures' names and messages.
func failures(t *testing.T, out map[string]any) (names, messages []string) {
	t.Helper()
	list, ok := out["failures"].([]any)
	require.True(t, ok, "failures: %v", out["failures"])
	for _, f := range list {
		m := f.(map[string]any)
		names = append(names, m["name"].(string))
		messages = append(messages, m["message"].(string))
	}
	return names, messages
}

const goFailing = `package gt

import "testing"

func TestOK(t *testing.T) {}
func TestBad(t *testing.T) { t.Errorf("got %d, want <%d>", 1, 2) }
func TestSub(t *testing.T) {
	t.Run("one", func(t *testing.T) { t.Fatal("sub \"quoted\" failed") })
	t.Run("two", func(t *testing.T) {})
}
func TestSkip(t *testing.T) { t.Skip("later") }
`

func TestRunTestsGo(t *testing.T) {
	needTool(t, "go")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"go.mod":         "module example.com/gt\n\ngo 1.22\n",
		"gt_test.go":     goFailing,
		"broken/b.go":    "package broken\n\nfunc F() int { return undefinedName }\n",
		"good/g.go":      "package good\n",
		"good/g_test.go": "package good\n\nimport \"testing\"\n\nfunc TestGood(t *testing.T) {}\n",
	})
	r := runScript(t, runTests, dir, nil)
	assert.Equal(t, 0, r.code, "the tests ran: exit 0 whatever their outcome")
	assert.Equal(t, "failed", r.out["status"])
	assert.Equal(t, "go", r.out["runner"])
	assert.Equal(t, []any{"go"}, r.out["detected"])
	assert.Equal(t, "go test -json ./...", r.out["command"])
	assert.InDelta(t, 1, r.out["exit_code"], 0)
	assert.InDelta(t, 2, r.out["passed"], 0, "TestOK and TestGood")
	assert.InDelta(t, 2, r.out["failed"], 0, "TestBad and TestSub")
	assert.InDelta(t, 1, r.out["skipped"], 0)
	names, messages := failures(t, r.out)
	assert.Equal(t, []string{"example.com/gt.TestBad", "example.com/gt.TestSub/one", "example.com/gt/broken"}, names)
	assert.Equal(t, "gt_test.go:6: got 1, want <2>", messages[0])
	assert.Equal(t, `gt_test.go:8: sub "quoted" failed`, messages[1])
	assert.Contains(t, messages[2], "broken/b.go:3:")
	assert.Contains(t, messages[2], "undefined: undefinedName")
	assert.NotContains(t, r.out, "output_tail")
	assert.Contains(t, r.stderr, "go test -json ./...")

	t.Run("max failures", func(t *testing.T) {
		r := runScript(t, runTests, dir, nil, "--max-failures", "1")
		names, _ := failures(t, r.out)
		assert.Equal(t, []string{"example.com/gt.TestBad"}, names)
		assert.InDelta(t, 2, r.out["failures_omitted"], 0)
	})
	t.Run("path and filter", func(t *testing.T) {
		// The filter is one argument of go test, never shell text.
		r := runScript(t, runTests, filepath.Dir(dir), nil, filepath.Base(dir)+"/good", "--filter", "TestGood; touch pwned")
		assert.Equal(t, "passed", r.out["status"])
		assert.Equal(t, filepath.Join(dir, "good"), r.out["dir"])
		assert.Equal(t, `go test -json -run TestGood\;\ touch\ pwned ./...`, r.out["command"])
		assert.NoFileExists(t, filepath.Join(dir, "good", "pwned"))
		r = runScript(t, runTests, filepath.Join(dir, "good"), nil, "--runner=go", "--filter=TestGood")
		assert.Equal(t, "passed", r.out["status"])
		assert.InDelta(t, 0, r.out["exit_code"], 0)
		assert.InDelta(t, 1, r.out["passed"], 0)
		assert.Empty(t, r.out["failures"])
	})
}

// TestRunTestsDetect: which runners the files point at, in order.
func TestRunTestsDetect(t *testing.T) {
	needTool(t, "make")
	cases := []struct {
		name  string
		files map[string]string
		want  []any
	}{
		{"all of them", map[string]string{
			"go.mod": "module x\n", "Cargo.toml": "[package]\n", "package.json": `{"scripts": {"test": "node --test"}}`,
			"pytest.ini": "[pytest]\n", "Makefile": "test:\n\t@true\n",
		}, []any{"go", "cargo", "npm", "pytest", "make"}},
		{"npm's placeholder is no test script", map[string]string{
			"package.json": `{"scripts": {"test": "echo \"Error: no test specified\" && exit 1"}}`, "Makefile": "test:\n\t@true\n",
		}, []any{"make"}},
		{"pytest by its files", map[string]string{"pyproject.toml": "[project]\n", "tests/unit/test_x.py": "", "Makefile": "test:: build\n\t@true\nbuild:\n"}, []any{"pytest", "make"}},
		{"pytest in pyproject", map[string]string{"pyproject.toml": "[tool.pytest.ini_options]\n", "GNUmakefile": "test:\n\t@true\n"}, []any{"pytest", "make"}},
		{"a variable named test is no target", map[string]string{"Makefile": "test := 1\ntest:\n\t@true\n"}, []any{"make"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFiles(t, dir, c.files)
			r := runScript(t, runTests, dir, nil, "--runner", "make")
			assert.Equal(t, c.want, r.out["detected"])
			assert.Equal(t, "passed", r.out["status"])
		})
	}
	t.Run("none", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"Makefile": "build:\n\t@true\n", "README": "x"})
		r := runScript(t, runTests, dir, nil)
		assert.Equal(t, 3, r.code)
		assert.Equal(t, "no_runner", r.out["status"])
		assert.Equal(t, []any{}, r.out["detected"])
		assert.Contains(t, r.out["error"], "no go.mod, Cargo.toml")
	})
}

func TestRunTestsMake(t *testing.T) {
	needTool(t, "make")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"Makefile": "test:\n\t@echo \"checking \\\"things\\\"\"; exit 3\n"})
	r := runScript(t, runTests, dir, nil)
	assert.Equal(t, "error", r.out["status"], "make failed and no test is named")
	assert.Nil(t, r.out["passed"])
	assert.Empty(t, r.out["failures"])
	tail, _ := r.out["output_tail"].(string)
	assert.Contains(t, tail, `checking "things"`)
	assert.Contains(t, tail, "Error 3")
}

func TestRunTestsNpm(t *testing.T) {
	needTool(t, "npm", "node")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"package.json": `{"name": "x", "version": "1.0.0", "scripts": {"test": "node --test"}}`,
		"a.test.js": `const test = require('node:test'); const assert = require('node:assert');
test('adds', () => { assert.strictEqual(1 + 1, 2); });
test('breaks', () => { assert.strictEqual(1 + 1, 3); });
test.skip('later', () => {});
`,
	})
	r := runScript(t, runTests, dir, nil)
	assert.Equal(t, "failed", r.out["status"])
	assert.Equal(t, "npm", r.out["runner"])
	assert.InDelta(t, 1, r.out["passed"], 0)
	assert.InDelta(t, 1, r.out["failed"], 0)
	assert.InDelta(t, 1, r.out["skipped"], 0)
	names, messages := failures(t, r.out)
	assert.Equal(t, []string{"breaks"}, names)
	assert.Contains(t, messages[0], "a.test.js:3:1")
	assert.Contains(t, messages[0], "2 !== 3")
}

func TestRunTestsCargo(t *testing.T) {
	needTool(t, "cargo")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"Cargo.toml": "[package]\nname = \"ct\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
		"src/lib.rs": `pub fn add(a: i32, b: i32) -> i32 { a + b }
#[cfg(test)]
mod tests {
    use super::*;
    #[test] fn ok() { assert_eq!(add(1, 1), 2); }
    #[test] fn bad() { assert_eq!(add(1, 1), 3, "math is \"hard\""); }
    #[test] #[ignore] fn later() {}
}
`,
	})
	r := runScript(t, runTests, dir, []string{"CARGO_TARGET_DIR=" + filepath.Join(dir, "target"), "RUST_BACKTRACE=1"})
	assert.Equal(t, "failed", r.out["status"])
	assert.InDelta(t, 101, r.out["exit_code"], 0)
	assert.InDelta(t, 1, r.out["passed"], 0)
	assert.InDelta(t, 1, r.out["failed"], 0)
	assert.InDelta(t, 1, r.out["skipped"], 0)
	names, messages := failures(t, r.out)
	assert.Equal(t, []string{"tests::bad"}, names)
	assert.Contains(t, messages[0], `math is "hard"`)
	assert.NotContains(t, messages[0], "stack backtrace", "the backtrace is cut")
}

func TestRunTestsPytest(t *testing.T) {
	needTool(t, "pytest")
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"test_a.py": `import pytest
def test_a(): assert 1 == 2
def test_ok(): pass
class TestK:
    def test_m(self):
        assert {"a": 1}["a"] == 3, "bad \"value\""
@pytest.mark.skip
def test_s(): pass
`})
	r := runScript(t, runTests, dir, nil)
	assert.Equal(t, "failed", r.out["status"])
	assert.Equal(t, "pytest", r.out["runner"])
	assert.InDelta(t, 1, r.out["passed"], 0)
	assert.InDelta(t, 2, r.out["failed"], 0)
	assert.InDelta(t, 1, r.out["skipped"], 0)
	names, messages := failures(t, r.out)
	assert.Equal(t, []string{"test_a.py::test_a", "test_a.py::TestK::test_m"}, names)
	assert.Equal(t, "test_a.py:2: in test_a\nassert 1 == 2", messages[0])
	assert.Contains(t, messages[1], `AssertionError: bad "value"`)
	assert.NoDirExists(t, filepath.Join(dir, ".pytest_cache"))
}

func TestRunTestsErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"--runner", "ant"}, 2, `unknown runner "ant"`},
		{[]string{"--bogus"}, 2, "unknown option: --bogus"},
		{[]string{"a", "b"}, 2, "unexpected argument: b"},
		{[]string{"--max-failures", "-1"}, 2, `--max-failures "-1" is not a number`},
		{[]string{"--max-failures"}, 2, "--max-failures needs a value"},
		{[]string{"missing-dir"}, 2, "missing-dir is not a directory"},
	}
	for _, c := range cases {
		r := runScript(t, runTests, dir, nil, c.args...)
		assert.Equal(t, c.code, r.code, c.args)
		assert.Equal(t, "error", r.out["status"], c.args)
		assert.Contains(t, r.out["error"], c.err, c.args)
		assert.Contains(t, r.stderr, "usage: run_tests.sh", c.args)
	}
	// A runner that is not installed.
	r := runScript(t, runTests, dir, []string{"PATH=/usr/bin:/bin"}, "--runner", "cargo")
	assert.Equal(t, 3, r.code)
	assert.Equal(t, "cargo is not installed (not on PATH): install it, or choose another runner with --runner", r.out["error"])
}

const repoSummary = "repo-summary/scripts/repo_summary.sh"

// git runs git in dir with a fixed identity.
func git(t *testing.T, dir string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Ada \"L\" Lovelace", "GIT_AUTHOR_EMAIL=ada@example.com", "GIT_COMMITTER_NAME=Ada", "GIT_COMMITTER_EMAIL=ada@example.com",
		"GIT_AUTHOR_DATE=2024-05-06T07:08:09Z", "GIT_COMMITTER_DATE=2024-05-06T07:08:09Z")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "git %s: %s", strings.Join(args, " "), out)
}

func TestRepoSummary(t *testing.T) {
	needTool(t, "git")
	dir := t.TempDir()
	git(t, dir, "init", "-q", "-b", "main")
	writeFiles(t, dir, map[string]string{
		"main.go": "package main\n", "lib/util.go": "package lib\n", "lib/util_test.go": "package lib\n",
		"tool.py": "print(1)\n", "README.md": "# x\n", "Makefile": "all:\n", "LICENSE": "x\n",
		".gitignore": "*.log\n", "debug.log": "ignored\n",
	})
	git(t, dir, "add", "-A")
	git(t, dir, "commit", "-q", "-m", "first: \"quoted\"\tand tabbed")
	writeFiles(t, dir, map[string]string{"main.go": "package main\n\nfunc main() {}\n"})
	git(t, dir, "commit", "-q", "-am", "second")
	// Changes: one staged new file, one unstaged edit, one untracked, one
	// staged binary file.
	writeFiles(t, dir, map[string]string{"staged.go": "package main\n", "tool.py": "print(2)\nprint(3)\n", "new file.txt": "n\n", "blob.bin": "\x00\x01\x02"})
	git(t, dir, "add", "staged.go", "blob.bin")

	r := runScript(t, repoSummary, filepath.Join(dir, "lib"), nil)
	assert.Equal(t, 0, r.code, r.stderr)
	out := r.out
	assert.Equal(t, true, out["git"])
	assert.Equal(t, dir, out["root"])
	assert.Equal(t, filepath.Join(dir, "lib"), out["dir"])
	assert.Equal(t, "main", out["branch"])
	assert.Len(t, out["head"], 12)
	assert.Nil(t, out["upstream"])
	assert.NotContains(t, out, "ahead")

	status := out["status"].(map[string]any)
	assert.InDelta(t, 2, status["staged"], 0)
	assert.InDelta(t, 1, status["unstaged"], 0)
	assert.InDelta(t, 1, status["untracked"], 0)
	assert.InDelta(t, 0, status["conflicted"], 0)
	assert.Equal(t, []any{"A  blob.bin", "A  staged.go", " M tool.py", `?? "new file.txt"`}, status["entries"])

	diff := out["diff_stat"].(map[string]any)
	assert.InDelta(t, 3, diff["files_changed"], 0)
	assert.InDelta(t, 3, diff["insertions"], 0)
	assert.InDelta(t, 1, diff["deletions"], 0)
	assert.Equal(t, []any{
		map[string]any{"path": "blob.bin", "insertions": nil, "deletions": nil, "binary": true},
		map[string]any{"path": "staged.go", "insertions": 1.0, "deletions": 0.0},
		map[string]any{"path": "tool.py", "insertions": 2.0, "deletions": 1.0},
	}, diff["files"])

	log := out["log"].([]any)
	require.Len(t, log, 2)
	assert.Equal(t, map[string]any{"hash": log[0].(map[string]any)["hash"], "author": `Ada "L" Lovelace`, "date": "2024-05-06", "subject": "second"}, log[0])
	assert.Equal(t, "first: \"quoted\"\tand tabbed", log[1].(map[string]any)["subject"])

	// Of the whole repository, though PATH is lib/: 8 committed, 2 staged,
	// 1 untracked; the ignored debug.log is not counted, LICENSE and
	// .gitignore have no extension.
	assert.InDelta(t, 11, out["files"], 0)
	assert.Equal(t, []any{
		map[string]any{"language": "Go", "files": 4.0},
		map[string]any{"language": ".bin", "files": 1.0},
		map[string]any{"language": "Makefile", "files": 1.0},
		map[string]any{"language": "Markdown", "files": 1.0},
		map[string]any{"language": "Python", "files": 1.0},
		map[string]any{"language": "Text", "files": 1.0},
	}, out["languages"])

	t.Run("limits", func(t *testing.T) {
		r := runScript(t, repoSummary, dir, nil, "--commits=1", "--top", "2")
		assert.Len(t, r.out["log"], 1)
		assert.Len(t, r.out["languages"], 2)
		assert.InDelta(t, 4, r.out["languages_omitted"], 0)
	})
	t.Run("upstream", func(t *testing.T) {
		clone := filepath.Join(t.TempDir(), "clone")
		git(t, filepath.Dir(clone), "clone", "-q", dir, clone)
		writeFiles(t, clone, map[string]string{"x.go": "package main\n"})
		git(t, clone, "add", "x.go")
		git(t, clone, "commit", "-q", "-m", "ahead")
		r := runScript(t, repoSummary, clone, nil)
		assert.Equal(t, "origin/main", r.out["upstream"])
		assert.InDelta(t, 1, r.out["ahead"], 0)
		assert.InDelta(t, 0, r.out["behind"], 0)
	})
	t.Run("no commits yet", func(t *testing.T) {
		d := t.TempDir()
		git(t, d, "init", "-q", "-b", "trunk")
		writeFiles(t, d, map[string]string{"a.rs": "fn main() {}\n"})
		git(t, d, "add", "a.rs")
		r := runScript(t, repoSummary, d, nil)
		assert.Equal(t, "trunk", r.out["branch"])
		assert.Nil(t, r.out["head"])
		assert.Equal(t, []any{}, r.out["log"])
		assert.InDelta(t, 1, r.out["diff_stat"].(map[string]any)["insertions"], 0)
		assert.Equal(t, []any{map[string]any{"language": "Rust", "files": 1.0}}, r.out["languages"])
	})
	t.Run("not a repository", func(t *testing.T) {
		d := t.TempDir()
		writeFiles(t, d, map[string]string{"a.c": "", "b.h": "", ".hidden/c.go": "", "node_modules/x.js": ""})
		r := runScript(t, repoSummary, d, nil)
		assert.Equal(t, false, r.out["git"])
		assert.NotContains(t, r.out, "status")
		assert.Equal(t, []any{map[string]any{"language": "C", "files": 2.0}}, r.out["languages"])
	})
	t.Run("usage", func(t *testing.T) {
		r := runScript(t, repoSummary, dir, nil, "--commits", "many")
		assert.Equal(t, 2, r.code)
		assert.Contains(t, r.out["error"], `--commits "many" is not a number`)
	})
}
