package client_test

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

// readUntil reads the PTY until its output holds want.
func readUntil(t *testing.T, p *client.PTY, got *bytes.Buffer, want string) {
	t.Helper()
	buf := make([]byte, 4096)
	for !strings.Contains(got.String(), want) {
		n, err := p.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("reading for %q: %v; got %q", want, err, got.String())
		}
	}
}

// A PTY through the Go client is an io.ReadWriteCloser: what is written
// (the fake echoes it) is read back, a resize is seen, and after the end
// Read gives io.EOF and Write ErrPTYEnded.
func TestPTYReadWriteResize(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts.URL, ts.Token, client.Options{})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.OpenPTY(ctx(t), client.PTYOptions{Rows: 24, Cols: 80, Command: []string{"vi", "f"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.ID == "" || p.PID != 4242 || strings.Join(p.Command, " ") != "vi f" {
		t.Fatalf("pty %+v", p)
	}
	var _ io.ReadWriteCloser = p
	big := strings.Repeat("y", wsproto.MaxPTYInput+10) // sent in two pieces
	if _, err := io.WriteString(p, "hello "+big); err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(ctx(t), 50, 100); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	readUntil(t, p, &got, "[size 50x100]\r\n")
	if got.String() != "hello "+big+"[size 50x100]\r\n" {
		t.Fatalf("output %.60q...", got.String())
	}
	if _, err := p.Write([]byte("\x04")); err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(io.Discard, p); err != nil || n != 0 {
		t.Fatalf("after the end: %d bytes, %v", n, err)
	}
	<-p.Done()
	if st, ended := p.Status(); !ended || st != (wsproto.PTYStatus{}) {
		t.Fatalf("status %+v %v", st, ended)
	}
	if _, err := p.Write([]byte("x")); !errors.Is(err, client.ErrPTYEnded) {
		t.Fatalf("write after the end: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("close after the end: %v", err)
	}
}

// A follower reads the agent's terminal; a handle made with Client.Session
// and the session's token is enough (no attach); Close ends it with 0.
func TestPTYFollowWithASessionHandle(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts.URL, ts.Token, client.Options{})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	watcher := dial(t, ts.URL, s.Token, client.Options{})
	f, err := watcher.Session(s.ID, s.Token).OpenPTY(ctx(t), client.PTYOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Call(ctx(t), "terminal", map[string]string{"command": "echo seen"}, nil); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	readUntil(t, f, &got, "$ echo seen\r\nseen\r\n")
	st, err := f.CloseContext(ctx(t))
	if err != nil || st != (wsproto.PTYStatus{}) {
		t.Fatalf("close: %+v %v", st, err)
	}
}

// A lost connection ends its PTYs (the server closes them): Read ends and
// the status says why, even when the client reconnects.
func TestPTYEndsWithTheConnection(t *testing.T) {
	ts := servertest.Start(t, nil)
	px := newProxy(t, ts.HTTP.Listener.Addr().String())
	c := dial(t, px.url(), ts.Token, client.Options{Reconnect: true})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.OpenPTY(ctx(t), client.PTYOptions{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	px.cut()
	if _, err := io.Copy(io.Discard, p); err != nil {
		t.Fatal(err)
	}
	st, _ := p.Status()
	if st.ExitCode != -1 || !strings.Contains(st.Error, "lost") {
		t.Fatalf("status %+v", st)
	}
	// The server closes it once it sees the connection end.
	fake := ts.Backend.Sandbox(s.ID)
	for deadline := time.Now().Add(10 * time.Second); len(fake.PTYs()) != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the server did not close the pty of a lost connection")
		}
	}
}

// Output nobody reads is held up to a bound (then the connection waits);
// Close drops it instead of waiting for a Read, and other requests on the
// connection answer again.
func TestPTYCloseWithUnreadOutput(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts.URL, ts.Token, client.Options{})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.OpenPTY(ctx(t), client.PTYOptions{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	fake := ts.Backend.Sandbox(s.ID).PTYs()[0]
	fake.Emit(bytes.Repeat([]byte("z"), 3<<20)) // more than the client holds
	st, err := p.CloseContext(ctx(t))
	if err != nil || st.ExitCode != 129 {
		t.Fatalf("close: %+v %v", st, err)
	}
	if _, err := s.Call(ctx(t), "echo", map[string]string{"text": "still here"}, nil); err != nil {
		t.Fatal(err)
	}
}
