package main

import (
	"archive/tar"
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

var grepTree = flag.String("grep-tree", "", "scale-grep suite: the host tree uploaded into the session (default: the Go source tree, $(go env GOROOT)/src)")

func init() {
	register(suite{
		name: "scale-grep",
		about: "grep and glob tools on a large tree inside a sandbox (-grep-tree, default the Go source tree, uploaded through the API) " +
			"vs rg, grep -r and find run by the terminal tool in the same container (image: -work-image, which must have rg)",
		run:   runGrepSuite,
		named: true,
	})
}

// tarTree streams dir as a tar of regular files and directories (links
// and the rest are left out), their names under prefix ("" or "dir/").
func tarTree(dir, prefix string, w io.WriteCloser) {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return nil
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = prefix+filepath.ToSlash(rel), 0, 0, "", ""
		if info.IsDir() {
			h.Name += "/"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if pw, ok := w.(*io.PipeWriter); ok && err != nil {
		_ = pw.CloseWithError(err)
		return
	}
	_ = w.Close()
}

func runGrepSuite(ctx context.Context, e *env) (_ []row, err error) {
	tree := *grepTree
	if tree == "" {
		out, err := exec.CommandContext(ctx, "go", "env", "GOROOT").Output()
		if err != nil {
			return nil, fmt.Errorf("scale-grep: go env GOROOT (or pass -grep-tree): %w", err)
		}
		tree = filepath.Join(strings.TrimSpace(string(out)), "src")
	}
	if st, err := os.Stat(tree); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("scale-grep: -grep-tree %s is not a directory", tree)
	}
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	rs, err := newRunScope()
	if err != nil {
		return nil, err
	}
	defer rs.end(&err, "")
	srv, err := startHarnessServer(ctx, su.bin, *workImage, rs.labels(), 0, 0, su.quiet)
	if err != nil {
		return nil, err
	}
	defer srv.stop()
	c, err := client.Dial(ctx, srv.url, srv.token, client.Options{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	sess, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("scale-grep: session of %s (make image): %w", *workImage, err)
	}
	defer func() { _ = sess.Close(context.WithoutCancel(ctx)) }()
	term := func(cmd string) (string, error) {
		obs, err := sess.Call(ctx, "terminal", map[string]any{"command": cmd, "timeout": 300.0}, nil)
		if err != nil {
			return "", err
		}
		if obs.IsError {
			return "", fmt.Errorf("%s: %.300s", cmd, obs.Text())
		}
		return obs.Text(), nil
	}
	if out, err := term("command -v rg grep find"); err != nil || strings.Count(out, "/") < 3 {
		return nil, fmt.Errorf("scale-grep: %s lacks rg, grep or find (%q, %v)", *workImage, out, err)
	}
	const dest = "/workspace/tree"
	e.logf("scale-grep: uploading %s to %s", tree, dest)
	pr, pw := io.Pipe()
	go tarTree(tree, "", pw)
	t := time.Now()
	if err := sess.Upload(ctx, dest, pr); err != nil {
		_ = pr.CloseWithError(err)
		return nil, fmt.Errorf("scale-grep: upload: %w", err)
	}
	files, err := term("find " + dest + " -type f | wc -l; du -sh " + dest + " | cut -f1")
	if err != nil {
		return nil, err
	}
	up := time.Since(t)
	what := strings.Join(strings.Fields(firstLines(files, 2)), " files, ")
	e.logf("scale-grep: uploaded in %.1fs: %s", up.Seconds(), what)

	tool := func(name string, args map[string]any) func() error {
		return func() error {
			obs, err := sess.Call(ctx, name, args, nil)
			if err != nil {
				return err
			}
			if obs.IsError {
				return fmt.Errorf("%s: %.300s", name, obs.Text())
			}
			return nil
		}
	}
	shell := func(cmd string) func() error {
		return func() error { _, err := term(cmd); return err }
	}
	count := func(name string, args map[string]any) string {
		obs, err := sess.Call(ctx, name, args, nil)
		if err != nil || obs == nil {
			return fmt.Sprint(err)
		}
		if m, ok := obs.Structured.(map[string]any); ok {
			return fmt.Sprint(m["count"])
		}
		return "?"
	}
	n := e.n(10)
	rows := []row{{scenario: fmt.Sprintf("scale-grep: files.upload of the tree (%s), one tar stream through the WebSocket client", what),
		s: sample{n: 1, p50: up, p99: up}}}
	type cmp struct {
		label    string
		toolName string
		args     map[string]any
		base     string
		baseName string
		others   map[string]string
	}
	// The tools ignore case by default and skip hidden, .gitignored and
	// binary files, as rg does by default (--no-require-git: the tools
	// honour .gitignore outside a repository too).
	cases := []cmp{
		{"grep literal `func NewReader`, files mode", "grep", map[string]any{"pattern": "func NewReader", "path": dest},
			"rg -il --no-require-git 'func NewReader' " + dest + " | wc -l", "rg -il",
			map[string]string{"grep -rilI": "grep -rilI 'func NewReader' " + dest + " | wc -l"}},
		{"grep regex `func \\w+Reader\\(`, files mode", "grep", map[string]any{"pattern": `func \w+Reader\(`, "path": dest},
			"rg -il --no-require-git 'func \\w+Reader\\(' " + dest + " | wc -l", "rg -il",
			map[string]string{"grep -rilIE": "grep -rilIE 'func [[:alnum:]_]+Reader\\(' " + dest + " | wc -l"}},
		{"grep regex `func \\w+Reader\\(`, content mode", "grep", map[string]any{"pattern": `func \w+Reader\(`, "path": dest, "output_mode": "content"},
			"rg -in --no-require-git 'func \\w+Reader\\(' " + dest + " | wc -l", "rg -in", nil},
		{"glob `**/*_test.go`", "glob", map[string]any{"pattern": "**/*_test.go", "path": dest},
			"rg --files --no-require-git -g '*_test.go' " + dest + " | wc -l", "rg --files -g",
			map[string]string{"find -name": "find " + dest + " -name '*_test.go' | wc -l"}},
	}
	// Warm the page cache and check that they agree on the counts.
	for _, k := range cases {
		out, err := term(k.base)
		if err != nil {
			return nil, err
		}
		e.logf("scale-grep: %s: tool count %s, %s: %s", k.label, count(k.toolName, k.args), k.baseName, strings.TrimSpace(firstLines(out, 1)))
		for name, cmd := range k.others {
			out, err := term(cmd)
			if err != nil {
				return nil, err
			}
			e.logf("scale-grep: %s: %s: %s", k.label, name, strings.TrimSpace(firstLines(out, 1)))
		}
	}
	target, met := ratioAtMost(1.5)
	for _, k := range cases {
		e.logf("scale-grep: %s x%d", k.label, n)
		b, err := measure(n, 2, shell(k.base))
		if err != nil {
			return nil, err
		}
		s, err := measure(n, 2, tool(k.toolName, k.args))
		if err != nil {
			return nil, err
		}
		rows = append(rows, row{scenario: fmt.Sprintf("scale-grep: %s tool, %s", k.toolName, k.label), s: s,
			baseline: k.baseName + " via the terminal tool, same container", base: b, target: target, met: met})
		for name, cmd := range k.others {
			o, err := measure(n, 1, shell(cmd))
			if err != nil {
				return nil, err
			}
			rows = append(rows, row{scenario: fmt.Sprintf("scale-grep: %s via the terminal tool, %s", name, k.label), s: o,
				baseline: k.baseName + " via the terminal tool, same container", base: b})
		}
	}
	return rows, nil
}

// firstLines is the first n lines of s.
func firstLines(s string, n int) string {
	l := strings.SplitN(s, "\n", n+1)
	return strings.Join(l[:min(n, len(l))], "\n")
}
