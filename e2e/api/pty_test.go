package api

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

// readPTY reads p until its output holds want (or it ends).
func readPTY(t *testing.T, p *client.PTY, out *strings.Builder, want string) {
	t.Helper()
	buf := make([]byte, 32<<10)
	for seen := 0; ; {
		s := out.String()
		if strings.Contains(s[max(0, seen-len(want)):], want) { // only what is new: big outputs stay linear
			return
		}
		seen = len(s)
		n, err := p.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			t.Fatalf("pty output without %q (%v):\n%s", want, err, out.String())
		}
	}
}

// PTYs through the API in a real sandbox: the login shell as the session
// user, with its size; 1.5 MB of output arrives whole through the windowed
// flow; a session holds at most proto.DefaultMaxPTYs; closing one ends its
// processes in the sandbox, jobs in their own process groups included.
func TestPTYInASandbox(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := dialGoClient(t, ctx, s)
	sess, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)

	p, err := sess.OpenPTY(ctx, client.PTYOptions{Rows: 33, Cols: 91})
	if err != nil {
		t.Fatal(err)
	}
	if p.PID <= 1 || len(p.Command) != 2 || p.Command[1] != "-l" {
		t.Fatalf("pty %+v: want the login shell", p)
	}
	var out strings.Builder
	start := time.Now()
	if _, err := io.WriteString(p, `stty size; id -u; echo "pwd=$(pwd)"; seq 1 200000 | tail -c 20; seq 1 200000; echo "seq""-done"`+"\n"); err != nil {
		t.Fatal(err)
	}
	readPTY(t, p, &out, "seq-done\r\n")
	got := out.String()
	t.Logf("%d bytes of pty output in %v (a figure, not a bound)", len(got), time.Since(start).Round(time.Millisecond))
	for _, want := range []string{"33 91\r\n", "\r\n1000\r\n", "pwd=/workspace\r\n", "\r\n199999\r\n200000\r\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in the pty's output", want)
		}
	}
	if n := strings.Count(got, "\r\n"); n < 200000 {
		t.Errorf("%d lines of output: some were lost", n)
	}

	// A round trip: a command typed, its output back (a figure).
	for i := range 3 {
		out.Reset()
		start := time.Now()
		if _, err := fmt.Fprintf(p, "echo \"rt\"\"-%d\"\n", i); err != nil {
			t.Fatal(err)
		}
		readPTY(t, p, &out, fmt.Sprintf("rt-%d\r\n", i))
		t.Logf("echo round trip through the pty: %v", time.Since(start).Round(100*time.Microsecond))
	}

	// Raw bytes (NULs included) pass untouched: 3 MB from a raw-mode pty.
	raw, err := sess.OpenPTY(ctx, client.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sh", "-c", "stty raw -echo; head -c 3000000 /dev/zero"}})
	if err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	zeros, err := io.ReadAll(raw)
	if err != nil || len(zeros) != 3000000 || strings.Trim(string(zeros), "\x00") != "" {
		t.Fatalf("raw output: %d bytes, %v", len(zeros), err)
	}
	t.Logf("3 MB of raw pty output in %v, open included (a figure)", time.Since(start).Round(time.Millisecond))

	// A job in its own process group (job control) that ignores SIGHUP.
	out.Reset()
	if _, err := io.WriteString(p, "(trap '' HUP; exec sleep 4242) & echo \"job\"\"-started\"\n"); err != nil {
		t.Fatal(err)
	}
	readPTY(t, p, &out, "job-started\r\n")

	// The bound: proto.DefaultMaxPTYs in a session.
	var more []*client.PTY
	for range proto.DefaultMaxPTYs - 1 {
		q, err := sess.OpenPTY(ctx, client.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sleep", "1000"}})
		if err != nil {
			t.Fatal(err)
		}
		more = append(more, q)
	}
	_, err = sess.OpenPTY(ctx, client.PTYOptions{Rows: 24, Cols: 80})
	var werr *wsproto.Error
	if !errors.As(err, &werr) || werr.Code != wsproto.CodeBusy {
		t.Fatalf("pty %d of %d: %v, want busy", proto.DefaultMaxPTYs+1, proto.DefaultMaxPTYs, err)
	}
	for _, q := range more {
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
	}

	sleeps := func() string {
		t.Helper()
		obs, err := sess.Call(ctx, "terminal", map[string]any{"command": "ps -o pid,args | grep '[s]leep 4242' || echo none-left"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return obs.Text()
	}
	if text := sleeps(); strings.Contains(text, "none-left") {
		t.Fatalf("the job does not show in ps:\n%s", text)
	}
	st, err := p.CloseContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.ExitCode != 129 || st.Signal != "SIGHUP" {
		t.Errorf("the shell ended with %+v, want SIGHUP", st)
	}
	if text := sleeps(); !strings.Contains(text, "none-left") {
		t.Fatalf("the job of a closed pty is left:\n%s", text)
	}
}
