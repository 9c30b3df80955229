package api

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

// A harness parks a session with `sandboxd pause` during a long model call
// and takes it back with `sandboxd resume`; the Go client does the same. A
// call meanwhile is refused with kind conflict, naming resume; session.list
// shows it paused; the shell's state is there after.
func TestPauseAndResumeThroughTheCLIAndTheGoClient(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sess, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	if _, err := sess.Call(ctx, "terminal", map[string]any{"command": "export PARKED=yes"}, nil); err != nil {
		t.Fatal(err)
	}

	cli := func(env []string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(binary, append([]string{args[0], "--server", s.ws}, args[1:]...)...)
		cmd.Env = append(os.Environ(), env...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return out.String(), cmd.ProcessState.ExitCode()
	}
	token := []string{"SANDBOXD_SESSION_TOKEN=" + sess.Token}

	out, code := cli(token, "pause", sess.ID)
	if code != 0 || !strings.Contains(out, "session "+sess.ID+" paused") {
		t.Fatalf("sandboxd pause: exit %d: %s", code, out)
	}
	_, err = sess.Call(ctx, "terminal", map[string]any{"command": "echo no"}, nil)
	var rpcErr *client.Error
	if !errors.As(err, &rpcErr) || rpcErr.Code != wsproto.CodeConflict || !strings.Contains(rpcErr.Message, "resume it first") {
		t.Fatalf("a call to a paused session: %v", err)
	}
	infos, err := c.ListSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].State != "paused" {
		t.Fatalf("session.list of a paused session: %+v", infos)
	}
	if err := sess.Pause(ctx); err != nil {
		t.Fatalf("pausing a paused session: %v", err)
	}
	// A harness that restarted attaches to its paused session: the tools
	// come from the list the session last gave.
	c2, err := client.Dial(ctx, s.ws, sess.Token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	again, err := c2.Attach(ctx, sess.ID, sess.Token, 0)
	if err != nil {
		t.Fatalf("attaching to a paused session: %v", err)
	}
	if len(again.Tools) == 0 {
		t.Errorf("the attach to a paused session lists no tools")
	}

	out, code = cli(token, "resume", sess.ID)
	if code != 0 || !strings.Contains(out, "session "+sess.ID+" resumed") {
		t.Fatalf("sandboxd resume: exit %d: %s", code, out)
	}
	obs, err := sess.Call(ctx, "terminal", map[string]any{"command": "echo PARKED=$PARKED"}, nil)
	if err != nil || !strings.Contains(obs.Text(), "PARKED=yes") {
		t.Fatalf("after resume: %v %v", obs, err)
	}
	if err := sess.Pause(ctx); err != nil {
		t.Fatal(err)
	}
	if err := sess.Resume(ctx); err != nil {
		t.Fatal(err)
	}

	// Bad input: clear errors, nothing changed.
	if out, code := cli(nil, "pause"); code != 2 || !strings.Contains(out, "give one SESSION id") {
		t.Errorf("pause without a session: exit %d: %s", code, out)
	}
	if out, code := cli([]string{"SANDBOXD_SESSION_TOKEN="}, "pause", sess.ID); code != 2 || !strings.Contains(out, "SANDBOXD_SESSION_TOKEN") {
		t.Errorf("pause without a token: exit %d: %s", code, out)
	}
	if out, code := cli([]string{"SANDBOXD_SESSION_TOKEN=" + strings.Repeat("0", len(sess.Token))}, "pause", sess.ID); code != 1 {
		t.Errorf("pause with a wrong token: exit %d: %s", code, out)
	}
	infos, err = c.ListSessions(ctx)
	if err != nil || len(infos) != 1 || infos[0].State != "ready" {
		t.Fatalf("after the bad inputs: %+v %v", infos, err)
	}
}
