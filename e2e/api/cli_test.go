package api

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/auth"
)

// `sandboxd run -- CMD` against a `sandboxd serve` process: the output and
// the exit code of the command come back, the session is gone after, and
// the server shuts down cleanly on SIGTERM.
func TestCLIRunAgainstServe(t *testing.T) {
	state := t.TempDir()
	serve := startServe(t, state)
	// The start-up hint names what the client commands need here.
	// (serve prints it right after the URL, which startServe waited for.)
	hint := "sandboxd run --server " + serve.url + " --state-dir " + state + " -- "
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(serve.logs(), hint) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(serve.logs(), hint) {
		t.Errorf("serve's hint lacks %q:\n%s", hint, serve.logs())
	}
	runIn := func(stdin io.Reader, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"run", "--server", serve.url, "--state-dir", state}, args...)...)
		cmd.Stdin = stdin
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		if errOut.Len() > 0 {
			t.Logf("stderr of run %v: %s", args, errOut.String())
		}
		return out.String(), cmd.ProcessState.ExitCode()
	}
	run := func(args ...string) (string, int) {
		t.Helper()
		return runIn(nil, append([]string{"--"}, args...)...)
	}
	out, code := run("echo", "hi")
	if strings.TrimSpace(out) != "hi" || code != 0 {
		t.Fatalf("run echo hi: %q, exit %d", out, code)
	}
	out, code = run("echo to-stdout; echo to-stderr >&2; exit 7")
	if !strings.Contains(out, "to-stdout") || code != 7 {
		t.Fatalf("run exit 7: %q, exit %d", out, code)
	}

	// Standard input: empty without -i (cat ends at once, as with docker
	// run), handed over byte for byte with -i and never left as a file.
	out, code = runIn(strings.NewReader("ignored\n"), "--timeout", "20s", "--", "cat; echo end")
	if strings.TrimSpace(out) != "end" || code != 0 {
		t.Fatalf("run cat without -i: %q, exit %d", out, code)
	}
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(i * 7 % 251)
	}
	sum := sha256.Sum256(data)
	out, code = runIn(bytes.NewReader(data), "-i", "--", "sha256sum; ls -A /workspace | wc -l")
	if want := hex.EncodeToString(sum[:]) + "  -"; !strings.Contains(out, want) || code != 0 {
		t.Fatalf("run -i sha256sum: %q, exit %d; want %q", out, code, want)
	}
	if f := strings.Fields(out); f[len(f)-1] != "0" {
		t.Fatalf("run -i left a file in /workspace: %q", out)
	}
	out, code = runIn(strings.NewReader("x y\n"), "-i", "--", "read a b; echo \"[$b]\"; exit 3")
	if strings.TrimSpace(out) != "[y]" || code != 3 {
		t.Fatalf("run -i read: %q, exit %d", out, code)
	}

	// Every byte of a fast, long output arrives, also what the command
	// printed between run's polls.
	var want strings.Builder
	for i := 1; i <= 100000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	out, code = run("seq 1 100000")
	if code != 0 || out != want.String() {
		t.Fatalf("run seq 1 100000: exit %d, %d bytes, want %d", code, len(out), want.Len())
	}

	// A command that ignores Ctrl-C: --timeout gives up 3 s after its
	// Ctrl-C, says so, exits 124 and leaves no sandbox.
	start := time.Now()
	cmd := exec.Command(binary, "run", "--server", serve.url, "--state-dir", state, "--timeout", "1s", "--", `trap "" INT; while :; do sleep 1; done`)
	errOut, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 124 || !strings.Contains(string(errOut), "timed out after 1s") {
		t.Fatalf("run --timeout of a command ignoring Ctrl-C: exit %d, %v: %s", code, err, errOut)
	}
	t.Logf("gave up after %v", time.Since(start).Round(time.Millisecond))
	// A reader that goes away (run ... | head -1): exit 141, no sandbox left.
	// (A paced writer: a flood of tens of MB at full speed can overrun the
	// server's per-connection queue, which is not what this checks.)
	cmd = exec.Command(binary, "run", "--server", serve.url, "--state-dir", state, "--", "while :; do echo line; sleep 0.01; done")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "line\n" {
		t.Fatalf("first line %q: %v", line, err)
	}
	stdout.Close()
	_ = cmd.Wait() // it fails by design: the exit code is checked next
	if code := cmd.ProcessState.ExitCode(); code != 141 {
		t.Fatalf("run into a closed pipe: exit %d, want 141", code)
	}
	waitNoContainers(t, "after run")
	serve.stop(t)
}

// serveProc is a `sandboxd serve` child process.
type serveProc struct {
	cmd     *exec.Cmd
	url     string
	exited  chan error
	logs    func() string
	stopped bool
}

func startServe(t *testing.T, state string, extra ...string) *serveProc {
	t.Helper()
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--state-dir", state,
		"--image", testImage, "--mcp-image", testImage, "--label", labelRun + "=" + runID, "--label", labelTest + "=" + testScope(t), "--log-level", "warn",
		"--disk-dir", diskDir}, extra...)
	cmd := exec.Command(binary, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, exited: make(chan error, 1)}
	var mu sync.Mutex
	var buf bytes.Buffer
	p.logs = func() string { mu.Lock(); defer mu.Unlock(); return buf.String() }
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`WebSocket: (ws://\S+)`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			mu.Lock()
			buf.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
		p.exited <- cmd.Wait()
	}()
	t.Cleanup(func() { // a test that failed before stop
		if !p.stopped {
			_ = cmd.Process.Kill() // the test already failed; this only stops serve
			t.Logf("serve killed: %v", <-p.exited)
		}
	})
	select {
	case p.url = <-addr:
	case err := <-p.exited:
		p.stopped = true
		t.Fatalf("serve exited: %v\n%s", err, p.logs())
	case <-time.After(time.Minute):
		t.Fatalf("serve did not start:\n%s", p.logs())
	}
	return p
}

// stop sends SIGTERM and waits for a clean exit.
func (p *serveProc) stop(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.exited:
		p.stopped = true
		if err != nil {
			t.Fatalf("serve exited with %v\n%s", err, p.logs())
		}
	case <-time.After(time.Minute):
		t.Fatal("serve did not stop on SIGTERM")
	}
}

// With --keep-sessions, a session survives a server restart: the next
// server adopts it and its token still opens it (and only it).
func TestKeepSessionsOverRestart(t *testing.T) {
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	first := startServe(t, state, "--keep-sessions")
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, first.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if obs, err := s.Call(ctx, "terminal", map[string]any{"command": "echo kept > /workspace/f; export MARK=still-here"}, nil); err != nil || obs.IsError {
		t.Fatalf("prepare: %v %v", err, obs)
	}
	c.Close()
	first.stop(t)
	if n := containers(t); n != 1 {
		t.Fatalf("%d containers after a shutdown with --keep-sessions, want 1", n)
	}

	second := startServe(t, state)
	defer second.stop(t) // without --keep-sessions: removes the session
	c2, err := client.Dial(ctx, second.url, s.Token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s2, err := c2.Attach(ctx, s.ID, s.Token, 0)
	if err != nil {
		t.Fatalf("attach after restart: %v\n%s", err, second.logs())
	}
	obs, err := s2.Call(ctx, "terminal", map[string]any{"command": "cat /workspace/f; echo $MARK"}, nil)
	if err != nil || !strings.Contains(obs.Text(), "kept") || !strings.Contains(obs.Text(), "still-here") {
		t.Fatalf("after restart: %v %q", err, obs.Text())
	}
	list, err := c2.ListSessions(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("a session token lists %+v %v", list, err)
	}
}

// serve --disk-mb caps /workspace and the home folder of every session.
func TestCLIServeDiskLimit(t *testing.T) {
	state := t.TempDir()
	serve := startServe(t, state, "--disk-mb", "64")
	cmd := exec.Command(binary, "run", "--server", serve.url, "--state-dir", state, "--",
		`df -m /workspace "$HOME" | tail -n +2 | awk '{print $2}'`)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v: %s", err, out)
	}
	if got := strings.Fields(string(out)); len(got) != 2 || got[0] != "64" || got[1] != "64" {
		t.Fatalf("sizes of /workspace and home: %q, want 64 64", out)
	}
	serve.stop(t)
}

// serve puts a disk quota on /workspace and the home folder by default
// (10 GiB each, an ext4 file on a loop device) where it can, and says so.
func TestCLIServeDiskQuotaByDefault(t *testing.T) {
	state := t.TempDir()
	serve := startServe(t, state, "--log-level", "info")
	if strings.Contains(serve.logs(), "no disk quota") {
		t.Skipf("disk quotas are unavailable here:\n%s", serve.logs())
	}
	if !strings.Contains(serve.logs(), "disk quota: an ext4 file on a loop device per volume") {
		t.Fatalf("serve does not say which disk bound it uses:\n%s", serve.logs())
	}
	cmd := exec.Command(binary, "run", "--server", serve.url, "--state-dir", state, "--",
		`df -k /workspace "$HOME" | tail -n +2 | awk '{print $1, $2}'`)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v: %s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) != 4 || !strings.HasPrefix(f[0], "/dev/loop") || !strings.HasPrefix(f[2], "/dev/loop") {
		t.Fatalf("df of /workspace and home: %q, want two loop devices", out)
	}
	for _, kb := range []string{f[1], f[3]} {
		if n, _ := strconv.Atoi(kb); n < 10<<20*95/100 || n > 10<<20 {
			t.Fatalf("df of /workspace and home: %q, want about 10 GiB each", out)
		}
	}
	serve.stop(t)
}
