package api

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/gorilla/websocket"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/wsproto"
)

// wsConn is a bare JSON-RPC client: the protocol as a non-Go client sees it.
type wsConn struct {
	t     *testing.T
	ws    *websocket.Conn
	notes []wsproto.StreamOutput
}

func dialWS(t *testing.T, s *apiServer) *wsConn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(s.ws, http.Header{"Authorization": {"Bearer " + s.token}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return &wsConn{t: t, ws: ws}
}

func (c *wsConn) send(id, method string, params any) {
	c.t.Helper()
	if err := c.ws.WriteJSON(map[string]any{"jsonrpc": "2.0", "id": id, "method": method, "params": params}); err != nil {
		c.t.Fatal(err)
	}
}

// next reads one message; notifications of stream output are collected.
func (c *wsConn) next() (wsproto.Message, error) {
	_ = c.ws.SetReadDeadline(time.Now().Add(time.Minute))
	var m wsproto.Message
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("invalid JSON from the server: %s", b)
	}
	if m.Method == wsproto.NotifyStreamOutput {
		var o wsproto.StreamOutput
		_ = json.Unmarshal(m.Params, &o)
		c.notes = append(c.notes, o)
	}
	return m, nil
}

func (c *wsConn) wait(id string, into any) {
	c.t.Helper()
	for {
		m, err := c.next()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", id, err)
		}
		if m.Method != "" || string(m.ID) != `"`+id+`"` {
			continue
		}
		if m.Error != nil {
			c.t.Fatalf("%s: %v", id, m.Error)
		}
		if into != nil {
			if err := json.Unmarshal(m.Result, into); err != nil {
				c.t.Fatal(err)
			}
		}
		return
	}
}

// A WebSocket client creates a session, streams a command's output, loses
// its connection in the middle, re-attaches from the last chunk it saw,
// retries the call by id (it does not run twice) and closes the session.
func TestWebSocketStreamReconnectResume(t *testing.T) {
	s := startServer(t)
	c := dialWS(t, s)
	var created wsproto.CreateResult
	c.send("create", wsproto.MethodSessionCreate, map[string]any{"env": map[string]string{"GREETING": "hej"}})
	c.wait("create", &created)
	if created.SessionToken == "" || len(created.Tools) < 4 {
		t.Fatalf("create: %+v", created)
	}
	// Counting runs in a file shows whether the retried call ran twice.
	script := `echo run >> /workspace/runs; for i in 1 2 3 4 5 6; do echo "$GREETING line $i"; sleep 0.3; done`
	callParams := map[string]any{"session_id": created.SessionID, "name": "terminal", "stream": true,
		"arguments": map[string]any{"command": script, "timeout": 30}}
	c.send("call-1", wsproto.MethodToolsCall, callParams)
	for len(c.notes) == 0 || !strings.Contains(joinData(c.notes), "line 2") {
		if _, err := c.next(); err != nil {
			t.Fatal(err)
		}
	}
	seen := append([]wsproto.StreamOutput(nil), c.notes...)
	c.ws.Close() // the connection drops mid-call

	c2 := dialWS(t, s)
	var att wsproto.AttachResult
	c2.send("attach", wsproto.MethodSessionAttach, map[string]any{
		"session_id": created.SessionID, "session_token": created.SessionToken, "last_seq": seen[len(seen)-1].Seq})
	c2.wait("attach", &att)
	if att.Missed {
		t.Fatal("output was lost")
	}
	var obs wsproto.CallResult
	c2.send("call-1", wsproto.MethodToolsCall, callParams) // the retry
	c2.wait("call-1", &obs)
	all := append(seen, c2.notes...)
	for i := 1; i < len(all); i++ {
		if all[i].Seq != all[i-1].Seq+1 {
			t.Fatalf("seq %d after %d", all[i].Seq, all[i-1].Seq)
		}
	}
	out := joinData(all)
	for i := 1; i <= 6; i++ {
		if n := strings.Count(out, "hej line "+string(rune('0'+i))); n != 1 {
			t.Fatalf("line %d appears %d times in the stream:\n%s", i, n, out)
		}
	}
	if m, _ := obs.Structured.(map[string]any); m["exit_code"] != float64(0) {
		t.Fatalf("call result: %+v", obs)
	}
	var runs wsproto.CallResult
	c2.send("runs", wsproto.MethodToolsCall, map[string]any{"session_id": created.SessionID, "name": "terminal",
		"arguments": map[string]any{"command": "wc -l < /workspace/runs"}})
	c2.wait("runs", &runs)
	if !strings.Contains(runs.Text(), "1") || strings.Contains(runs.Text(), "2") {
		t.Fatalf("the call ran more than once: %q", runs.Text())
	}

	c2.send("close", wsproto.MethodSessionClose, map[string]any{"session_id": created.SessionID})
	c2.wait("close", nil)
	if n := containers(t); n != 0 {
		t.Fatalf("%d containers after close", n)
	}
}

func joinData(outs []wsproto.StreamOutput) string {
	var b strings.Builder
	for _, o := range outs {
		b.WriteString(o.Data)
	}
	return b.String()
}

// The Go client moves files in and out of a sandbox.
func TestGoClientFiles(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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

	var archive bytes.Buffer
	tw := tar.NewWriter(&archive)
	body := bytes.Repeat([]byte("sandboxd\n"), 100000) // 900 KB
	if err := tw.WriteHeader(&tar.Header{Name: "data/big.txt", Mode: 0o644, Size: int64(len(body))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sess.Upload(ctx, "/workspace/in", &archive); err != nil {
		t.Fatal(err)
	}
	obs, err := sess.Call(ctx, "terminal", map[string]any{"command": "wc -l < /workspace/in/data/big.txt"}, nil)
	if err != nil || !strings.Contains(obs.Text(), "100000") {
		t.Fatalf("uploaded file: %v %q", err, obs.Text())
	}
	var out bytes.Buffer
	if err := sess.Download(ctx, "/workspace/in/data/big.txt", &out); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&out)
	var got []byte
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			got, _ = io.ReadAll(tr)
		}
	}
	if !bytes.Equal(got, body) {
		t.Fatalf("downloaded %d bytes, want %d", len(got), len(body))
	}
}

// A call cancelled through its context is stopped in the sandbox before
// Call returns, so the next command runs instead of finding the terminal
// still busy with the cancelled one.
func TestGoClientCancelThenNextCommand(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	for i := range 5 {
		callCtx, stop := context.WithCancel(ctx)
		timer := time.AfterFunc(500*time.Millisecond, stop)
		_, err := sess.Call(callCtx, "terminal", map[string]any{"command": "sleep 30", "timeout": 60}, nil)
		timer.Stop()
		stop()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("round %d: the cancelled call returned %v", i, err)
		}
		obs, err := sess.Call(ctx, "terminal", map[string]any{"command": "echo next-" + strconv.Itoa(i)}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if obs.IsError || !strings.Contains(obs.Text(), "next-"+strconv.Itoa(i)) {
			t.Fatalf("round %d: the command after a cancel: %q", i, obs.Text())
		}
	}
}

// tools.cancel answers once the agent has stopped the command: a command
// that takes 0.2 s to stop after SIGINT has written its last words by the
// time the cancelled Call returns (it returned before the agent did).
func TestGoClientCancelWaitsForTheCommandToStop(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	callCtx, stop := context.WithCancel(ctx)
	defer stop()
	var once sync.Once
	_, err = sess.Call(callCtx, "terminal", map[string]any{"timeout": 60, "command": `sh -c 'trap "sleep 0.2; echo stopped > /workspace/last; kill \$p; exit 130" INT; sleep 30 & p=$!; echo ready; wait'`},
		func(b []byte) {
			if strings.Contains(string(b), "ready") {
				once.Do(stop)
			}
		})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v", err)
	}
	obs, err := sess.Call(ctx, "file_editor", map[string]any{"command": "view", "path": "/workspace/last"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if obs.IsError || !strings.Contains(obs.Text(), "stopped") {
		t.Fatalf("the command had not stopped when the cancel returned: %q", obs.Text())
	}
}

// A create the Go client gives up (its context ends) does not leave a
// sandbox running until the idle timeout: the client closes it once the
// server answers.
func TestGoClientCancelledCreateIsClosed(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	gone, giveUp := context.WithCancel(ctx)
	giveUp() // the request is sent, then given up at once
	if _, err := c.CreateSession(gone, client.CreateOptions{}); !errors.Is(err, context.Canceled) {
		t.Fatalf("the given-up create returned %v", err)
	}
	waitUntil(t, 2*time.Minute, "the sandbox to start", func() bool { return len(s.manager.List()) == 1 })
	waitUntil(t, 2*time.Minute, "the abandoned sandbox to be closed", func() bool { return len(s.manager.List()) == 0 })
}

// A client that disconnects before its create (with an idempotency key) is
// answered leaves a sandbox that is closed after the server's grace for a
// retry, not at its idle timeout.
func TestDisconnectedCreateIsClosed(t *testing.T) {
	s := startServerWith(t, func(o *server.Options) { o.AbandonedCreateGrace = 100 * time.Millisecond })
	ws, _, err := websocket.DefaultDialer.Dial(s.ws, http.Header{"Authorization": {"Bearer " + s.token}})
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.WriteJSON(map[string]any{"jsonrpc": "2.0", "id": "c1", "method": "session.create",
		"params": map[string]any{"idempotency_key": "5e0c7a2f4b9d13e86a7f0c2d4b6e8a19"}}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, 2*time.Minute, "the sandbox to start", func() bool { return len(s.manager.List()) == 1 })
	_ = ws.Close()
	waitUntil(t, 2*time.Minute, "the abandoned sandbox to be closed", func() bool { return len(s.manager.List()) == 0 })
}

// Error texts a client reads carry the agent's words, not the host's
// protocol internals ("agent tools/call: ").
func TestErrorTextsWithoutAgentMethod(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
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
	_, err = sess.Call(ctx, "no_such_tool", map[string]any{}, nil)
	var rpcErr *client.Error
	if !errors.As(err, &rpcErr) {
		t.Fatalf("calling an unknown tool: %v", err)
	}
	if strings.Contains(rpcErr.Message, "agent tools/call") || !strings.Contains(rpcErr.Message, "no_such_tool") {
		t.Fatalf("error text %q", rpcErr.Message)
	}
}

// A session that idles out tells its client so, distinctly from a close.
func TestGoClientIdleTimeoutReason(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialGoClient(t, ctx, s)
	sess, err := c.CreateSession(ctx, client.CreateOptions{IdleTimeout: wsproto.Duration(time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	select {
	case <-sess.Done():
	case <-ctx.Done():
		t.Fatal("the session did not idle out")
	}
	if got := sess.Reason(); !strings.Contains(got, "idle timeout: no call for 1s") {
		t.Fatalf("reason %q, want the idle timeout", got)
	}
	waitNoContainers(t, "the idled-out session's")
}

// A session whose container is killed from outside tells its client why
// and leaves nothing behind, with no session.close and no idle timeout.
func TestKilledSandboxIsRemoved(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := dialGoClient(t, ctx, s)
	sess, err := c.CreateSession(ctx, client.CreateOptions{IdleTimeout: wsproto.Duration(-1)})
	if err != nil {
		t.Fatal(err)
	}
	if err := engine.ContainerKill(ctx, "sandboxd-"+sess.ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sess.Done():
	case <-ctx.Done():
		t.Fatal("the session did not end")
	}
	if got := sess.Reason(); !strings.Contains(got, "137") {
		t.Fatalf("reason %q, want the container's exit", got)
	}
	waitNoContainers(t, "the killed session's")
	if err := sess.Close(ctx); err != nil {
		t.Fatalf("close after the failure: %v", err)
	}
}

// Containers removed from outside all at once (`docker rm -f` of every
// sandbox) leave nothing: the server's own removal of the failed sessions
// waits for the engine's removal in progress instead of failing to remove
// volumes still in use.
func TestContainersRemovedFromOutsideLeaveNoVolumes(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dialGoClient(t, ctx, s)
	var sessions []*client.Session
	for range 5 {
		sess, err := c.CreateSession(ctx, client.CreateOptions{IdleTimeout: wsproto.Duration(-1)})
		if err != nil {
			t.Fatal(err)
		}
		sessions = append(sessions, sess)
	}
	var wg sync.WaitGroup
	for _, sess := range sessions {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := engine.ContainerRemove(ctx, "sandboxd-"+sess.ID, container.RemoveOptions{Force: true}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, sess := range sessions {
		select {
		case <-sess.Done():
		case <-ctx.Done():
			t.Fatal("a session removed from outside did not end")
		}
	}
	vf := filters.NewArgs(filters.Arg("label", labelRun+"="+runID), filters.Arg("label", sandbox.LabelManaged+"=true"))
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		vols, err := engine.VolumeList(ctx, volume.ListOptions{Filters: vf})
		if err != nil {
			t.Fatal(err)
		}
		if len(vols.Volumes) == 0 && containers(t) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d volumes and %d containers left", len(vols.Volumes), containers(t))
		}
	}
}

// dialGoClient connects the Go client to s; it is closed with the test.
func dialGoClient(t *testing.T, ctx context.Context, s *apiServer) *client.Client {
	t.Helper()
	c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// An upload whose archive lies (a header announcing 100 GiB, then nothing)
// or ends inside a file is an invalid-params error and leaves nothing
// behind, and the file it would have replaced keeps its content (F8, F9 of
// the attack run of 2026-11-25).
func TestGoClientUploadTruncatedArchive(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := dialGoClient(t, ctx, s)
	sess, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close(ctx)
	if _, err := sess.Call(ctx, "terminal", map[string]any{"command": "mkdir -p /workspace/tr && echo old > /workspace/tr/f.bin"}, nil); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		size, sent int
		format     tar.Format
	}{
		{"100 GiB announced in a PAX header, nothing sent", 100 << 30, 0, tar.FormatPAX},
		{"cut inside the data", 100_000, 50_000, tar.FormatUSTAR},
	} {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		if err := tw.WriteHeader(&tar.Header{Name: "f.bin", Mode: 0o644, Size: int64(tc.size), Format: tc.format}); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write(bytes.Repeat([]byte("x"), tc.sent)) // short on purpose: the archive lies
		err := sess.Upload(ctx, "/workspace/tr", &b)
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Code != wsproto.CodeInvalidParams || !strings.Contains(ce.Message, "archive ends inside this file") {
			t.Fatalf("%s: %v, want an invalid-params error", tc.name, err)
		}
		obs, err := sess.Call(ctx, "terminal", map[string]any{"command": "ls -A /workspace/tr; cat /workspace/tr/f.bin"}, nil)
		if err != nil || strings.TrimSpace(strings.Split(obs.Text(), "[")[0]) != "f.bin\nold" {
			t.Fatalf("%s: left behind: %v %q", tc.name, err, obs.Text())
		}
	}
}
