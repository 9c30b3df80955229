package glob

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func tree(t *testing.T, files ...string) string {
	t.Helper()
	root := t.TempDir()
	for _, name := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			require.NoError(t, os.MkdirAll(p, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(name), 0o644))
	}
	return root
}

func newExec(t *testing.T, ws string) *Executor {
	t.Helper()
	ex, err := NewExecutor(Options{Workspace: ws})
	require.NoError(t, err)
	return ex
}

func call(t *testing.T, ex *Executor, a Action) (*tools.Observation, *Output) {
	t.Helper()
	obs, err := ex.Call(context.Background(), a)
	require.NoError(t, err)
	out, ok := obs.Structured.(*Output)
	require.True(t, ok)
	return obs, out
}

// rels returns the files relative to root, sorted.
func rels(root string, files []string) []string {
	var r []string
	for _, f := range files {
		p, err := filepath.Rel(root, f)
		if err != nil {
			p = f
		}
		r = append(r, filepath.ToSlash(p))
	}
	slices.Sort(r)
	return r
}

func TestPatterns(t *testing.T) {
	root := tree(t,
		"main.go", "README.md", "go.mod",
		"src/a.ts", "src/b.tsx", "src/c.js", "src/deep/d.ts", "src/deep/er/e.ts",
		"lib/x.go", "lib/sub/y.go", "tests/test_one.py", "test_two.py", "cfg/app.json", "cfg/app.yaml",
		"file1.txt", "file2.txt", "fileA.txt", "emptydir/",
		"x/src/z.ts",
	)
	ex := newExec(t, root)
	cases := []struct {
		pattern string
		want    []string
	}{
		{"**/*.go", []string{"lib/sub/y.go", "lib/x.go", "main.go"}},
		{"*.go", []string{"lib/sub/y.go", "lib/x.go", "main.go"}}, // no '/': any depth
		{"src/*.ts", []string{"src/a.ts"}},
		{"./src/*.ts", []string{"src/a.ts"}},
		{"src/**/*.ts", []string{"src/a.ts", "src/deep/d.ts", "src/deep/er/e.ts"}},
		{"**/src/*.ts", []string{"src/a.ts", "x/src/z.ts"}},
		{"src/*.{ts,tsx}", []string{"src/a.ts", "src/b.tsx"}},
		{"**/*.{json,yaml,yml,toml}", []string{"cfg/app.json", "cfg/app.yaml"}},
		{"**/test_*.py", []string{"test_two.py", "tests/test_one.py"}},
		{"file[0-9].txt", []string{"file1.txt", "file2.txt"}},
		{"file[!0-9].txt", []string{"fileA.txt"}},
		{"file?.txt", []string{"file1.txt", "file2.txt", "fileA.txt"}},
		{"{lib,src}/*.go", []string{"lib/x.go"}},
		{"src/deep", nil}, // directories are never returned
		{"emptydir", nil},
		{"go.mod", []string{"go.mod"}},
		{"src/c.js", []string{"src/c.js"}},
		{"src/*/*/*.ts", []string{"src/deep/er/e.ts"}},
		{"nothing/**", nil},
	}
	for _, c := range cases {
		obs, out := call(t, ex, Action{Pattern: c.pattern})
		assert.False(t, obs.IsError, obs.Text())
		assert.Equal(t, c.want, rels(root, out.Files), c.pattern)
		assert.Equal(t, root, out.SearchPath, c.pattern)
		for _, f := range out.Files {
			assert.True(t, filepath.IsAbs(f))
		}
	}
}

func TestIndependentOfCwd(t *testing.T) {
	root := tree(t, "src/a.ts", "src/b/c.ts")
	other := tree(t, "src/other.ts")
	t.Chdir(other)
	_, out := call(t, newExec(t, root), Action{Pattern: "src/**/*.ts"})
	assert.Equal(t, []string{"src/a.ts", "src/b/c.ts"}, rels(root, out.Files))
	_, out = call(t, newExec(t, root), Action{Pattern: "src/*.ts", Path: root})
	assert.Equal(t, []string{"src/a.ts"}, rels(root, out.Files))
}

func TestAbsolutePatternSetsPath(t *testing.T) {
	root := tree(t, "a/b/x.py", "a/b/c/y.py", "a/z.py", "other/w.py")
	ex := newExec(t, filepath.Join(root, "other"))
	cases := []struct {
		pattern, path, searchPath string
		want                      []string
	}{
		{filepath.Join(root, "a/b/**/*.py"), "", filepath.Join(root, "a/b"), []string{"a/b/c/y.py", "a/b/x.py"}},
		{filepath.Join(root, "a/*.py"), "", filepath.Join(root, "a"), []string{"a/z.py"}},
		{filepath.Join(root, "a/b/x.py"), "", filepath.Join(root, "a/b"), []string{"a/b/x.py"}},
		// The pattern wins over the path parameter.
		{filepath.Join(root, "a/**/*.py"), filepath.Join(root, "other"), filepath.Join(root, "a"), []string{"a/b/c/y.py", "a/b/x.py", "a/z.py"}},
	}
	for _, c := range cases {
		obs, out := call(t, ex, Action{Pattern: c.pattern, Path: c.path})
		assert.False(t, obs.IsError, obs.Text())
		assert.Equal(t, c.searchPath, out.SearchPath, c.pattern)
		assert.Equal(t, c.want, rels(root, out.Files), c.pattern)
		assert.Equal(t, c.pattern, out.Pattern)
	}

	home := tree(t, "proj/h.go")
	t.Setenv("HOME", home)
	_, out := call(t, ex, Action{Pattern: "~/proj/*.go"})
	assert.Equal(t, []string{filepath.Join(home, "proj/h.go")}, out.Files)
}

func TestNewestFirstAndText(t *testing.T) {
	root := tree(t, "old.go", "mid.go", "new.go", "skip.txt")
	now := time.Now()
	for name, ago := range map[string]time.Duration{"old.go": 3 * time.Hour, "mid.go": 2 * time.Hour, "new.go": time.Hour} {
		mt := now.Add(-ago)
		require.NoError(t, os.Chtimes(filepath.Join(root, name), mt, mt))
	}
	obs, out := call(t, newExec(t, root), Action{Pattern: "*.go"})
	want := []string{filepath.Join(root, "new.go"), filepath.Join(root, "mid.go"), filepath.Join(root, "old.go")}
	assert.Equal(t, want, out.Files)
	assert.Equal(t, fmt.Sprintf("Found 3 file(s) matching pattern '*.go' in '%s':\n%s", root, strings.Join(want, "\n")), obs.Text())
	assert.Equal(t, 3, out.Count)
	assert.False(t, out.Truncated)

	obs, out = call(t, newExec(t, root), Action{Pattern: "*.rs"})
	assert.False(t, obs.IsError)
	assert.Equal(t, fmt.Sprintf("No files found matching pattern '*.rs' in directory '%s'", root), obs.Text())
	assert.NotNil(t, out.Files)
}

func TestTruncationIsExact(t *testing.T) {
	t.Parallel()
	// One tree, made smaller for each n: writing files is the slow part.
	var files []string
	for i := range 101 {
		files = append(files, fmt.Sprintf("d%d/f%03d.txt", i%7, i))
	}
	root := tree(t, files...)
	for _, n := range []int{101, 100} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			for _, f := range files[n:] {
				err := os.Remove(filepath.Join(root, filepath.FromSlash(f)))
				require.True(t, err == nil || os.IsNotExist(err), err)
			}
			obs, out := call(t, newExec(t, root), Action{Pattern: "**/*.txt"})
			assert.Len(t, out.Files, 100)
			assert.Equal(t, n, out.Count)
			assert.Equal(t, n > 100, out.Truncated)
			assert.Equal(t, n > 100, strings.HasSuffix(obs.Text(),
				"\n\n[Results truncated to first 100 files. Consider using a more specific pattern.]"))
		})
	}
}

func TestSymlinkLoopEnds(t *testing.T) {
	root := tree(t, "src/a.py", "src/b/c.py")
	require.NoError(t, os.Symlink("..", filepath.Join(root, "src", "loop")))
	require.NoError(t, os.Symlink(root, filepath.Join(root, "src", "b", "root")))
	require.NoError(t, os.Symlink("a.py", filepath.Join(root, "src", "alias.py")))
	_, out := call(t, newExec(t, root), Action{Pattern: "**/*.py"})
	assert.Equal(t, []string{"src/a.py", "src/alias.py", "src/b/c.py"}, rels(root, out.Files))
	assert.False(t, out.Truncated)
}

func TestHiddenAndIgnored(t *testing.T) {
	root := tree(t,
		".gitignore", ".env", "app.go", ".github/workflows/ci.yml", "src/.cache/x.go", "src/y.go",
		"build/out.go", "debug.log", "node_modules/pkg/index.js", ".git/config", ".git/HEAD",
	)
	require.NoError(t, os.WriteFile(filepath.Join(root, ".gitignore"), []byte("build/\n*.log\nnode_modules/\n.env\n"), 0o644))
	ex := newExec(t, root)
	cases := []struct {
		pattern string
		want    []string
	}{
		{"**/*", []string{"app.go", "src/y.go"}},
		{"*", []string{"app.go", "src/y.go"}},
		{"**/*.go", []string{"app.go", "src/y.go"}},
		{".github/**", []string{".github/workflows/ci.yml"}},
		{".github/**/*.yml", []string{".github/workflows/ci.yml"}},
		{"**/*.yml", nil},
		{"**/.env", []string{".env"}}, // named exactly: hidden and ignored, still found
		{".*", []string{".gitignore"}},
		{"**/.cache/*.go", []string{"src/.cache/x.go"}},
		{"build/*.go", []string{"build/out.go"}},
		{"**/*.log", nil},
		{"debug.log", []string{"debug.log"}},
		{"node_modules/**/*.js", []string{"node_modules/pkg/index.js"}},
		{"**/.*", []string{".gitignore"}}, // never .git's files by a wildcard
		{".git/*", []string{".git/HEAD", ".git/config"}},
	}
	for _, c := range cases {
		_, out := call(t, ex, Action{Pattern: c.pattern})
		assert.Equal(t, c.want, rels(root, out.Files), c.pattern)
	}
}

func TestErrors(t *testing.T) {
	root := tree(t, "a.go", "sub/b.go")
	ex := newExec(t, root)
	cases := []struct {
		action Action
		want   string
	}{
		{Action{Pattern: "*.go", Path: filepath.Join(root, "missing")}, fmt.Sprintf("Search path '%s' is not a valid directory: it does not exist", filepath.Join(root, "missing"))},
		{Action{Pattern: "*.go", Path: filepath.Join(root, "a.go")}, "is not a valid directory: it is a file"},
		{Action{Pattern: "*.go", Path: "rel/missing"}, "give an absolute path"},
		{Action{Pattern: "/no/such/dir/**/*.go"}, "Search path '/no/such/dir' is not a valid directory: it does not exist"},
		{Action{Pattern: "*.{ts"}, "Invalid glob pattern '*.{ts': '{' without '}'"},
		{Action{Pattern: "src/[a-"}, "Invalid glob pattern 'src/[a-': '[' without ']'"},
	}
	for _, c := range cases {
		obs, _ := call(t, ex, c.action)
		assert.True(t, obs.IsError, c.action)
		assert.Contains(t, obs.Text(), c.want)
	}
	// A relative path is taken from the workspace.
	obs, out := call(t, ex, Action{Pattern: "*.go", Path: "sub"})
	assert.False(t, obs.IsError)
	assert.Equal(t, []string{filepath.Join(root, "sub/b.go")}, out.Files)
	// An empty pattern is an error naming what lists everything (upstream
	// lists everything, which an empty pattern rarely means).
	for _, p := range []string{"", "  "} {
		obs, out = call(t, ex, Action{Pattern: p})
		assert.True(t, obs.IsError, "pattern %q", p)
		assert.Contains(t, obs.Text(), "the pattern is empty; to list every file, use '**/*'")
		assert.Empty(t, out.Files)
	}
}

func TestCancellation(t *testing.T) {
	t.Parallel()
	root := tree(t, "a.go")
	ex := newExec(t, root)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	obs, err := ex.Call(ctx, Action{Pattern: "*.go"})
	require.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, obs)

	var files []string
	for i := range 200 {
		files = append(files, fmt.Sprintf("d%d/f%d.go", i%20, i))
	}
	root = tree(t, files...)
	ex, err = NewExecutor(Options{Workspace: root, Timeout: time.Nanosecond})
	require.NoError(t, err)
	obs, out := call(t, ex, Action{Pattern: "**/*.go"})
	assert.False(t, obs.IsError)
	assert.True(t, out.Incomplete)
	assert.Contains(t, obs.Text(), "results are incomplete")
}

func TestNewExecutorValidates(t *testing.T) {
	_, err := NewExecutor(Options{Workspace: "relative"})
	require.ErrorContains(t, err, "not an absolute path")
	_, err = NewExecutor(Options{Workspace: "/x", Workers: -1})
	require.Error(t, err)
	_, err = NewExecutor(Options{Workspace: "/x", Timeout: -1})
	require.Error(t, err)
	ex, err := NewExecutor(Options{})
	require.NoError(t, err)
	assert.NoError(t, ex.Close())
}

func TestFactoryAndDefinition(t *testing.T) {
	root := tree(t, "a.go")
	made, err := Factory(tools.Env{Workspace: root}, json.RawMessage(`{"workers":1}`))
	require.NoError(t, err)
	require.Len(t, made, 1)
	def := made[0].Definition()
	assert.Equal(t, Name, def.Name)
	assert.Equal(t, tools.Annotations{Title: "glob", ReadOnlyHint: true, IdempotentHint: true}, def.Annotations)
	assert.Contains(t, def.Description, "Your current working directory is: "+root)
	assert.Contains(t, def.Description, `"**/*.{json,yaml,yml,toml}"`)
	assert.Equal(t, []string{"pattern"}, def.InputSchema.Required)
	require.NotNil(t, def.OutputSchema)
	assert.Contains(t, def.OutputSchema.Properties, "truncated")

	obs, err := made[0].Call(context.Background(), json.RawMessage(`{"pattern":"*.go"}`))
	require.NoError(t, err)
	assert.Contains(t, obs.Text(), filepath.Join(root, "a.go"))
	obs, err = made[0].Call(context.Background(), json.RawMessage(`{"pattern":"*.go","recursive":true}`))
	require.NoError(t, err)
	assert.True(t, obs.IsError)

	_, err = Factory(tools.Env{Workspace: root}, json.RawMessage(`{"nope":1}`))
	require.Error(t, err)
	_, err = Factory(tools.Env{Workspace: root}, json.RawMessage(`null`))
	assert.NoError(t, err)
}

// A symlink to a directory named as the path, or as the literal directories
// of a pattern, is searched like the directory (only symlinks met during
// the walk are not followed); the paths shown keep the name given.
func TestSymlinkedDirectoryNamedExplicitly(t *testing.T) {
	root := tree(t, "real/a.py", "real/sub/b.py")
	require.NoError(t, os.Symlink("real", filepath.Join(root, "link")))
	ex := newExec(t, root)
	want := []string{"link/a.py", "link/sub/b.py"}
	for _, a := range []Action{
		{Pattern: "**/*.py", Path: filepath.Join(root, "link")},
		{Pattern: "**/*.py", Path: "link"},
		{Pattern: "link/**/*.py"},
		{Pattern: filepath.Join(root, "link") + "/**/*.py"},
	} {
		obs, out := call(t, ex, a)
		require.False(t, obs.IsError, obs.Text())
		got := rels(root, out.Files)
		sort.Strings(got)
		assert.Equal(t, want, got, "%+v", a)
	}
	_, out := call(t, ex, Action{Pattern: "**/*.py"})
	got := rels(root, out.Files)
	sort.Strings(got)
	assert.Equal(t, []string{"real/a.py", "real/sub/b.py"}, got, "met during the walk, it is not followed")
}
