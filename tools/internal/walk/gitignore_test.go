package walk

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeTree creates files (a path ending in '/' is a directory).
func writeTree(t testing.TB, root string, files map[string]string) {
	t.Helper()
	for p, content := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if strings.HasSuffix(p, "/") {
			require.NoError(t, os.MkdirAll(full, 0o755))
			continue
		}
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(content), 0o644))
	}
}

// collect walks root and returns the sorted relative paths of its files.
func collect(t testing.TB, root string, opts Options) []string {
	t.Helper()
	var mu sync.Mutex
	var got []string
	err := Walk(context.Background(), root, opts, func(_ int, e Entry) error {
		mu.Lock()
		got = append(got, e.Rel)
		mu.Unlock()
		return nil
	})
	require.NoError(t, err)
	slices.Sort(got)
	return got
}

func TestGitignore(t *testing.T) {
	cases := []struct {
		name  string
		files map[string]string
		want  []string // visible files (hidden ones included, .git excluded)
	}{
		{
			name:  "basename anywhere",
			files: map[string]string{".gitignore": "*.log\n", "a.log": "", "d/b.log": "", "d/c.txt": ""},
			want:  []string{".gitignore", "d/c.txt"},
		},
		{
			name:  "comments blanks and trailing spaces",
			files: map[string]string{".gitignore": "# a.txt\n\nb.txt   \n", "a.txt": "", "b.txt": "", "#c": ""},
			want:  []string{"#c", ".gitignore", "a.txt"},
		},
		{
			name:  "negation",
			files: map[string]string{".gitignore": "*.log\n!keep.log\n", "a.log": "", "keep.log": "", "d/keep.log": ""},
			want:  []string{".gitignore", "d/keep.log", "keep.log"},
		},
		{
			name:  "last rule wins",
			files: map[string]string{".gitignore": "!a.txt\na.txt\n", "a.txt": "", "b.txt": ""},
			want:  []string{".gitignore", "b.txt"},
		},
		{
			name:  "directory only",
			files: map[string]string{".gitignore": "build/\n", "build/x": "", "src/build": "", "src/build2/y": ""},
			want:  []string{".gitignore", "src/build", "src/build2/y"},
		},
		{
			name:  "anchored with leading slash",
			files: map[string]string{".gitignore": "/out\n", "out/x": "", "sub/out/y": "", "out.txt": ""},
			want:  []string{".gitignore", "out.txt", "sub/out/y"},
		},
		{
			name:  "anchored with middle slash",
			files: map[string]string{".gitignore": "doc/*.txt\n", "doc/a.txt": "", "doc/sub/b.txt": "", "x/doc/c.txt": ""},
			want:  []string{".gitignore", "doc/sub/b.txt", "x/doc/c.txt"},
		},
		{
			name:  "double star prefix",
			files: map[string]string{".gitignore": "**/gen\n", "gen/a": "", "x/y/gen/b": "", "x/gen.go": ""},
			want:  []string{".gitignore", "x/gen.go"},
		},
		{
			name:  "double star middle",
			files: map[string]string{".gitignore": "a/**/z.txt\n", "a/z.txt": "", "a/b/c/z.txt": "", "b/a/z.txt": "", "a/y.txt": ""},
			want:  []string{".gitignore", "a/y.txt", "b/a/z.txt"},
		},
		{
			name:  "double star suffix and re-include",
			files: map[string]string{".gitignore": "vendor/**\n!vendor/keep.go\n", "vendor/a.go": "", "vendor/keep.go": "", "vendor/sub/b.go": ""},
			want:  []string{".gitignore", "vendor/keep.go"},
		},
		{
			name:  "cannot re-include inside an ignored directory",
			files: map[string]string{".gitignore": "vendor/\n!vendor/keep.go\n", "vendor/keep.go": "", "a.go": ""},
			want:  []string{".gitignore", "a.go"},
		},
		{
			name: "nested gitignore is relative to its directory and overrides",
			files: map[string]string{
				".gitignore":     "*.tmp\n/top.txt\n",
				"top.txt":        "",
				"sub/.gitignore": "/local.txt\n!important.tmp\n",
				"sub/local.txt":  "", "sub/top.txt": "", "sub/x.tmp": "", "sub/important.tmp": "",
				"sub/deeper/local.txt": "",
				"local.txt":            "",
			},
			want: []string{".gitignore", "local.txt", "sub/.gitignore", "sub/deeper/local.txt", "sub/important.tmp", "sub/top.txt"},
		},
		{
			name:  "escapes",
			files: map[string]string{".gitignore": "\\#hash\n\\!bang\nsp\\ \n", "#hash": "", "!bang": "", "sp ": "", "sp": ""}, //nolint:gocritic // "sp " with its trailing space is the case under test
			want:  []string{".gitignore", "sp"},
		},
		{
			name:  "character class and question mark",
			files: map[string]string{".gitignore": "file[0-2].txt\n?.md\n", "file1.txt": "", "file5.txt": "", "a.md": "", "ab.md": ""},
			want:  []string{".gitignore", "ab.md", "file5.txt"},
		},
		{
			name:  "info exclude",
			files: map[string]string{".git/info/exclude": "secret\n", "secret": "", "public": ""},
			want:  []string{"public"},
		},
		{
			name:  "crlf",
			files: map[string]string{".gitignore": "a.txt\r\nb.txt\r\n", "a.txt": "", "b.txt": "", "c.txt": ""},
			want:  []string{".gitignore", "c.txt"},
		},
	}
	_, gitErr := exec.LookPath("git")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			writeTree(t, root, map[string]string{".git/": ""})
			writeTree(t, root, c.files)
			got := collect(t, root, Options{Hidden: true})
			assert.Equal(t, c.want, got)
			if gitErr == nil {
				assert.Equal(t, c.want, gitUntracked(t, root), "git ls-files disagrees with the expectation")
			}
		})
	}
}

// gitUntracked lists what git considers untracked and not ignored.
func gitUntracked(t *testing.T, root string) []string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(root, ".git", "HEAD")); err != nil {
		cmd := exec.Command("git", "init", "-q", root)
		// git init keeps an existing info/exclude.
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
	}
	cmd := exec.Command("git", "-C", root, "-c", "core.quotePath=false", "ls-files", "--others", "--exclude-standard", "-z")
	out, err := cmd.Output()
	require.NoError(t, err)
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	slices.Sort(files)
	return files
}

func TestGitignoreAboveRoot(t *testing.T) {
	repo := t.TempDir()
	writeTree(t, repo, map[string]string{
		".git/":                 "",
		".gitignore":            "*.log\n/src/gen/\nsrc/pkg/skip.txt\n",
		"src/.gitignore":        "*.tmp\n",
		"src/pkg/a.go":          "",
		"src/pkg/a.log":         "",
		"src/pkg/a.tmp":         "",
		"src/pkg/skip.txt":      "",
		"src/gen/x.go":          "",
		"src/pkg/gen/y.go":      "",
		".git/info/exclude":     "excluded.go\n",
		"src/pkg/excluded.go":   "",
		"src/pkg/included.go":   "",
		"src/pkg/sub/deeper.go": "",
	})
	got := collect(t, filepath.Join(repo, "src", "pkg"), Options{})
	assert.Equal(t, []string{"a.go", "gen/y.go", "included.go", "sub/deeper.go"}, got)

	// Outside a git repository, parents' .gitignore files do not apply.
	plain := t.TempDir()
	writeTree(t, plain, map[string]string{".gitignore": "*.log\n", "sub/a.log": ""})
	assert.Equal(t, []string{"a.log"}, collect(t, filepath.Join(plain, "sub"), Options{}))
	// ... but the root's own and nested ones do.
	assert.Empty(t, collect(t, plain, Options{}))
	// NoIgnore disregards them all.
	assert.Equal(t, []string{"sub/a.log"}, collect(t, plain, Options{NoIgnore: true}))
}
