package glob

import (
	"context"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools/internal/walk/walktest"
)

// benchGlobs are matched in the 10k-file tree, with the equivalent
// `rg --files -g` glob for comparison.
var benchGlobs = []struct{ name, pattern, rgGlob string }{
	{"all-go", "**/*.go", "*.go"},
	{"basename", "file01*.ts", "file01*.ts"},
	{"one-dir", "pkg042/src/*.py", "/pkg042/src/*.py"},
	{"everything", "**/*", "*"},
}

// BenchmarkGlob10k measures glob on the 10k-file tree.
func BenchmarkGlob10k(b *testing.B) {
	root := b.TempDir()
	walktest.BuildTree10k(b, root)
	ex, err := NewExecutor(Options{Workspace: root})
	require.NoError(b, err)
	for _, g := range benchGlobs {
		b.Run(g.name, func(b *testing.B) {
			for b.Loop() {
				obs, err := ex.Call(context.Background(), Action{Pattern: g.pattern})
				if err != nil || obs.IsError {
					b.Fatal(err, obs.Text())
				}
			}
		})
	}
}

// BenchmarkGlobVsRipgrep10k runs our glob and `rg --files -g GLOB DIR`
// alternately on the same tree and reports both times and the ratio.
func BenchmarkGlobVsRipgrep10k(b *testing.B) {
	rg := walktest.Ripgrep(b)
	root := b.TempDir()
	walktest.BuildTree10k(b, root)
	ex, err := NewExecutor(Options{Workspace: root})
	require.NoError(b, err)
	for _, g := range benchGlobs {
		b.Run(g.name, func(b *testing.B) {
			var ours, theirs time.Duration
			for b.Loop() {
				t0 := time.Now()
				obs, err := ex.Call(context.Background(), Action{Pattern: g.pattern})
				t1 := time.Now()
				if err != nil || obs.IsError {
					b.Fatal(err, obs.Text())
				}
				cmd := exec.Command(rg, "--files", "-g", g.rgGlob, root)
				cmd.Dir = root
				if out, err := cmd.Output(); err != nil && len(out) > 0 {
					b.Fatal(err)
				}
				ours += t1.Sub(t0)
				theirs += time.Since(t1)
			}
			walktest.ReportVsRipgrep(b, ours, theirs)
		})
	}
}

// TestSameFilesAsRipgrep checks the files found against `rg --files -g`
// on a tenth of the benchmark tree. rg runs in the search directory, where
// its anchored globs work. A ripgrep --glob that matches an ignored file
// re-includes it, so "**/*" is compared with plain `rg --files`.
func TestSameFilesAsRipgrep(t *testing.T) {
	rg := walktest.Ripgrep(t)
	root := t.TempDir()
	walktest.BuildTree(t, root, walktest.TreeDirs/10)
	ex, err := NewExecutor(Options{Workspace: root})
	require.NoError(t, err)
	for _, g := range []struct {
		pattern string
		rgArgs  []string
	}{
		{"**/*.go", []string{"-g", "*.go"}},
		{"file01*.ts", []string{"-g", "file01*.ts"}},
		{"pkg004/src/*.py", []string{"-g", "/pkg004/src/*.py"}},
		{"**/*", nil},
	} {
		want := walktest.RunRipgrepIn(t, rg, root, append([]string{"--files"}, g.rgArgs...)...)
		for i, w := range want {
			want[i] = filepath.Join(root, w)
		}
		obs, err := ex.Call(context.Background(), Action{Pattern: g.pattern})
		require.NoError(t, err)
		out := obs.Structured.(*Output)
		assert.Equal(t, len(want), out.Count, g.pattern)
		assert.NotZero(t, out.Count, g.pattern)
		if len(want) <= Limit {
			got := slices.Clone(out.Files)
			slices.Sort(got)
			slices.Sort(want)
			assert.Equal(t, want, got, g.pattern)
		}
	}
}
