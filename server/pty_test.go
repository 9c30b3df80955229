package server_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

// ptyOutputs is the concatenated data of the pty.output notifications of
// pty read so far, checking their seq runs 1, 2, 3...; and whether a
// pty.exit came (after the last output), with its status.
func (c *rawClient) ptyOutputs(pty string) (data string, exit *wsproto.PTYStatus) {
	c.t.Helper()
	var b bytes.Buffer
	var seq uint64
	for _, n := range c.notes {
		switch n.Method {
		case wsproto.NotifyPTYOutput:
			var o wsproto.PTYOutput
			if err := json.Unmarshal(n.Params, &o); err != nil {
				c.t.Fatal(err)
			}
			if o.PTYID != pty {
				continue
			}
			if exit != nil {
				c.t.Fatalf("pty.output after pty.exit: %q", o.Data)
			}
			if seq++; o.Seq != seq {
				c.t.Fatalf("pty.output seq %d, want %d", o.Seq, seq)
			}
			b.Write(o.Data)
		case wsproto.NotifyPTYExit:
			var e wsproto.PTYExit
			if err := json.Unmarshal(n.Params, &e); err != nil {
				c.t.Fatal(err)
			}
			if e.PTYID == pty {
				exit = &e.PTYStatus
			}
		}
	}
	return b.String(), exit
}

// readUntil reads notifications until cond holds of pty's output and exit.
func (c *rawClient) readUntil(pty, what string, cond func(data string, exit *wsproto.PTYStatus) bool) string {
	c.t.Helper()
	for {
		data, exit := c.ptyOutputs(pty)
		if cond(data, exit) {
			return data
		}
		m, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v; pty output so far %q", what, err, data)
		}
		if m.Method == "" {
			c.t.Fatalf("response to %s while waiting for %s", m.ID, what)
		}
		c.notes = append(c.notes, m)
	}
}

func (c *rawClient) openPTY(id string, params map[string]any) wsproto.PTYOpenResult {
	c.t.Helper()
	var r wsproto.PTYOpenResult
	c.ok(id, wsproto.MethodPTYOpen, params, &r)
	if r.PTYID == "" {
		c.t.Fatalf("pty.open gave no pty_id")
	}
	return r
}

// A PTY over the WebSocket API: opened with a size (the login shell when no
// command is given), input comes back through the fake's echo, a resize is
// seen, pty.exit follows the last output, and the bytes written to the
// client went back to the PTY as acknowledgements.
func TestPTYOpenInputResizeExit(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	r := c.openPTY("o", map[string]any{"session_id": s.SessionID, "rows": 24, "cols": 80})
	if r.PID != 4242 || strings.Join(r.Command, " ") != "/bin/sh -l" {
		t.Fatalf("open result %+v", r)
	}
	c.ok("i1", wsproto.MethodPTYInput, map[string]any{"pty_id": r.PTYID, "data": []byte("héllo\r")}, nil)
	c.ok("r1", wsproto.MethodPTYResize, map[string]any{"pty_id": r.PTYID, "rows": 40, "cols": 120}, nil)
	c.ok("i2", wsproto.MethodPTYInput, map[string]any{"pty_id": r.PTYID, "data": []byte("bye\x04")}, nil)
	data := c.readUntil(r.PTYID, "pty.exit", func(_ string, exit *wsproto.PTYStatus) bool { return exit != nil })
	if data != "héllo\r[size 40x120]\r\nbye" {
		t.Fatalf("output %q", data)
	}
	if _, exit := c.ptyOutputs(r.PTYID); *exit != (wsproto.PTYStatus{}) {
		t.Fatalf("exit %+v", exit)
	}
	p := ts.Backend.Sandbox(s.SessionID)
	if len(p.PTYs()) != 0 {
		t.Fatal("the ended pty is still listed")
	}
	if code := c.code("i3", wsproto.MethodPTYInput, map[string]any{"pty_id": r.PTYID, "data": []byte("x")}); code != wsproto.CodeNotFound {
		t.Fatalf("input to an ended pty: code %d", code)
	}
}

// Inputs and resizes sent without waiting for answers reach the PTY in the
// order they were sent (they are queued in arrival order, not run on a
// goroutine each).
func TestPTYInputsKeepTheirOrder(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	r := c.openPTY("o", map[string]any{"session_id": s.SessionID, "rows": 24, "cols": 80, "command": []string{"cat"}})
	var want strings.Builder
	var ids []string
	for i := range 200 {
		id := fmt.Sprintf("in-%d", i)
		ids = append(ids, id)
		if i%50 == 49 {
			c.send(id, wsproto.MethodPTYResize, map[string]any{"pty_id": r.PTYID, "rows": i, "cols": 80})
			fmt.Fprintf(&want, "[size %dx80]\r\n", i)
			continue
		}
		c.send(id, wsproto.MethodPTYInput, map[string]any{"pty_id": r.PTYID, "data": []byte(fmt.Sprintf("%d,", i))})
		fmt.Fprintf(&want, "%d,", i)
	}
	for id, m := range c.waitAll(ids...) {
		if m.Error != nil {
			t.Fatalf("%s: %v", id, m.Error)
		}
	}
	got := c.readUntil(r.PTYID, "all input", func(data string, _ *wsproto.PTYStatus) bool { return len(data) >= want.Len() })
	if got != want.String() {
		t.Fatalf("order lost:\n got %q\nwant %q", got, want.String())
	}
	fake := ts.Backend.Sandbox(s.SessionID).PTYs()[0]
	var st wsproto.PTYStatus
	c.ok("c", wsproto.MethodPTYClose, map[string]any{"pty_id": r.PTYID}, &st)
	if st.ExitCode != 129 || st.Signal != "SIGHUP" {
		t.Fatalf("close %+v", st)
	}
	// pty.exit came before the answer to pty.close.
	if _, exit := c.ptyOutputs(r.PTYID); exit == nil || *exit != st {
		t.Fatalf("pty.exit %+v before the close's answer, want %+v", exit, st)
	}
	if int(fake.Acked()) != want.Len() {
		t.Fatalf("acknowledged %d bytes, the client got %d", fake.Acked(), want.Len())
	}
}

// Large output reaches the client whole, in pieces of at most 64 KiB, one
// at a time, each acknowledged once written.
func TestPTYLargeOutput(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	r := c.openPTY("o", map[string]any{"session_id": s.SessionID, "rows": 24, "cols": 80})
	fake := ts.Backend.Sandbox(s.SessionID).PTYs()[0]
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	fake.Emit(big)
	got := c.readUntil(r.PTYID, "1 MiB", func(data string, _ *wsproto.PTYStatus) bool { return len(data) >= len(big) })
	if got != string(big) {
		t.Fatal("the output was not passed on whole")
	}
	for _, n := range c.notes {
		if n.Method == wsproto.NotifyPTYOutput && len(n.Params) > 100<<10 {
			t.Fatalf("a pty.output of %d bytes", len(n.Params))
		}
	}
	waitFor(t, func() bool { return fake.Acked() == int64(len(big)) }, "the acknowledgements")
}

// A follower sees the agent's terminal: each command and its output,
// whoever calls and whether or not the call streams; it is read-only.
func TestPTYFollowTheTerminal(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	r := c.openPTY("f", map[string]any{"session_id": s.SessionID, "follow": true})
	if r.PID != 0 || r.Command != nil {
		t.Fatalf("a follower runs nothing: %+v", r)
	}
	agentConn := dial(t, ts)
	args := call(s.SessionID, "terminal", map[string]string{"command": "echo hi"}, false)
	args["session_token"] = s.SessionToken
	agentConn.ok("t", wsproto.MethodToolsCall, args, nil)
	c.readUntil(r.PTYID, "the command", func(data string, _ *wsproto.PTYStatus) bool { return data == "$ echo hi\r\nhi\r\n" })
	if code := c.code("i", wsproto.MethodPTYInput, map[string]any{"pty_id": r.PTYID, "data": []byte("x")}); code != wsproto.CodeInvalidParams {
		t.Fatalf("input to a follower: code %d", code)
	}
	var st wsproto.PTYStatus
	c.ok("c", wsproto.MethodPTYClose, map[string]any{"pty_id": r.PTYID}, &st)
	if st != (wsproto.PTYStatus{}) {
		t.Fatalf("a follower ends with 0: %+v", st)
	}
}

// Bad params are refused with invalid params, before anything opens; an
// unknown pty is not found; a session token opens PTYs in its own session
// only.
func TestPTYBadParamsAndAuth(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	other := c.create()
	for _, p := range []map[string]any{
		{"session_id": s.SessionID},
		{"session_id": s.SessionID, "rows": 0, "cols": 80},
		{"session_id": s.SessionID, "rows": 24, "cols": 1001},
		{"session_id": s.SessionID, "follow": true, "command": []string{"sh"}},
		{"session_id": s.SessionID, "rows": 24, "cols": 80, "command": []string{""}},
		{"session_id": s.SessionID, "rows": 24, "cols": 80, "nope": 1},
	} {
		if code := c.code("bad", wsproto.MethodPTYOpen, p); code != wsproto.CodeInvalidParams {
			t.Errorf("%v: code %d", p, code)
		}
	}
	if code := c.code("nos", wsproto.MethodPTYOpen, map[string]any{"rows": 24, "cols": 80}); code != wsproto.CodeInvalidParams {
		t.Errorf("no session_id: code %d", code)
	}
	r := c.openPTY("o", map[string]any{"session_id": s.SessionID, "rows": 24, "cols": 80})
	for _, m := range []struct {
		method string
		params map[string]any
		code   int
	}{
		{wsproto.MethodPTYInput, map[string]any{"pty_id": "pty-nope", "data": []byte("x")}, wsproto.CodeNotFound},
		{wsproto.MethodPTYInput, map[string]any{"data": []byte("x")}, wsproto.CodeInvalidParams},
		{wsproto.MethodPTYInput, map[string]any{"pty_id": r.PTYID, "data": make([]byte, wsproto.MaxPTYInput+1)}, wsproto.CodeInvalidParams},
		{wsproto.MethodPTYResize, map[string]any{"pty_id": r.PTYID, "rows": 0, "cols": 5}, wsproto.CodeInvalidParams},
		{wsproto.MethodPTYClose, map[string]any{"pty_id": "pty-nope"}, wsproto.CodeNotFound},
	} {
		if code := c.code("m", m.method, m.params); code != m.code {
			t.Errorf("%s %v: code %d, want %d", m.method, m.params, code, m.code)
		}
	}
	// Another connection does not reach this connection's PTY.
	second := dial(t, ts)
	if code := second.code("x", wsproto.MethodPTYInput, map[string]any{"pty_id": r.PTYID, "data": []byte("x")}); code != wsproto.CodeNotFound {
		t.Errorf("another connection's pty: code %d", code)
	}
	// A session's token opens PTYs in its session, not in another.
	scoped := dialRaw(t, ts.URL, s.SessionToken)
	scoped.openPTY("own", map[string]any{"session_id": s.SessionID, "rows": 24, "cols": 80})
	if code := scoped.code("theirs", wsproto.MethodPTYOpen, map[string]any{"session_id": other.SessionID, "rows": 24, "cols": 80}); code != wsproto.CodeNotFound {
		t.Errorf("a session token opened a pty in another session: code %d", code)
	}
}

// A connection's PTYs are closed when it ends; a session's end ends its
// PTYs, and their clients get pty.exit saying why.
func TestPTYsEndWithConnectionAndSession(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	gone := dial(t, ts)
	gone.openPTY("o", map[string]any{"session_id": s.SessionID, "rows": 24, "cols": 80, "session_token": s.SessionToken})
	fake := ts.Backend.Sandbox(s.SessionID)
	if len(fake.PTYs()) != 1 {
		t.Fatal("no pty")
	}
	gone.ws.Close()
	waitFor(t, func() bool { return len(fake.PTYs()) == 0 }, "the pty of a closed connection to close")

	r := c.openPTY("o2", map[string]any{"session_id": s.SessionID, "rows": 24, "cols": 80})
	c.ok("close", wsproto.MethodSessionClose, map[string]any{"session_id": s.SessionID}, nil)
	c.readUntil(r.PTYID, "pty.exit", func(_ string, exit *wsproto.PTYStatus) bool { return exit != nil })
	if _, exit := c.ptyOutputs(r.PTYID); exit.ExitCode != -1 || !strings.Contains(exit.Error, "session closed") {
		t.Fatalf("exit %+v", exit)
	}
}
