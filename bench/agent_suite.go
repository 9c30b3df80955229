package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
)

func init() {
	register(suite{
		name:  "agent",
		about: "tool calls through the agent protocol to a real `sandboxd agent --stdio` child on the host (no Docker)",
		run:   runAgentSuite,
	})
}

// The tree grep and glob search: 100 dirs x 100 source-like files.
const (
	treeDirs     = 100
	treeFiles    = 100
	grepPattern  = `func Needle\w+\(`
	needleEvery  = 100 // one file in needleEvery defines a Needle func: 100 matching files
	viewLines    = 500
	uploadMiB    = 64
	echoCommand  = "echo hi"
	agentTimeout = 60 * time.Second
)

func runAgentSuite(ctx context.Context, e *env) ([]row, error) {
	bin, err := e.sandboxdBinary()
	if err != nil {
		return nil, err
	}
	ws := filepath.Join(e.tmp, "workspace")
	e.logf("generating %d files under %s", treeDirs*treeFiles, ws)
	if err := makeTree(ws); err != nil {
		return nil, err
	}
	small := filepath.Join(ws, "small.txt")
	if err := os.WriteFile(small, []byte("one line\n"), 0o644); err != nil {
		return nil, err
	}
	big := filepath.Join(ws, "view500.go")
	if err := os.WriteFile(big, []byte(sourceFile(0, 1, viewLines)), 0o644); err != nil {
		return nil, err
	}

	a, err := startAgent(bin, ws, filepath.Join(e.tmp, "state"), e.log)
	if err != nil {
		return nil, err
	}
	defer a.stop()
	c := a.cli

	call := func(tool string, args any, check func(text string) error) func() error {
		raw, err := json.Marshal(args)
		if err != nil {
			panic(err)
		}
		return func() error {
			cctx, cancel := context.WithTimeout(ctx, agentTimeout)
			defer cancel()
			obs, err := c.Call(cctx, tool, raw, nil)
			if err != nil {
				return fmt.Errorf("%s: %w", tool, err)
			}
			if obs.IsError {
				return fmt.Errorf("%s: %s", tool, obs.Text())
			}
			if check != nil {
				return check(obs.Text())
			}
			return nil
		}
	}
	contains := func(want string) func(string) error {
		return func(text string) error {
			if !strings.Contains(text, want) {
				return fmt.Errorf("output lacks %q: %.300s", want, text)
			}
			return nil
		}
	}

	var rows []row
	add := func(r row, err error) error {
		if err != nil {
			return fmt.Errorf("%s: %w", r.scenario, err)
		}
		e.logf("  %-45s p50 %s  p99 %s", r.scenario, ms(r.s.p50), ms(r.s.p99))
		rows = append(rows, r)
		return nil
	}
	overheadTarget, overheadMet := p50Below(500 * time.Microsecond)
	echoTarget, echoMet := p50Below(5 * time.Millisecond)
	grepTarget, grepMet := ratioAtMost(1.5)

	s, err := measure(e.n(3000), 200, func() error { return c.Ping(ctx) })
	if err := add(row{scenario: "ping (protocol round trip)", s: s, target: overheadTarget, met: overheadMet}, err); err != nil {
		return rows, err
	}
	s, err = measure(e.n(2000), 100, call("file_editor", map[string]any{"command": "view", "path": small}, contains("one line")))
	if err := add(row{scenario: "tools/call no-op (file_editor view, 1-line file)", s: s, target: overheadTarget, met: overheadMet}, err); err != nil {
		return rows, err
	}
	s, err = measure(e.n(500), 20, call("terminal", map[string]any{"command": echoCommand}, contains("hi")))
	if err := add(row{scenario: "terminal `" + echoCommand + "` round trip", s: s, target: echoTarget, met: echoMet}, err); err != nil {
		return rows, err
	}
	s, err = measure(e.n(500), 20, call("file_editor", map[string]any{"command": "view", "path": big}, contains(fmt.Sprintf("%6d\t", viewLines))))
	if err := add(row{scenario: fmt.Sprintf("file_editor view, %d-line file", viewLines), s: s}, err); err != nil {
		return rows, err
	}

	// glob and grep over the tree, with ripgrep as the baseline.
	rg, rgErr := exec.LookPath("rg")
	if rgErr != nil {
		e.logf("ripgrep (rg) not found: no baselines; install it with `apt-get install -y ripgrep`")
	}
	baseline := func(args ...string) (string, sample, error) {
		if rg == "" {
			return "", sample{}, nil
		}
		cmdline := "rg " + shellJoin(args)
		s, err := measure(e.n(40), 3, func() error {
			out, err := exec.CommandContext(ctx, rg, args...).Output()
			if err != nil {
				return fmt.Errorf("%s: %w", cmdline, err)
			}
			if len(out) == 0 {
				return fmt.Errorf("%s: no output", cmdline)
			}
			return nil
		})
		return strings.ReplaceAll(cmdline, ws, "DIR"), s, err
	}

	globArgs := map[string]any{"pattern": "**/*.go", "path": ws}
	s, err = measure(e.n(40), 3, call("glob", globArgs, contains(".go")))
	if err != nil {
		return rows, fmt.Errorf("glob: %w", err)
	}
	bname, bs, err := baseline("--files", "-g", "*.go", ws)
	if err := add(row{scenario: fmt.Sprintf("glob `**/*.go`, %d files", treeDirs*treeFiles), s: s, baseline: bname, base: bs}, err); err != nil {
		return rows, err
	}

	for _, sensitive := range []bool{true, false} {
		args := map[string]any{"pattern": grepPattern, "path": ws, "case_sensitive": sensitive}
		rgArgs := []string{"-l", grepPattern, ws}
		label := "case-sensitive"
		if !sensitive {
			rgArgs = []string{"-l", "-i", grepPattern, ws}
			label = "ignore case: the tool's default"
		}
		if err := sameFiles(ctx, c, rg, args, rgArgs); err != nil {
			return rows, err
		}
		s, err = measure(e.n(40), 3, call("grep", args, contains("Needle")))
		if err != nil {
			return rows, fmt.Errorf("grep: %w", err)
		}
		bname, bs, err := baseline(rgArgs...)
		r := row{scenario: fmt.Sprintf("grep `%s` (%s), %d files", grepPattern, label, treeDirs*treeFiles), s: s, baseline: bname, base: bs}
		if bname != "" {
			r.target, r.met = grepTarget, grepMet
		}
		if err := add(r, err); err != nil {
			return rows, err
		}
	}

	// A transfer, for throughput: upload then download of one file.
	payload := bytes.Repeat([]byte("0123456789abcdef"), uploadMiB<<16)
	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	_ = tw.WriteHeader(&tar.Header{Name: "blob", Mode: 0o644, Size: int64(len(payload)), Typeflag: tar.TypeReg})
	_, _ = tw.Write(payload)
	_ = tw.Close()
	s, err = measure(e.n(5), 1, func() error { return c.Upload(ctx, "upload", bytes.NewReader(archive.Bytes())) })
	if err := add(row{scenario: fmt.Sprintf("fs/upload %d MiB tar", uploadMiB), s: s}, err); err != nil {
		return rows, err
	}
	s, err = measure(e.n(5), 1, func() error { return c.Download(ctx, "upload/blob", io.Discard) })
	if err := add(row{scenario: fmt.Sprintf("fs/download %d MiB tar", uploadMiB), s: s}, err); err != nil {
		return rows, err
	}
	return rows, nil
}

// shellJoin quotes what a shell would split or expand, for display.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = a
		if strings.ContainsAny(a, " \\*?()[]{}$'\"") {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// sameFiles checks that the grep tool and ripgrep find the same files, so
// the comparison is of equal work.
func sameFiles(ctx context.Context, c *agentclient.Client, rg string, args map[string]any, rgArgs []string) error {
	if rg == "" {
		return nil
	}
	raw, _ := json.Marshal(args)
	obs, err := c.Call(ctx, "grep", raw, nil)
	if err != nil {
		return err
	}
	var st struct {
		Matches   []string `json:"matches"`
		Truncated bool     `json:"truncated"`
	}
	b, _ := json.Marshal(obs.Structured)
	if err := json.Unmarshal(b, &st); err != nil {
		return fmt.Errorf("grep structured output: %w", err)
	}
	out, err := exec.CommandContext(ctx, rg, rgArgs...).Output()
	if err != nil {
		return fmt.Errorf("rg: %w", err)
	}
	want := strings.Fields(string(out))
	slices.Sort(want)
	slices.Sort(st.Matches)
	if st.Truncated || !slices.Equal(want, st.Matches) {
		return fmt.Errorf("grep and rg disagree: grep found %d files (truncated %v), rg %d", len(st.Matches), st.Truncated, len(want))
	}
	return nil
}

// makeTree writes treeDirs x treeFiles Go-like files; one in needleEvery
// defines a NeedleN function.
func makeTree(root string) error {
	for d := range treeDirs {
		dir := filepath.Join(root, fmt.Sprintf("pkg%03d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for f := range treeFiles {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("file%03d.go", f)), []byte(sourceFile(d, f, 40)), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

func sourceFile(d, f, lines int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "package pkg%03d\n\nimport (\n\t\"fmt\"\n\t\"strings\"\n)\n\n", d)
	n := 7
	for i := 0; n+5 <= lines; i++ {
		name := fmt.Sprintf("Helper%d_%d_%d", d, f, i)
		if i == 2 && (d*treeFiles+f)%needleEvery == 0 {
			name = fmt.Sprintf("Needle%d", d)
		}
		fmt.Fprintf(&b, "// %s joins its arguments for record %d.\nfunc %s(parts ...string) string {\n\treturn fmt.Sprint(strings.Join(parts, \",\"), %d)\n}\n\n", name, i, name, i)
		n += 5
	}
	for ; n < lines; n++ {
		b.WriteString("// end\n")
	}
	return b.String()
}

// agentProc is a `sandboxd agent --stdio` child and its client.
type agentProc struct {
	cmd *exec.Cmd
	cli *agentclient.Client
}

func startAgent(bin, ws, state string, log io.Writer, extra ...string) (*agentProc, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"agent", "--stdio", "--workspace", ws, "--state-dir", state, "--log-level", "warn"}, extra...)...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, log
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s agent: %w", bin, err)
	}
	inR.Close()
	outW.Close()
	a := &agentProc{cmd: cmd, cli: agentclient.NewClient(proto.JoinConn(outR, inW))}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.cli.Ping(ctx); err != nil {
		a.stop()
		return nil, fmt.Errorf("the agent does not answer: %w", err)
	}
	return a, nil
}

func (a *agentProc) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = a.cli.Shutdown(ctx)
	a.cli.Close()
	done := make(chan struct{})
	// The agent's exit status says nothing here: it was told to shut down,
	// and a kill after the grace period is what makes it exit otherwise.
	go func() { _ = a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		<-done
	}
}

// sandboxdBinary returns -agent, or builds ./cmd/sandboxd the way it ships
// (CGO_ENABLED=0) once.
func (e *env) sandboxdBinary() (string, error) {
	if e.agentBin != "" {
		return e.agentBin, nil
	}
	e.logf("building sandboxd")
	bin, err := testenv.BuildBinary(context.Background(), e.tmp)
	if err != nil {
		return "", err
	}
	e.agentBin = bin
	return bin, nil
}
