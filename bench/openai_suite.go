package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

func init() {
	register(suite{
		name:  "openai",
		about: "OpenAI's apply_patch (a 20-hunk V4A patch on a 5,000-line file) beside file_editor str_replace, through a real `sandboxd agent --stdio` (no Docker)",
		run:   runOpenAISuite,
	})
}

const (
	patchFileLines = 5000
	patchHunks     = 20
)

// patchFile is a 5,000-line source file whose line i reads "v = <tag>" on
// every 250th line (the lines a patch changes), a plain line otherwise.
func patchFile(tag string) string {
	var b strings.Builder
	for i := range patchFileLines {
		if i%(patchFileLines/patchHunks) == patchFileLines/patchHunks/2 {
			fmt.Fprintf(&b, "    v%d = %q\n", i, tag)
		} else {
			fmt.Fprintf(&b, "    line_%d = compute(%d)  # some text\n", i, i)
		}
	}
	return b.String()
}

// v4aPatch is the update diff that turns patchFile(from) into
// patchFile(to): 20 hunks, three lines of context on each side.
func v4aPatch(from, to string) string {
	lines := strings.Split(strings.TrimSuffix(patchFile(from), "\n"), "\n")
	var b strings.Builder
	for i := range lines {
		if i%(patchFileLines/patchHunks) != patchFileLines/patchHunks/2 {
			continue
		}
		b.WriteString("@@\n")
		for _, c := range lines[i-3 : i] {
			b.WriteString(" " + c + "\n")
		}
		fmt.Fprintf(&b, "-    v%d = %q\n+    v%d = %q\n", i, from, i, to)
		for _, c := range lines[i+1 : i+4] {
			b.WriteString(" " + c + "\n")
		}
	}
	return b.String()
}

func runOpenAISuite(ctx context.Context, e *env) ([]row, error) {
	bin, err := e.sandboxdBinary()
	if err != nil {
		return nil, err
	}
	ws := filepath.Join(e.tmp, "openai-ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, err
	}
	patched := filepath.Join(ws, "patched.py")
	edited := filepath.Join(ws, "edited.py")
	for _, p := range []string{patched, edited} {
		if err := os.WriteFile(p, []byte(patchFile("A")), 0o644); err != nil {
			return nil, err
		}
	}
	a, err := startAgent(bin, ws, filepath.Join(e.tmp, "openai-state"), e.log,
		"--tools", `[{"name":"apply_patch","params":{"file_editor":true}}]`)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	c := a.cli

	call := func(tool string, args any) error {
		raw, err := json.Marshal(args)
		if err != nil {
			return err
		}
		cctx, cancel := context.WithTimeout(ctx, agentTimeout)
		defer cancel()
		obs, err := c.Call(cctx, tool, raw, nil)
		if err != nil {
			return fmt.Errorf("%s: %w", tool, err)
		}
		if obs.IsError {
			return fmt.Errorf("%s: %.300s", tool, obs.Text())
		}
		return nil
	}
	// Each iteration applies the patch one way, the next one back: the
	// file is always the one the next patch expects.
	forward, back := v4aPatch("A", "B"), v4aPatch("B", "A")
	flip := false
	patch := func() error {
		d := forward
		if flip {
			d = back
		}
		flip = !flip
		return call("apply_patch", map[string]any{"operation": map[string]any{"type": "update_file", "path": "patched.py", "diff": d}})
	}
	mid := patchFileLines / patchHunks / 2
	oneOld, oneNew := fmt.Sprintf("    v%d = \"A\"\n", mid), fmt.Sprintf("    v%d = \"B\"\n", mid)
	replaced := false
	replace := func() error {
		o, n := oneOld, oneNew
		if replaced {
			o, n = n, o
		}
		replaced = !replaced
		return call("file_editor", map[string]any{"command": "str_replace", "path": edited, "old_str": o, "new_str": n})
	}
	var rows []row
	base, err := measure(e.n(200), 10, replace)
	if err != nil {
		return nil, fmt.Errorf("file_editor str_replace: %w", err)
	}
	baseName := fmt.Sprintf("file_editor str_replace, 1 hunk, %d-line file", patchFileLines)
	e.logf("  %-45s p50 %s  p99 %s", baseName, ms(base.p50), ms(base.p99))
	s, err := measure(e.n(200), 10, patch)
	if err != nil {
		return nil, fmt.Errorf("apply_patch: %w", err)
	}
	scenario := fmt.Sprintf("apply_patch update_file, %d hunks, %d-line file", patchHunks, patchFileLines)
	e.logf("  %-45s p50 %s  p99 %s", scenario, ms(s.p50), ms(s.p99))
	rows = append(rows,
		row{scenario: baseName, s: base},
		row{scenario: scenario, s: s, baseline: "file_editor str_replace (1 hunk)", base: base})
	return rows, nil
}
