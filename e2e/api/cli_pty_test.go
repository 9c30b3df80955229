package api

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

// tmuxServer is a private tmux server (its own socket, no user config) in
// which the tests run terminals and read their screens.
type tmuxServer struct {
	t    *testing.T
	sock string
}

func newTmux(t *testing.T) *tmuxServer {
	t.Helper()
	if _, err := exec.LookPath("tmux"); err != nil {
		t.Skip("tmux is not installed (make deps installs it)")
	}
	x := &tmuxServer{t: t, sock: "sandboxd-e2e-" + runID + "-" + fmt.Sprint(time.Now().UnixNano())}
	t.Cleanup(func() { _ = exec.Command("tmux", "-L", x.sock, "kill-server").Run() }) // the test is over; its panes go
	return x
}

func (x *tmuxServer) run(args ...string) string {
	x.t.Helper()
	out, err := exec.Command("tmux", append([]string{"-L", x.sock, "-f", "/dev/null"}, args...)...).CombinedOutput()
	if err != nil {
		x.t.Fatalf("tmux %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// screen is what pane shows now.
func (x *tmuxServer) screen(pane string) string { return x.run("capture-pane", "-p", "-t", pane) }

// waitScreen waits until cond holds of pane's screen. The bound protects
// against a hang; it is no figure.
func (x *tmuxServer) waitScreen(pane, what string, cond func(screen string) bool) string {
	x.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		s := x.screen(pane)
		if cond(s) {
			return s
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("%s: not on the screen of %s:\n%s", what, pane, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (x *tmuxServer) waitText(pane, text string) string {
	x.t.Helper()
	return x.waitScreen(pane, fmt.Sprintf("%q", text), func(s string) bool { return strings.Contains(s, text) })
}

// keys types into pane (tmux key names, e.g. Enter, C-c, Escape).
func (x *tmuxServer) keys(pane string, keys ...string) {
	x.t.Helper()
	x.run(append([]string{"send-keys", "-t", pane}, keys...)...)
}

// text types literal text into pane.
func (x *tmuxServer) text(pane, s string) {
	x.t.Helper()
	x.run("send-keys", "-t", pane, "-l", s)
}

// size is pane's size as tmux has it: "rows cols", as `stty size` prints.
func (x *tmuxServer) size(pane string) string {
	return strings.TrimSpace(x.run("display-message", "-p", "-t", pane, "#{pane_height} #{pane_width}"))
}

// waitFile waits until path exists and returns its content.
func waitFile(t *testing.T, path string) string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && len(b) > 0 {
			return string(b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written", path)
		}
	}
}

// `sandboxd shell` in a terminal (a tmux pane) is a real terminal in the
// sandbox: vi edits a file that the API then reads back, Ctrl-C interrupts
// the remote command and not the CLI, a window resize shows in `stty
// size`, the exit code is the remote shell's and the local terminal's
// settings are restored. `sandboxd shell --follow` in another pane shows an
// agent's command, run through the API's terminal tool, live.
func TestCLIShellInTmux(t *testing.T) {
	x := newTmux(t)
	state := t.TempDir()
	serve := startServe(t, state)
	t.Cleanup(func() { // before startServe's kill: the sessions are removed
		if !serve.stopped {
			serve.stop(t)
		}
	})
	dir := t.TempDir()
	script := filepath.Join(dir, "shell.sh")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(`cd %q
stty -g > before
%q shell --server %q --state-dir %q 2> shell.err
echo "exit=$?" > code
stty -g > after
exec sleep 600
`, dir, binary, serve.url, state)), 0o755); err != nil {
		t.Fatal(err)
	}
	x.run("new-session", "-d", "-s", "shell", "-x", "100", "-y", "30", "sh "+script)
	const pane = "shell"

	// The session's id and token, printed on stderr for others to attach.
	hint := regexp.MustCompile(`SANDBOXD_SESSION_TOKEN=(\S+) sandboxd shell(?: --server \S+)? --session (\S+)\n`)
	var m []string
	for deadline := time.Now().Add(3 * time.Minute); m == nil; time.Sleep(50 * time.Millisecond) {
		b, _ := os.ReadFile(filepath.Join(dir, "shell.err"))
		if m = hint.FindStringSubmatch(string(b)); m == nil && time.Now().After(deadline) {
			t.Fatalf("no session hint on stderr:\n%s\nscreen:\n%s", b, x.screen(pane))
		}
	}
	token, id := m[1], m[2]
	x.waitScreen(pane, "the prompt", func(s string) bool { return strings.Contains(s, "$") })

	// The size is the pane's; TERM is set.
	x.text(pane, `stty size; echo "term=$TERM"`)
	x.keys(pane, "Enter")
	x.waitText(pane, x.size(pane)+"\n")
	x.waitText(pane, "term=xterm-256color")

	// vi: a full-screen program, typed into; the file is saved.
	x.text(pane, "cd /workspace && vi notes.txt")
	x.keys(pane, "Enter")
	x.waitScreen(pane, "vi's empty buffer", func(s string) bool { return strings.Contains(s, "\n~\n~\n") })
	x.keys(pane, "i")
	x.text(pane, "hello from vi")
	// Each mode change is waited for on the screen before the next keys: on
	// a loaded machine vi may not have read the last ones yet, and a stale
	// screen still shows the mode before them.
	x.waitScreen(pane, "vi's insert mode with the text", func(s string) bool {
		return strings.Contains(s, "hello from vi") && regexp.MustCompile(`(?m)^I notes\.txt`).MatchString(s)
	})
	x.keys(pane, "Escape")
	// vi takes an Escape followed at once by more keys for an escape
	// sequence, as at a terminal: type on once it shows command mode with
	// the buffer changed (its status line "- notes.txt [Modified]").
	x.waitScreen(pane, "vi's command mode", func(s string) bool { return regexp.MustCompile(`(?m)^- notes\.txt \[Modified\]`).MatchString(s) })
	x.text(pane, ":wq")
	x.keys(pane, "Enter")
	x.keys(pane, "C-l") // a fresh screen: what follows is after vi
	x.text(pane, `echo "vi""-done"`)
	x.keys(pane, "Enter")
	x.waitText(pane, "\nvi-done\n")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, serve.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.Session(id, token)
	if got := downloadFile(ctx, t, s, "/workspace/notes.txt"); got != "hello from vi\n" {
		t.Fatalf("notes.txt holds %q", got)
	}

	// Ctrl-C interrupts the command in the sandbox; the CLI and the remote
	// shell go on. (Without it the sleep would outlast the wait below.)
	x.keys(pane, "C-l")
	x.text(pane, `echo "sleep""ing"; sleep 100 && echo "not""-interrupted"`)
	x.keys(pane, "Enter")
	x.waitText(pane, "sleeping\n")
	x.keys(pane, "C-c")
	x.text(pane, `echo "after""-interrupt"`)
	x.keys(pane, "Enter")
	screen := x.waitText(pane, "after-interrupt")
	if strings.Contains(screen, "not-interrupted") {
		t.Fatalf("the sleep was not interrupted:\n%s", screen)
	}
	if _, err := os.Stat(filepath.Join(dir, "code")); err == nil {
		t.Fatalf("Ctrl-C ended the CLI:\n%s", screen)
	}

	// A resize of the window reaches the sandbox (SIGWINCH, pty.resize).
	x.run("resize-window", "-t", pane, "-x", "132", "-y", "43")
	want := x.size(pane)
	if want == "30 100" {
		t.Fatalf("tmux did not resize the pane: %s", want)
	}
	x.keys(pane, "C-l")
	x.text(pane, "stty size")
	x.keys(pane, "Enter")
	x.waitText(pane, "\n"+want+"\n")

	// A follower in another pane sees the agent's terminal: a command run
	// through the API's terminal tool shows there at once.
	fscript := filepath.Join(dir, "follow.sh")
	if err := os.WriteFile(fscript, []byte(fmt.Sprintf(`SANDBOXD_SESSION_TOKEN=%q exec %q shell --server %q --follow %q
`, token, binary, serve.url, id)), 0o700); err != nil {
		t.Fatal(err)
	}
	x.run("new-session", "-d", "-s", "follow", "-x", "100", "-y", "30", "sh "+fscript)
	x.waitText("follow", "following the agent's terminal")
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := s.Call(ctx, "terminal", map[string]any{"command": "echo follow-$((6*7))"}, nil)
		done <- err
	}()
	x.waitText("follow", "$ echo follow-$((6*7))\nfollow-42\n")
	t.Logf("the follower showed the agent's echo %v after the call was sent", time.Since(start).Round(time.Millisecond))
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	x.keys("follow", "C-c")

	// exit: the CLI ends with the remote shell's code and restores the
	// terminal it had put in raw mode.
	x.text(pane, "exit 3")
	x.keys(pane, "Enter")
	if code := waitFile(t, filepath.Join(dir, "code")); code != "exit=3\n" {
		t.Fatalf("the CLI ended with %q, want exit=3", code)
	}
	before, after := waitFile(t, filepath.Join(dir, "before")), waitFile(t, filepath.Join(dir, "after"))
	if before != after {
		t.Fatalf("the terminal's settings were not restored:\nbefore %s after  %s", before, after)
	}
	serve.stop(t)
	waitNoContainers(t, "the shell's session after exit")
}

// downloadFile reads one file of the session through files.download.
func downloadFile(ctx context.Context, t *testing.T, s *client.Session, path string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := s.Download(ctx, path, &buf); err != nil {
		t.Fatalf("download %s: %v", path, err)
	}
	tr := tar.NewReader(&buf)
	if _, err := tr.Next(); err != nil {
		t.Fatalf("download %s: %v", path, err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
