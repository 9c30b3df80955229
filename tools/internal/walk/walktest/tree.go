// Package walktest builds the file trees the grep and glob benchmarks and
// tests search, and runs ripgrep on them for comparison.
package walktest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Tree10k describes the benchmark tree: 100 directories of 100 files (about
// 10,000 files, 3 KiB of source-like text each). In every directory 10
// files are *.log and one is under build/, which the root .gitignore
// excludes; a .git directory makes ripgrep honour it too. The word
// "ConnectionPoolExhausted" is in 1% of the searchable files and a line
// "// NOTICE: updated 2024-03-DD" in 2%.
const (
	TreeDirs     = 100
	FilesPerDir  = 100
	RareWord     = "ConnectionPoolExhausted"
	rareEvery    = 100
	datedEvery   = 50
	linesPerFile = 80
)

var vocabulary = strings.Fields(`func return if else for range err nil ctx context Context request
	response handler server client config value key map slice string int bool error log info debug
	user account session token cache store read write open close start stop retry timeout buffer
	parse format encode decode marshal result status message event queue worker pool connection`)

// BuildTree10k writes the benchmark tree under root (deterministic: same
// content every run) and returns how many files grep should search.
func BuildTree10k(tb testing.TB, root string) int {
	tb.Helper()
	return BuildTree(tb, root, TreeDirs)
}

// BuildTree writes the first dirs directories of the benchmark tree.
func BuildTree(tb testing.TB, root string, dirs int) int {
	tb.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	must(tb, os.MkdirAll(filepath.Join(root, ".git"), 0o755))
	must(tb, os.WriteFile(filepath.Join(root, ".gitignore"), []byte("*.log\nbuild/\n"), 0o644))
	exts := []string{".go", ".py", ".ts", ".js", ".md"}
	searchable, n := 0, 0
	base := time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)
	for d := range dirs {
		dir := filepath.Join(root, fmt.Sprintf("pkg%03d", d), "src")
		must(tb, os.MkdirAll(filepath.Join(dir, "build"), 0o755))
		for f := range FilesPerDir {
			var name string
			switch {
			case f < 10:
				name = fmt.Sprintf("trace%02d.log", f)
			case f == 10:
				name = filepath.Join("build", "out.js")
			default:
				name = fmt.Sprintf("file%03d%s", f, exts[f%len(exts)])
			}
			ignored := f <= 10
			var b bytes.Buffer
			rare := !ignored && searchable%rareEvery == 0
			for l := range linesPerFile {
				writeLine(&b, rng, l)
				if !ignored && searchable%datedEvery == 0 && l == 3 {
					fmt.Fprintf(&b, "// NOTICE: updated 2024-03-%02d\n", 1+searchable%28)
				}
				if rare && l == linesPerFile/2 {
					fmt.Fprintf(&b, "\treturn nil, %s\n", RareWord)
				}
			}
			if ignored {
				fmt.Fprintf(&b, "%s in an ignored file\n", RareWord)
			} else {
				searchable++
			}
			p := filepath.Join(dir, name)
			must(tb, os.WriteFile(p, b.Bytes(), 0o644))
			mt := base.Add(time.Duration(n) * time.Second)
			must(tb, os.Chtimes(p, mt, mt))
			n++
		}
	}
	return searchable
}

func writeLine(b *bytes.Buffer, rng *rand.Rand, l int) {
	switch l % 8 {
	case 0:
		fmt.Fprintf(b, "func %s%s(ctx context.Context, %s string) error {\n", word(rng), title(word(rng)), word(rng))
	case 7:
		b.WriteString("}\n")
	default:
		b.WriteString("\t")
		for range 3 + rng.IntN(6) {
			b.WriteString(word(rng))
			b.WriteByte(' ')
		}
		b.WriteString(":= nil\n")
	}
}

func word(rng *rand.Rand) string { return vocabulary[rng.IntN(len(vocabulary))] }

func title(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// Ripgrep returns the path of rg, skipping the test or benchmark when it is
// not installed.
func Ripgrep(tb testing.TB) string {
	tb.Helper()
	rg, err := exec.LookPath("rg")
	if err != nil {
		tb.Skip("ripgrep (rg) is not installed")
	}
	return rg
}

// RunRipgrep runs rg with args and returns the lines it printed. Exit code
// 1 (no match) is not an error.
func RunRipgrep(tb testing.TB, rg string, args ...string) []string {
	tb.Helper()
	return RunRipgrepIn(tb, rg, "", args...)
}

// RunRipgrepIn is RunRipgrep with dir as rg's working directory (its
// anchored --glob patterns are relative to it).
func RunRipgrepIn(tb testing.TB, rg, dir string, args ...string) []string {
	tb.Helper()
	cmd := exec.Command(rg, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) && ee.ExitCode() == 1 {
		err = nil
	}
	if err != nil {
		tb.Fatalf("rg %v: %v", args, err)
	}
	var lines []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// ReportVsRipgrep reports the mean time per iteration of ours and of
// ripgrep, and their ratio, as the benchmark's metrics (ns/op, which would
// mix both, is zeroed).
func ReportVsRipgrep(b *testing.B, ours, theirs time.Duration) {
	n := float64(b.N)
	b.ReportMetric(float64(ours.Microseconds())/n/1000, "ours-ms")
	b.ReportMetric(float64(theirs.Microseconds())/n/1000, "rg-ms")
	b.ReportMetric(float64(ours)/float64(theirs), "x-rg")
	b.ReportMetric(0, "ns/op")
}
