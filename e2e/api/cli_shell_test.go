package api

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

// lockedBuffer collects a child's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func waitOutput(t *testing.T, what string, b *lockedBuffer, want string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !strings.Contains(b.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no %q in:\n%s", what, want, b.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// The developer paths of the CLI: Ctrl-C in `sandboxd shell` interrupts the
// running command (not the shell), `shell --keep` leaves the session for
// `shell --session` to attach to with its shell state, and `run --image`
// picks the image (a missing one is a clear error).
func TestCLIShellInterruptAttachAndRunImage(t *testing.T) {
	// The state directory is the default one (under XDG_STATE_HOME): the
	// start-up hint then leaves --state-dir out.
	xdg := t.TempDir()
	t.Setenv("XDG_STATE_HOME", xdg)
	state := filepath.Join(xdg, "sandboxd")
	serve := startServe(t, state)
	conn := []string{"--server", serve.url}
	hint := "sandboxd run --server " + serve.url + " -- "
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(serve.logs(), hint) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !strings.Contains(serve.logs(), hint) {
		t.Errorf("serve's hint is not %q:\n%s", hint, serve.logs())
	}

	// Ctrl-C (SIGINT to the shell process) interrupts `sleep`; the next
	// line then runs.
	cmd := exec.Command(binary, append([]string{"shell", "--keep"}, conn...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out, errOut lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if _, err := io.WriteString(stdin, "export MARK=kept-$((6*7)); echo started; sleep 30; echo not-interrupted\n"); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, "shell", &out, "started")
	time.Sleep(300 * time.Millisecond) // sleep is running
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "echo after-interrupt\n"); err != nil {
		t.Fatal(err)
	}
	waitOutput(t, "shell after Ctrl-C", &out, "after-interrupt")
	stdin.Close()
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("shell exited with %v\n%s", err, errOut.String())
		}
	case <-time.After(time.Minute):
		_ = cmd.Process.Kill() // the test fails either way; this only stops it
		t.Fatal("shell did not leave at the end of its input")
	}
	if strings.Contains(out.String(), "not-interrupted") {
		t.Fatalf("Ctrl-C did not interrupt the command:\n%s", out.String())
	}
	attachHint := regexp.MustCompile(`SANDBOXD_SESSION_TOKEN=(\S+) sandboxd shell(?: --server \S+)? --session (\S+)\n`).FindStringSubmatch(errOut.String())
	if attachHint == nil {
		t.Fatalf("no attach hint:\n%s", errOut.String())
	}
	token, id := attachHint[1], attachHint[2]

	// --keep left the session; another shell attaches with only its token
	// and finds the shell state.
	attach := exec.Command(binary, append([]string{"shell", "--session", id}, conn...)...)
	attach.Env = append(os.Environ(), "SANDBOXD_SESSION_TOKEN="+token, "SANDBOXD_TOKEN=")
	attach.Stdin = strings.NewReader("echo mark=$MARK\n")
	got, err := attach.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "mark=kept-42") {
		t.Fatalf("attach: %v\n%s", err, got)
	}
	// It first shows the output the server still holds, as its help says.
	if !strings.Contains(string(got), "after-interrupt") {
		t.Fatalf("attach did not replay the earlier output:\n%s", got)
	}
	// Attaching does not close: the session is still there; close it.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, serve.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Attach(ctx, id, token, 0)
	if err != nil {
		t.Fatalf("the kept session after attach: %v", err)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// run --image: the named image, or a clear error for a missing one.
	run := exec.Command(binary, append(append([]string{"run", "--image", testImage}, conn...), "--", "cat /etc/os-release 2>/dev/null || echo no-os-release; echo ran")...)
	got, err = run.CombinedOutput()
	if err != nil || !strings.Contains(string(got), "ran") {
		t.Fatalf("run --image %s: %v\n%s", testImage, err, got)
	}
	run = exec.Command(binary, append(append([]string{"run", "--image", "sandboxd-no-such-image:nope"}, conn...), "--", "true")...)
	got, err = run.CombinedOutput()
	if err == nil || !strings.Contains(string(got), "sandboxd-no-such-image:nope") {
		t.Fatalf("run with a missing image: %v\n%s", err, got)
	}
	serve.stop(t)
	if n := containers(t); n != 0 {
		t.Fatalf("%d containers left", n)
	}
}
