package walk

import (
	"path"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPatternMatch(t *testing.T) {
	cases := []struct {
		pattern  string
		anchored bool
		rel      string
		want     bool
	}{
		{"*.go", false, "main.go", true},
		{"*.go", false, "a/b/main.go", true},
		{"*.go", true, "a/main.go", false},
		{"*.go", true, "main.go", true},
		{"*.{ts,tsx}", false, "src/a.tsx", true},
		{"*.{ts,tsx}", false, "src/a.ts", true},
		{"*.{ts,tsx}", false, "src/a.js", false},
		{"{src,lib}/**/*.go", false, "lib/x/y.go", true},
		{"{src,lib}/**/*.go", false, "src/y.go", true},
		{"{src,lib}/**/*.go", false, "cmd/y.go", false},
		{"**/*.{json,yaml,yml,toml}", false, "a/b.yml", true},
		{"*.{a,{b,c}}", false, "x.c", true},
		{"src/*.ts", false, "src/a.ts", true},
		{"src/*.ts", false, "src/sub/a.ts", false},
		{"src/*.ts", false, "x/src/a.ts", false},
		{"src/**/*.ts", false, "src/a.ts", true},
		{"src/**/*.ts", false, "src/a/b/c.ts", true},
		{"./src/*.ts", false, "src/a.ts", true},
		{"**/test_*.py", false, "tests/test_x.py", true},
		{"**/test_*.py", false, "test_x.py", true},
		{"file[0-9].txt", false, "d/file7.txt", true},
		{"file[!0-9].txt", false, "file7.txt", false},
		{"?.md", false, "a.md", true},
		{"a\\*b", false, "a*b", true},
		{"a\\*b", false, "axb", false},
		{"*", false, "any/thing", true},
		{"**", false, "any/thing", true},
		{"[{]x", false, "{x", true},
	}
	for _, c := range cases {
		p, err := CompilePattern(c.pattern, c.anchored)
		require.NoError(t, err, c.pattern)
		assert.Equal(t, c.want, p.Match(c.rel, path.Base(c.rel)), "%q anchored=%v on %q", c.pattern, c.anchored, c.rel)
	}
}

func TestPatternErrors(t *testing.T) {
	for _, p := range []string{"", "*.{ts", "*.ts}", "[a-z", "a\\", "{,}"} {
		_, err := CompilePattern(p, false)
		assert.ErrorIs(t, err, ErrBadPattern, "%q", p)
	}
}

func TestPatternMayContain(t *testing.T) {
	cases := []struct {
		pattern, dir string
		want         bool
	}{
		{"*.go", "any/dir", true},
		{"src/*.go", "src", true},
		{"src/*.go", "src/sub", false},
		{"src/*.go", "lib", false},
		{"src/**/*.go", "src/a/b", true},
		{"src/**/*.go", "lib", false},
		{"*/x/*.go", "a/x", true},
		{"*/x/*.go", "a/y", false},
		{"{src,lib}/*.go", "lib", true},
		{"{src,lib}/*.go", "cmd", false},
		{"**/*.go", "a/b/c", true},
		{"a/**", "a/b/c", true},
	}
	for _, c := range cases {
		p, err := CompilePattern(c.pattern, false)
		require.NoError(t, err)
		assert.Equal(t, c.want, p.MayContain(c.dir), "%q may contain %q", c.pattern, c.dir)
	}
}

func TestPatternNames(t *testing.T) {
	cases := []struct {
		pattern, name    string
		hidden, explicit bool
	}{
		{"*", ".env", false, false},
		{"*.py", ".hidden.py", false, false},
		{"**/.env", ".env", true, true},
		{".github/**", ".github", true, true},
		{".*", ".bashrc", true, false},
		{"**/.*", ".git", false, false},
		{".git/**", ".git", true, true},
		{"node_modules/react/*.js", "node_modules", false, true},
		{"{.env,*.txt}", ".env", true, true},
	}
	for _, c := range cases {
		p, err := CompilePattern(c.pattern, false)
		require.NoError(t, err)
		assert.Equal(t, c.hidden, p.NamesHidden(c.name), "%q names hidden %q", c.pattern, c.name)
		assert.Equal(t, c.explicit, p.NamesExactly(c.name), "%q names %q exactly", c.pattern, c.name)
	}
}

func TestSplitPattern(t *testing.T) {
	cases := []struct{ in, dir, rest string }{
		{"**/*.go", "", "**/*.go"},
		{"*.go", "", "*.go"},
		{"src/app/**/*.ts", "src/app", "**/*.ts"},
		{"src/main.go", "src", "main.go"},
		{"/abs/dir/*.go", "/abs/dir", "*.go"},
		{"/*/x.py", "/", "*/x.py"},
		{"{a,b}/c.go", "", "{a,b}/c.go"},
		{"a/{b,c/d}/e", "a", "{b,c/d}/e"},
	}
	for _, c := range cases {
		dir, rest := SplitPattern(c.in)
		assert.Equal(t, c.dir, dir, c.in)
		assert.Equal(t, c.rest, rest, c.in)
	}
}
