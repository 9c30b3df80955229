package grep

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools/internal/walk/walktest"
)

// benchPatterns are searched in the 10k-file tree: a rare literal (1% of
// the files), regexes with a literal to look for, a word that is in every
// file (each file is left at its first match), regexes without a useful
// literal (the DFA's case) and an alternation.
var benchPatterns = []struct {
	name, pattern string
	caseSensitive bool
}{
	{"rare-literal-i", walktest.RareWord, false},
	{"rare-literal", walktest.RareWord, true},
	{"regex-i", `func\s+\w+Pool\w*\(`, false},
	{"regex", `func\s+\w+Pool\w*\(`, true},
	{"common-i", "error", false},
	{"no-literal", `[0-9]{4}-[0-9]{2}`, true},
	{"no-literal-i", `\bq\w+`, false},
	{"uppercase-run", `[A-Z]{5,}`, true},
	{"alternation-i", `exhausted|2024-03-1[0-9]|retries`, false},
}

func rgArgs(pattern string, caseSensitive bool, root string) []string {
	args := []string{"-l"}
	if !caseSensitive {
		args = append(args, "-i")
	}
	return append(args, "--", pattern, root)
}

// BenchmarkGrep10k measures the default (files) mode on the 10k tree.
func BenchmarkGrep10k(b *testing.B) {
	root := b.TempDir()
	walktest.BuildTree10k(b, root)
	ex, err := NewExecutor(Options{Workspace: root})
	require.NoError(b, err)
	for _, p := range benchPatterns {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				obs, err := ex.Call(context.Background(), Action{Pattern: p.pattern, CaseSensitive: p.caseSensitive})
				if err != nil || obs.IsError {
					b.Fatal(err, obs.Text())
				}
			}
		})
	}
}

// BenchmarkGrepVsRipgrep10k runs our search and `rg -l [-i] PATTERN DIR`
// alternately on the same tree and reports both times and their ratio
// (x-rg: ours / ripgrep; the target is at most 1.5).
func BenchmarkGrepVsRipgrep10k(b *testing.B) {
	rg := walktest.Ripgrep(b)
	root := b.TempDir()
	walktest.BuildTree10k(b, root)
	ex, err := NewExecutor(Options{Workspace: root})
	require.NoError(b, err)
	for _, p := range benchPatterns {
		b.Run(p.name, func(b *testing.B) {
			var ours, theirs time.Duration
			args := rgArgs(p.pattern, p.caseSensitive, root)
			for b.Loop() {
				t0 := time.Now()
				obs, err := ex.Call(context.Background(), Action{Pattern: p.pattern, CaseSensitive: p.caseSensitive})
				t1 := time.Now()
				if err != nil || obs.IsError {
					b.Fatal(err, obs.Text())
				}
				if out, err := exec.Command(rg, args...).Output(); err != nil && len(out) > 0 {
					b.Fatal(err)
				}
				ours += t1.Sub(t0)
				theirs += time.Since(t1)
			}
			walktest.ReportVsRipgrep(b, ours, theirs)
		})
	}
}

// TestSameFilesAsRipgrep checks that the default mode finds exactly the
// files `rg -l` finds on (a tenth of) the benchmark tree.
func TestSameFilesAsRipgrep(t *testing.T) {
	rg := walktest.Ripgrep(t)
	root := t.TempDir()
	walktest.BuildTree(t, root, walktest.TreeDirs/10)
	ex, err := NewExecutor(Options{Workspace: root})
	require.NoError(t, err)
	for _, p := range benchPatterns {
		want := walktest.RunRipgrep(t, rg, rgArgs(p.pattern, p.caseSensitive, root)...)
		obs, err := ex.Call(context.Background(), Action{Pattern: p.pattern, CaseSensitive: p.caseSensitive, Limit: MaxLimit})
		require.NoError(t, err)
		out := obs.Structured.(*Output)
		assert.Equal(t, len(want), out.Count, p.name)
		if len(want) > MaxLimit {
			continue
		}
		got := slices.Clone(out.Matches)
		slices.Sort(got)
		slices.Sort(want)
		assert.Equal(t, want, got, p.name)
		assert.NotEmpty(t, got, p.name)
	}
}
