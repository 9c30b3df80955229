package grep

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/mcpexport"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// tree writes files under a new temporary directory; their modification
// times are a second apart in the order of names, oldest first, unless the
// test sets them.
func tree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	write(t, root, files)
	return root
}

func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
	}
}

func touch(t *testing.T, path string, ago time.Duration) {
	t.Helper()
	mt := time.Now().Add(-ago)
	require.NoError(t, os.Chtimes(path, mt, mt))
}

func call(t *testing.T, ex *Executor, a Action) (*tools.Observation, *Output) {
	t.Helper()
	obs, err := ex.Call(context.Background(), a)
	require.NoError(t, err)
	out, ok := obs.Structured.(*Output)
	require.True(t, ok)
	return obs, out
}

func newExec(t *testing.T, ws string) *Executor {
	t.Helper()
	ex, err := NewExecutor(Options{Workspace: ws})
	require.NoError(t, err)
	return ex
}

func TestFilesModeOpenHandsText(t *testing.T) {
	root := tree(t, map[string]string{"a.go": "needle\n", "b.go": "NEEDLE here\n", "c.go": "nothing\n", "sub/d.go": "x needle\n"})
	touch(t, filepath.Join(root, "a.go"), 3*time.Hour)
	touch(t, filepath.Join(root, "b.go"), 1*time.Hour)
	touch(t, filepath.Join(root, "sub/d.go"), 2*time.Hour)
	ex := newExec(t, root)

	obs, out := call(t, ex, Action{Pattern: "needle"})
	require.False(t, obs.IsError)
	want := []string{filepath.Join(root, "b.go"), filepath.Join(root, "sub/d.go"), filepath.Join(root, "a.go")}
	assert.Equal(t, want, out.Matches, "newest first")
	assert.Equal(t, fmt.Sprintf("Found 3 file(s) containing pattern 'needle' in '%s':\n%s", root, strings.Join(want, "\n")), obs.Text())
	assert.Equal(t, 3, out.Count)
	assert.False(t, out.Truncated)
	assert.Equal(t, root, out.SearchPath)
	assert.Equal(t, ModeFiles, out.OutputMode)

	obs, out = call(t, ex, Action{Pattern: "needle", Include: "*.go"})
	assert.Len(t, out.Matches, 3)
	assert.Contains(t, obs.Text(), "in '"+root+"' (filtered by '*.go'):\n")

	obs, out = call(t, ex, Action{Pattern: "absent", Include: "*.py"})
	assert.False(t, obs.IsError)
	assert.Empty(t, out.Matches)
	assert.NotNil(t, out.Matches)
	assert.Equal(t, fmt.Sprintf("No files found containing pattern 'absent' in directory '%s' (filtered by '*.py')", root), obs.Text())

	obs, _ = call(t, ex, Action{Pattern: "absent"})
	assert.Equal(t, fmt.Sprintf("No files found containing pattern 'absent' in directory '%s'", root), obs.Text())
}

func TestTruncationIsExact(t *testing.T) {
	t.Parallel()
	// One tree, made smaller for each n: writing files is the slow part.
	files := map[string]string{}
	for i := range 101 {
		files[fmt.Sprintf("f%03d.txt", i)] = "match\n"
	}
	root := tree(t, files)
	for _, n := range []int{101, 100, 99} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			for i := n; i < 101; i++ {
				err := os.Remove(filepath.Join(root, fmt.Sprintf("f%03d.txt", i)))
				require.True(t, err == nil || os.IsNotExist(err), err)
			}
			obs, out := call(t, newExec(t, root), Action{Pattern: "match"})
			assert.Equal(t, n, out.Count)
			assert.Len(t, out.Matches, min(n, 100))
			assert.Equal(t, n > 100, out.Truncated)
			assert.Equal(t, n > 100, strings.HasSuffix(obs.Text(),
				"\n\n[Results truncated to first 100 files. Consider using a more specific pattern.]"))
			assert.Contains(t, obs.Text(), fmt.Sprintf("Found %d file(s)", min(n, 100)))
		})
	}
}

func TestLimit(t *testing.T) {
	root := tree(t, map[string]string{"a": "x\nx\nx\n", "b": "x\n", "c": "x\n"})
	ex := newExec(t, root)
	obs, out := call(t, ex, Action{Pattern: "x", Limit: 2})
	assert.Len(t, out.Matches, 2)
	assert.True(t, out.Truncated)
	assert.Contains(t, obs.Text(), "[Results truncated to first 2 files.")
	_, out = call(t, ex, Action{Pattern: "x", Limit: 3})
	assert.False(t, out.Truncated)
}

func TestInvalidRegexIsAnError(t *testing.T) {
	root := tree(t, map[string]string{"a.txt": "foobar\n"})
	ex := newExec(t, root)
	cases := []struct{ pattern, want string }{
		{"foo(?=bar)", "Invalid regex pattern: invalid or unsupported Perl syntax: `(?=`. Lookahead"},
		{"(?<=foo)bar", "Lookahead and lookbehind are not supported"},
		{`(o)\1`, "Backreferences are not supported"},
		{"[x", "Invalid regex pattern: missing closing ]: `[x`"},
		{"foo(", "Invalid regex pattern: missing closing ): `foo(`"},
		{`\<foo\>`, "GNU grep word boundary"},
	}
	for _, c := range cases {
		obs, out := call(t, ex, Action{Pattern: c.pattern})
		assert.True(t, obs.IsError, c.pattern)
		assert.Contains(t, obs.Text(), c.want)
		assert.NotContains(t, obs.Text(), "No files found")
		assert.Equal(t, c.pattern, out.Pattern)
	}
}

func TestPaths(t *testing.T) {
	root := tree(t, map[string]string{"src/a.go": "hit\n", "b.go": "hit\n"})
	ex := newExec(t, root)

	obs, _ := call(t, ex, Action{Pattern: "hit", Path: filepath.Join(root, "missing")})
	assert.True(t, obs.IsError)
	assert.Equal(t, fmt.Sprintf("Search path '%s' is not a valid directory: it does not exist", filepath.Join(root, "missing")), obs.Text())

	obs, _ = call(t, ex, Action{Pattern: "hit", Path: "nope/dir"})
	assert.True(t, obs.IsError)
	assert.Contains(t, obs.Text(), "Search path 'nope/dir' is not a valid directory")
	assert.Contains(t, obs.Text(), filepath.Join(root, "nope/dir"))
	assert.Contains(t, obs.Text(), "give an absolute path")

	// A relative path is taken from the workspace.
	obs, out := call(t, ex, Action{Pattern: "hit", Path: "src"})
	assert.False(t, obs.IsError)
	assert.Equal(t, []string{filepath.Join(root, "src/a.go")}, out.Matches)
	assert.Equal(t, filepath.Join(root, "src"), out.SearchPath)

	// A file is searched by itself.
	_, out = call(t, ex, Action{Pattern: "hit", Path: filepath.Join(root, "b.go")})
	assert.Equal(t, []string{filepath.Join(root, "b.go")}, out.Matches)
	_, out = call(t, ex, Action{Pattern: "miss", Path: filepath.Join(root, "b.go")})
	assert.Empty(t, out.Matches)

	// Default: the workspace; "~" is home.
	_, out = call(t, ex, Action{Pattern: "hit"})
	assert.Len(t, out.Matches, 2)
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	obs, out = call(t, ex, Action{Pattern: "x", Path: "~/no-such-dir-for-grep-test"})
	assert.True(t, obs.IsError)
	assert.Equal(t, filepath.Join(home, "no-such-dir-for-grep-test"), out.SearchPath)
}

func TestSkips(t *testing.T) {
	root := tree(t, map[string]string{
		".gitignore":         "*.log\nbuild/\n!keep.log\n",
		"app.go":             "secret\n",
		"debug.log":          "secret\n",
		"keep.log":           "secret\n",
		"build/out.go":       "secret\n",
		".env":               "secret\n",
		".hidden/x.go":       "secret\n",
		"sub/.gitignore":     "local.txt\n",
		"sub/local.txt":      "secret\n",
		"sub/other.txt":      "secret\n",
		".git/config":        "secret\n",
		"bin.dat":            "secret\x00binary\n",
		"late-nul.dat":       strings.Repeat("a", 9000) + "\x00 secret\n",
		"node_modules/m.js":  "secret\n",
		"sub/deep/.env.test": "secret\n",
	})
	require.NoError(t, os.WriteFile(filepath.Join(root, "sub/.gitignore"), []byte("local.txt\nnode_modules/\n"), 0o644))
	ex := newExec(t, root)
	rel := func(out *Output) []string {
		var r []string
		for _, m := range out.Matches {
			p, _ := filepath.Rel(root, m)
			r = append(r, filepath.ToSlash(p))
		}
		return sorted(r)
	}
	_, out := call(t, ex, Action{Pattern: "secret"})
	// late-nul.dat: the NUL is past the first 8 KiB, so it is text.
	assert.Equal(t, []string{"app.go", "keep.log", "late-nul.dat", "node_modules/m.js", "sub/other.txt"}, rel(out))

	// An include that names hidden files searches them; one that names an
	// ignored file exactly searches it too.
	_, out = call(t, ex, Action{Pattern: "secret", Include: ".env*"})
	assert.Equal(t, []string{".env", "sub/deep/.env.test"}, rel(out))
	_, out = call(t, ex, Action{Pattern: "secret", Include: "debug.log"})
	assert.Equal(t, []string{"debug.log"}, rel(out))
	_, out = call(t, ex, Action{Pattern: "secret", Include: "*.log"})
	assert.Equal(t, []string{"keep.log"}, rel(out))
	// OpenHands' fnmatch lets "*.go" reach hidden files; this grep does not.
	_, out = call(t, ex, Action{Pattern: "secret", Include: "*.go"})
	assert.Equal(t, []string{"app.go"}, rel(out))
}

func sorted(s []string) []string {
	c := append([]string(nil), s...)
	for i := range c {
		for j := i + 1; j < len(c); j++ {
			if c[j] < c[i] {
				c[i], c[j] = c[j], c[i]
			}
		}
	}
	return c
}

func TestIncludeGlobs(t *testing.T) {
	root := tree(t, map[string]string{
		"a.ts": "x", "b.tsx": "x", "c.js": "x", "src/d.ts": "x", "src/deep/e.go": "x", "lib/f.go": "x", "g.go": "x",
	})
	ex := newExec(t, root)
	cases := []struct {
		include string
		want    []string
	}{
		{"*.{ts,tsx}", []string{"a.ts", "b.tsx", "src/d.ts"}},
		{"*.ts", []string{"a.ts", "src/d.ts"}},
		{"src/**/*.go", []string{"src/deep/e.go"}},
		{"{src,lib}/**/*.go", []string{"lib/f.go", "src/deep/e.go"}},
		{"*.go", []string{"g.go", "lib/f.go", "src/deep/e.go"}},
		{"src/*.ts", []string{"src/d.ts"}},
		{"[ab].*", []string{"a.ts", "b.tsx"}},
	}
	for _, c := range cases {
		_, out := call(t, ex, Action{Pattern: "x", Include: c.include})
		var got []string
		for _, m := range out.Matches {
			p, _ := filepath.Rel(root, m)
			got = append(got, filepath.ToSlash(p))
		}
		assert.Equal(t, c.want, sorted(got), c.include)
	}
	obs, _ := call(t, ex, Action{Pattern: "x", Include: "*.{ts"})
	assert.True(t, obs.IsError)
	assert.Contains(t, obs.Text(), "Invalid include pattern")
}

func TestCaseSensitivity(t *testing.T) {
	root := tree(t, map[string]string{"upper": "HELLO\n", "lower": "hello\n"})
	ex := newExec(t, root)
	_, out := call(t, ex, Action{Pattern: "Hello"})
	assert.Len(t, out.Matches, 2, "OpenHands searches ignoring case")
	_, out = call(t, ex, Action{Pattern: "hello", CaseSensitive: true})
	assert.Equal(t, []string{filepath.Join(root, "lower")}, out.Matches)
}

func TestContentMode(t *testing.T) {
	lines := []string{"alpha", "beta", "gamma match", "delta", "epsilon", "zeta", "eta", "theta match", "iota match", "kappa"}
	root := tree(t, map[string]string{"f.txt": strings.Join(lines, "\n") + "\n", "g.txt": "match\r\n", "long.txt": strings.Repeat("é", 400) + " match\n"})
	touch(t, filepath.Join(root, "f.txt"), time.Hour)
	touch(t, filepath.Join(root, "g.txt"), 2*time.Hour)
	touch(t, filepath.Join(root, "long.txt"), 3*time.Hour)
	ex := newExec(t, root)
	f, g := filepath.Join(root, "f.txt"), filepath.Join(root, "g.txt")

	obs, out := call(t, ex, Action{Pattern: "match", OutputMode: ModeContent, Include: "[fg].txt"})
	assert.Equal(t, fmt.Sprintf("Found 4 matching line(s) in 2 file(s) for pattern 'match' in '%s' (filtered by '[fg].txt'):\n"+
		"%s:3:gamma match\n%s:8:theta match\n%s:9:iota match\n%s:1:match", root, f, f, f, g), obs.Text())
	assert.Equal(t, []string{f, g}, out.Matches)
	assert.False(t, out.Truncated)

	// Context (which implies content mode), with "--" between groups.
	obs, out = call(t, ex, Action{Pattern: "match", Context: 1, Include: "f.txt"})
	assert.Equal(t, ModeContent, out.OutputMode)
	assert.Equal(t, fmt.Sprintf("Found 3 matching line(s) in 1 file(s) for pattern 'match' in '%s' (filtered by 'f.txt'):\n"+
		"%[2]s-2-beta\n%[2]s:3:gamma match\n%[2]s-4-delta\n--\n%[2]s-7-eta\n%[2]s:8:theta match\n%[2]s:9:iota match\n%[2]s-10-kappa", root, f), obs.Text())
	assert.Equal(t, Line{Path: f, Line: 2, Text: "beta"}, out.Lines[0])
	assert.Equal(t, Line{Path: f, Line: 3, Text: "gamma match", Match: true}, out.Lines[1])

	// Context at the start and end of the file.
	_, out = call(t, ex, Action{Pattern: "alpha|kappa", Context: 2, Include: "f.txt"})
	var nums []int
	for _, l := range out.Lines {
		nums = append(nums, l.Line)
	}
	assert.Equal(t, []int{1, 2, 3, 8, 9, 10}, nums)

	// The limit counts matching lines and the truncation is exact.
	obs, out = call(t, ex, Action{Pattern: "match", OutputMode: ModeContent, Limit: 3, Include: "[fg].txt"})
	assert.Len(t, out.Lines, 3)
	assert.True(t, out.Truncated)
	assert.Contains(t, obs.Text(), "[Results truncated to first 3 matching lines.")
	_, out = call(t, ex, Action{Pattern: "match", OutputMode: ModeContent, Limit: 4, Include: "[fg].txt"})
	assert.False(t, out.Truncated)
	_, out = call(t, ex, Action{Pattern: "match", OutputMode: ModeContent, Limit: 2, Include: "[fg].txt"})
	assert.True(t, out.Truncated)

	// Long lines are cut on a rune boundary.
	_, out = call(t, ex, Action{Pattern: "match", OutputMode: ModeContent, Include: "long.txt"})
	require.Len(t, out.Lines, 1)
	assert.True(t, strings.HasSuffix(out.Lines[0].Text, "[... line truncated]"))
	assert.LessOrEqual(t, len(out.Lines[0].Text), maxLineBytes+30)
}

func TestCountMode(t *testing.T) {
	root := tree(t, map[string]string{"a": "x\nx\ny\nx", "b": "x\n"})
	touch(t, filepath.Join(root, "a"), time.Hour)
	ex := newExec(t, root)
	obs, out := call(t, ex, Action{Pattern: "x", OutputMode: ModeCount})
	a, b := filepath.Join(root, "a"), filepath.Join(root, "b")
	assert.Equal(t, []FileCount{{b, 1}, {a, 3}}, out.Counts)
	assert.Equal(t, fmt.Sprintf("Found 2 file(s) containing pattern 'x' in '%s' (matching lines per file):\n%s:1\n%s:3", root, b, a), obs.Text())
}

func TestBigFileChunks(t *testing.T) {
	t.Parallel()
	// Lines longer than the read buffer, and matches on both sides of
	// chunk boundaries.
	var sb strings.Builder
	for i := range 20000 {
		fmt.Fprintf(&sb, "line %d filler filler filler filler\n", i)
	}
	sb.WriteString(strings.Repeat("y", 3*initialBuffer) + " tail-match\n")
	sb.WriteString("last-line-match")
	root := tree(t, map[string]string{"big.txt": sb.String()})
	ex := newExec(t, root)
	_, out := call(t, ex, Action{Pattern: "tail-match|last-line-match", OutputMode: ModeCount})
	assert.Equal(t, []FileCount{{filepath.Join(root, "big.txt"), 2}}, out.Counts)
	_, out = call(t, ex, Action{Pattern: `^line 19999 `, OutputMode: ModeCount})
	assert.Equal(t, 1, out.Counts[0].Count)
	_, out = call(t, ex, Action{Pattern: `filler$`, OutputMode: ModeCount})
	assert.Equal(t, 20000, out.Counts[0].Count)
	_, out = call(t, ex, Action{Pattern: "last-line-match", OutputMode: ModeContent})
	require.Len(t, out.Lines, 1)
	assert.Equal(t, 20002, out.Lines[0].Line)
}

func TestSymlinkLoopEnds(t *testing.T) {
	root := tree(t, map[string]string{"src/a.go": "hit\n"})
	require.NoError(t, os.Symlink("..", filepath.Join(root, "src", "loop")))
	require.NoError(t, os.Symlink(filepath.Join(root, "src", "a.go"), filepath.Join(root, "link.go")))
	_, out := call(t, newExec(t, root), Action{Pattern: "hit"})
	assert.ElementsMatch(t, []string{filepath.Join(root, "src/a.go"), filepath.Join(root, "link.go")}, out.Matches)
}

func TestCancellation(t *testing.T) {
	t.Parallel()
	root := tree(t, map[string]string{"a": "x\n"})
	ex := newExec(t, root)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	obs, err := ex.Call(ctx, Action{Pattern: "x"})
	require.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, obs)

	// A search that runs out of its own time budget returns what it has,
	// marked incomplete.
	files := map[string]string{}
	for i := range 300 {
		files[fmt.Sprintf("d%d/f%d", i%30, i)] = "x\n"
	}
	root = tree(t, files)
	ex, err = NewExecutor(Options{Workspace: root, Timeout: time.Nanosecond})
	require.NoError(t, err)
	obs, out := call(t, ex, Action{Pattern: "x"})
	assert.False(t, obs.IsError)
	assert.True(t, out.Incomplete)
	assert.Contains(t, obs.Text(), "results are incomplete")
}

func TestCancelDuringSearch(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := range 500 {
		files[fmt.Sprintf("d%d/f%d", i%20, i)] = strings.Repeat("some text\n", 50)
	}
	root := tree(t, files)
	ex := newExec(t, root)
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	_, err := ex.Call(ctx, Action{Pattern: "never"})
	if err != nil { // the machine may finish first
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
}

func TestNewExecutorValidates(t *testing.T) {
	_, err := NewExecutor(Options{Workspace: "relative"})
	require.ErrorContains(t, err, "not an absolute path")
	_, err = NewExecutor(Options{Workspace: "/x", Workers: -1})
	require.Error(t, err)
	_, err = NewExecutor(Options{Workspace: "/x", Timeout: -time.Second})
	require.Error(t, err)
	ex, err := NewExecutor(Options{})
	require.NoError(t, err)
	wd, _ := os.Getwd()
	assert.Equal(t, wd, ex.opts.Workspace)
	assert.NoError(t, ex.Close())
}

func TestFactoryAndDefinition(t *testing.T) {
	root := tree(t, map[string]string{"a.go": "package a\n"})
	made, err := Factory(tools.Env{Workspace: root}, nil)
	require.NoError(t, err)
	require.Len(t, made, 1)
	tool := made[0]
	def := tool.Definition()
	assert.Equal(t, Name, def.Name)
	assert.Equal(t, tools.Annotations{Title: "grep", ReadOnlyHint: true, DestructiveHint: false, IdempotentHint: true, OpenWorldHint: false}, def.Annotations)
	assert.Contains(t, def.Description, "Your current working directory is: "+root)
	assert.Contains(t, def.Description, `"*.{ts,tsx}"`)
	require.NotNil(t, def.OutputSchema)
	assert.Contains(t, def.OutputSchema.Properties, "matches")
	assert.Equal(t, []string{"pattern"}, def.InputSchema.Required)
	assert.Equal(t, []any{"files", "content", "count"}, def.InputSchema.Properties["output_mode"].Enum)

	obs, err := tool.Call(context.Background(), json.RawMessage(`{"pattern":"PACKAGE"}`))
	require.NoError(t, err)
	assert.False(t, obs.IsError)
	assert.Contains(t, obs.Text(), filepath.Join(root, "a.go"))

	for _, bad := range []string{`{"pattern":"x","output_mode":"lines"}`, `{"pattern":"x","limit":0}`, `{"pattern":"x","context":99}`, `{}`} {
		obs, err := tool.Call(context.Background(), json.RawMessage(bad))
		require.NoError(t, err)
		assert.True(t, obs.IsError, bad)
	}

	_, err = Factory(tools.Env{Workspace: root}, json.RawMessage(`{"workers":2,"timeout_seconds":5}`))
	require.NoError(t, err)
	_, err = Factory(tools.Env{Workspace: root}, json.RawMessage(`{"bogus":1}`))
	require.Error(t, err)
	_, err = Factory(tools.Env{Workspace: "rel"}, nil)
	require.Error(t, err)

	b, err := json.Marshal(mcpexport.Tool(def))
	require.NoError(t, err)
	assert.Contains(t, string(b), `"readOnlyHint":true`)
}

// Content mode within the limits of the schema (2000 matches, 20 lines of
// context) stays a size a model can read: the text is cut at whole lines,
// ending on a match's group, and says so.
func TestContentOutputIsCapped(t *testing.T) {
	t.Parallel()
	files := map[string]string{}
	for i := range 50 {
		var b strings.Builder
		for j := range 400 {
			if j%10 == 0 {
				fmt.Fprintf(&b, "needle %d %s\n", j, strings.Repeat("n", 80))
			} else {
				fmt.Fprintf(&b, "hay %d %s\n", j, strings.Repeat("h", 80))
			}
		}
		files[fmt.Sprintf("f%02d.txt", i)] = b.String()
	}
	ex := newExec(t, tree(t, files))
	obs, out := call(t, ex, Action{Pattern: "needle", OutputMode: ModeContent, Limit: MaxLimit, Context: MaxContext})
	assert.False(t, obs.IsError)
	assert.True(t, out.OutputCut)
	assert.True(t, out.Truncated)
	assert.Less(t, len(obs.Text()), MaxContentBytes+2000, "the text stays near the cap")
	assert.Contains(t, obs.Text(), "[Results cut at about 30000 characters")
	require.NotEmpty(t, out.Lines)
	lastMatch := -1
	for i, l := range out.Lines {
		if l.Match {
			lastMatch = i
		}
	}
	require.GreaterOrEqual(t, lastMatch, 0)
	for i := lastMatch + 1; i < len(out.Lines); i++ {
		assert.Equal(t, out.Lines[i-1].Line+1, out.Lines[i].Line, "only the last match's own context follows it")
		assert.Equal(t, out.Lines[lastMatch].Path, out.Lines[i].Path)
	}
	assert.LessOrEqual(t, len(out.Lines)-1-lastMatch, MaxContext)
	matches := 0
	for _, l := range out.Lines {
		if l.Match {
			matches++
		}
	}
	assert.Contains(t, obs.Text(), fmt.Sprintf("Found %d matching line(s)", matches), "the count is of what is shown")

	// Below the cap nothing changes.
	_, out = call(t, ex, Action{Pattern: "needle 10 ", OutputMode: ModeContent, Limit: 10, Context: 1})
	assert.False(t, out.OutputCut)
	assert.Len(t, out.Lines, 30)
}

// A symlink to a directory named as the path is searched like the directory
// (only symlinks met during the walk are not followed); the paths shown
// keep the name given.
func TestSymlinkedDirectoryNamedExplicitly(t *testing.T) {
	root := tree(t, map[string]string{"real/a.go": "needle\n", "real/sub/b.go": "needle\n"})
	require.NoError(t, os.Symlink("real", filepath.Join(root, "link")))
	ex := newExec(t, root)
	obs, out := call(t, ex, Action{Pattern: "needle", Path: filepath.Join(root, "link")})
	require.False(t, obs.IsError, obs.Text())
	assert.ElementsMatch(t, []string{filepath.Join(root, "link/a.go"), filepath.Join(root, "link/sub/b.go")}, out.Matches)
	// Relative to the workspace too.
	_, out = call(t, ex, Action{Pattern: "needle", Path: "link"})
	assert.Len(t, out.Matches, 2)
	// Met during a walk of its parent, it is not followed (loops end).
	_, out = call(t, ex, Action{Pattern: "needle"})
	assert.ElementsMatch(t, []string{filepath.Join(root, "real/a.go"), filepath.Join(root, "real/sub/b.go")}, out.Matches)
}
