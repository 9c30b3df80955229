package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

func call(sessionID, tool string, args any, stream bool) map[string]any {
	return map[string]any{"session_id": sessionID, "name": tool, "arguments": args, "stream": stream}
}

func TestCallStreamsAndReturnsObservation(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	var r wsproto.CallResult
	c.ok("e1", wsproto.MethodToolsCall, call(s.SessionID, "echo", map[string]string{"text": "héllo"}, true), &r)
	if r.Text() != "héllo" || r.IsError {
		t.Fatalf("result %+v", r)
	}
	outs := c.outputs()
	if len(outs) != 1 || outs[0].Data != "héllo" || outs[0].Seq != 1 || string(outs[0].CallID) != `"e1"` {
		t.Fatalf("stream %+v", outs)
	}
	// Without stream: no notifications.
	c.notes = nil
	c.ok("e2", wsproto.MethodToolsCall, call(s.SessionID, "echo", map[string]string{"text": "quiet"}, false), &r)
	if len(c.outputs()) != 0 {
		t.Fatalf("unrequested stream: %+v", c.outputs())
	}
	// A failing tool is a result with is_error, not a JSON-RPC error.
	c.ok("e3", wsproto.MethodToolsCall, call(s.SessionID, "fail", nil, false), &r)
	if !r.IsError {
		t.Fatalf("fail tool: %+v", r)
	}
	c.ok("e4", wsproto.MethodToolsCall, call(s.SessionID, "image", nil, false), &r)
	if len(r.Content) != 2 || r.Content[1].Type != "image" || len(r.Content[1].Data) == 0 {
		t.Fatalf("image: %+v", r)
	}
}

func TestIdempotentRetry(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	fake := ts.Backend.Sandbox(s.SessionID)

	var r1, r2 wsproto.CallResult
	c.ok("req-1", wsproto.MethodToolsCall, call(s.SessionID, "count", nil, false), &r1)
	c.ok("req-1", wsproto.MethodToolsCall, call(s.SessionID, "count", nil, false), &r2)
	if fake.Counts() != 1 || r1.Text() != "1" || r2.Text() != "1" {
		t.Fatalf("ran %d times; results %q %q", fake.Counts(), r1.Text(), r2.Text())
	}
	// Numeric ids key the same way.
	c.ok(7, wsproto.MethodToolsCall, call(s.SessionID, "count", nil, false), &r1)
	c.ok(7, wsproto.MethodToolsCall, call(s.SessionID, "count", nil, false), &r2)
	if fake.Counts() != 2 || r2.Text() != "2" {
		t.Fatalf("numeric id: ran %d times, %q", fake.Counts(), r2.Text())
	}
	// The same id with other params is a conflict, not a wrong answer.
	if code := c.code("req-1", wsproto.MethodToolsCall, call(s.SessionID, "echo", map[string]string{"text": "x"}, false)); code != wsproto.CodeConflict {
		t.Fatalf("reused id: code %d", code)
	}
	// A retry is the same request however its params are spelled: other
	// whitespace, field order, or a session_token added.
	raw := func(id, params string) wsproto.Message {
		if err := c.ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":"`+id+`","method":"tools.call","params":`+params+`}`)); err != nil {
			t.Fatal(err)
		}
		return c.wait(id)
	}
	first := raw("spelled", `{"session_id":"`+s.SessionID+`","name":"count","arguments":{"a":1}}`)
	again := raw("spelled", ` { "arguments" : { "a" : 1 } , "name":"count",  "session_token":"`+s.SessionToken+`", "session_id":"`+s.SessionID+`" }`)
	if first.Error != nil || again.Error != nil || string(first.Result) != string(again.Result) || fake.Counts() != 3 {
		t.Fatalf("respelled retry: %+v / %+v, ran %d times", first.Error, again.Error, fake.Counts())
	}

	// A retry from another connection while the first run is in flight
	// joins it: the client lost its connection mid-call.
	c.send("slow", wsproto.MethodToolsCall, call(s.SessionID, "count", map[string]int{"ms": 300}, false))
	waitFor(t, func() bool { return fake.Counts() == 4 }, "the slow call to run") // count counts before it waits
	c.ws.Close()
	c2 := dial(t, ts)
	c2.ok("att", wsproto.MethodSessionAttach, map[string]any{"session_id": s.SessionID, "session_token": s.SessionToken}, nil)
	c2.ok("slow", wsproto.MethodToolsCall, call(s.SessionID, "count", map[string]int{"ms": 300}, false), &r1)
	if fake.Counts() != 4 || r1.Text() != "4" {
		t.Fatalf("in-flight retry: ran %d times, %q", fake.Counts(), r1.Text())
	}

	// Concurrent duplicates on one connection run once too.
	c3 := dial(t, ts)
	c3.ok("att", wsproto.MethodSessionAttach, map[string]any{"session_id": s.SessionID, "session_token": s.SessionToken}, nil)
	for range 5 {
		c3.send("dup", wsproto.MethodToolsCall, call(s.SessionID, "count", map[string]int{"ms": 50}, false))
	}
	for range 5 {
		m := c3.wait("dup")
		if m.Error != nil || !bytes.Contains(m.Result, []byte(`"5"`)) {
			t.Fatalf("duplicate: %s %v", m.Result, m.Error)
		}
	}
	if fake.Counts() != 5 {
		t.Fatalf("concurrent duplicates ran %d times", fake.Counts()-4)
	}
}

// A client that disconnects before its create is answered does not leave a
// session holding a slot until the idle timeout: without an idempotency key
// the create is cancelled; with one, the session waits
// AbandonedCreateGrace for a retry to take it, then is closed.
func TestAbandonedCreate(t *testing.T) {
	const key = "2b1f7c40a9e35d6f8e0c4a17b92d3e58"
	start := func(t *testing.T, grace time.Duration) (*servertest.Server, func()) {
		ts := servertest.Start(t, func(o *server.Options) { o.AbandonedCreateGrace = grace })
		return ts, ts.Backend.HoldCreates()
	}
	t.Run("without a key: cancelled", func(t *testing.T) {
		ts, release := start(t, time.Hour)
		defer release()
		c := dial(t, ts)
		c.send("c1", wsproto.MethodSessionCreate, map[string]any{})
		waitFor(t, func() bool { return ts.Backend.Held() == 1 }, "the create to reach the backend")
		c.ws.Close()
		waitFor(t, func() bool { return ts.Backend.Held() == 0 }, "the create to end")
		if ts.Backend.Created() != 0 {
			t.Fatalf("%d sessions made for a client that left", ts.Backend.Created())
		}
	})
	t.Run("with a key: closed after the grace", func(t *testing.T) {
		ts, release := start(t, 50*time.Millisecond)
		c := dial(t, ts)
		c.send("c1", wsproto.MethodSessionCreate, map[string]any{"idempotency_key": key})
		waitFor(t, func() bool { return ts.Backend.Held() == 1 }, "the create to reach the backend")
		c.ws.Close()
		// "Left before the answer": the server must have seen the client go
		// before the create finishes (else the answer races the close).
		waitFor(t, func() bool { return metricValue(t, ts, "sandboxd_ws_connections") == 0 }, "the server to see the client leave")
		release()
		waitFor(t, func() bool { return ts.Backend.Created() == 1 && ts.Backend.Live() == 0 }, "the abandoned session to be closed")
	})
	t.Run("with a key: taken by a retry", func(t *testing.T) {
		ts, release := start(t, time.Hour)
		c := dial(t, ts)
		c.send("c1", wsproto.MethodSessionCreate, map[string]any{"idempotency_key": key})
		waitFor(t, func() bool { return ts.Backend.Held() == 1 }, "the create to reach the backend")
		c.ws.Close()
		waitFor(t, func() bool { return metricValue(t, ts, "sandboxd_ws_connections") == 0 }, "the server to see the client leave")
		release()
		waitFor(t, func() bool { return ts.Backend.Created() == 1 }, "the create to end")
		var r wsproto.CreateResult
		dial(t, ts).ok("c1", wsproto.MethodSessionCreate, map[string]any{"idempotency_key": key}, &r)
		if r.SessionID == "" || ts.Backend.Created() != 1 || ts.Backend.Live() != 1 {
			t.Fatalf("the retry: %+v, %d created, %d live", r, ts.Backend.Created(), ts.Backend.Live())
		}
	})
}

func TestCreateIdempotencyKey(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	var a, b, d wsproto.CreateResult
	const k1 = "k1-b2c5e0a9d4f8c3e1"
	c.ok(1, wsproto.MethodSessionCreate, map[string]any{"idempotency_key": k1}, &a)
	c.ok(2, wsproto.MethodSessionCreate, map[string]any{"idempotency_key": k1}, &b)
	c.ok(3, wsproto.MethodSessionCreate, map[string]any{}, &d)
	if a.SessionID != b.SessionID || a.SessionToken != b.SessionToken || d.SessionID == a.SessionID {
		t.Fatalf("ids %s %s %s", a.SessionID, b.SessionID, d.SessionID)
	}
	if ts.Backend.Created() != 2 {
		t.Fatalf("%d sandboxes created, want 2", ts.Backend.Created())
	}
	if code := c.code(4, wsproto.MethodSessionCreate, map[string]any{"idempotency_key": k1, "image": "other:1"}); code != wsproto.CodeConflict {
		t.Fatalf("same key, other options: code %d", code)
	}
}

// A client that loses its connection mid-stream re-attaches with the last
// seq it saw and gets exactly the rest, then the call's result by retrying.
func TestResumeAfterReconnect(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	const chunks = 50
	c.send("big", wsproto.MethodToolsCall, call(s.SessionID, "stream", map[string]int{"chunks": chunks, "size": 100, "pause_us": 2000}, true))
	// Read some output, then drop the connection.
	var seen []wsproto.StreamOutput
	for len(seen) < 10 {
		m, err := c.read()
		if err != nil {
			t.Fatal(err)
		}
		if m.Method == wsproto.NotifyStreamOutput {
			var o wsproto.StreamOutput
			if err := json.Unmarshal(m.Params, &o); err != nil {
				t.Fatal(err)
			}
			seen = append(seen, o)
		}
	}
	c.ws.Close()
	last := seen[len(seen)-1].Seq

	c2 := dial(t, ts)
	var att wsproto.AttachResult
	c2.ok("a", wsproto.MethodSessionAttach, map[string]any{"session_id": s.SessionID, "session_token": s.SessionToken, "last_seq": last}, &att)
	if att.Missed {
		t.Fatal("missed output with a big enough ring")
	}
	var r wsproto.CallResult
	c2.ok("big", wsproto.MethodToolsCall, call(s.SessionID, "stream", map[string]int{"chunks": chunks, "size": 100, "pause_us": 2000}, true), &r)
	if r.Text() != "done" {
		t.Fatalf("result %q", r.Text())
	}
	all := append(seen, c2.outputs()...)
	var data strings.Builder
	for i, o := range all {
		if o.Seq != uint64(i+1) {
			t.Fatalf("chunk %d has seq %d: gap or duplicate", i, o.Seq)
		}
		data.WriteString(o.Data)
	}
	if data.Len() != chunks*100 {
		t.Fatalf("got %d bytes of output, want %d", data.Len(), chunks*100)
	}
}

func TestResumeReportsMissedOutput(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.RingBytes = 1000 })
	c := dial(t, ts)
	s := c.create()
	c.ok(1, wsproto.MethodToolsCall, call(s.SessionID, "stream", map[string]int{"chunks": 30, "size": 100}, true), nil)
	c2 := dial(t, ts)
	var att wsproto.AttachResult
	c2.ok("a", wsproto.MethodSessionAttach, map[string]any{"session_id": s.SessionID, "session_token": s.SessionToken, "last_seq": 0}, &att)
	if !att.Missed || att.Replayed != 10 || att.NextSeq != 31 {
		t.Fatalf("attach %+v: want missed, 10 replayed (1000-byte ring), next 31", att)
	}
	for range 10 {
		if m, err := c2.read(); err != nil || m.Method != wsproto.NotifyStreamOutput {
			t.Fatalf("replay: %v %v", m.Method, err)
		}
	}
}

// A client that stops reading keeps its connection while the session
// prints 32 MiB (it was disconnected with 1008 when its queue filled: the
// behaviour changed on purpose, issue 15); a client of the same session
// that reads gets every seq (as chunks, or in gaps when the fake prints
// faster than it reads), and the server's memory stays bounded by the
// output budget. When the slow client reads again, every seq reaches it as
// a chunk or inside a stream.gap, and stream.read gives back what the ring
// still holds of a gap and names exactly what it does not.
func TestSlowClientGetsGapNotDisconnect(t *testing.T) {
	t.Parallel()
	const ring = 128 << 10
	ts := servertest.Start(t, func(o *server.Options) {
		o.WSQueueMessages = 256
		o.WSQueueBytes = 1 << 20
		o.WSWriteTimeout = 2 * time.Second
		o.RingBytes = ring
	})
	fast := dial(t, ts)
	s := fast.create()
	// The slow client's socket buffers take a few MiB before the server's
	// queue fills (an 8 KiB receive buffer would show it sooner, but what
	// it reads later would crawl through it at ~70 KB/s).
	slow := dial(t, ts)
	slow.ok("a", wsproto.MethodSessionAttach, map[string]any{"session_id": s.SessionID, "session_token": s.SessionToken}, nil)
	// The slow client now reads nothing until the flood is over.

	const chunks, size = 2000, 16 << 10 // 32 MiB: more than the socket buffers and the queue hold
	fast.send("flood", wsproto.MethodToolsCall, call(s.SessionID, "stream", map[string]int{"chunks": chunks, "size": size, "pause_us": 100}, true))
	// The fast client reads every seq: as a chunk, or (the fake prints
	// faster than any client reads) inside a gap. It decodes only gaps
	// (cheap even under -race).
	got, covered := 0, 0
	for {
		_ = fast.ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, msg, err := fast.ws.ReadMessage()
		if err != nil {
			t.Fatalf("fast client after %d chunks: %v", got, err)
		}
		head := msg[:min(len(msg), 64)]
		if bytes.Contains(head, []byte(wsproto.NotifyStreamOutput)) {
			got++
			covered++
			continue
		}
		if bytes.Contains(head, []byte(wsproto.NotifyStreamGap)) {
			var m struct{ Params wsproto.StreamGap }
			if err := json.Unmarshal(msg, &m); err != nil {
				t.Fatal(err)
			}
			covered += int(m.Params.ToSeq - m.Params.FromSeq + 1)
			continue
		}
		if !bytes.Contains(msg, []byte(`"done"`)) {
			t.Fatalf("unexpected message %.200s", msg)
		}
		break
	}
	if covered != chunks || got == 0 {
		t.Fatalf("reading client got %d chunks and gaps covering %d seqs, want %d in all", got, covered, chunks)
	}
	if n := metricValue(t, ts, "sandboxd_ws_slow_client_disconnects_total"); n != 0 {
		t.Fatalf("%v slow clients disconnected", n)
	}
	if n := metricValue(t, ts, "sandboxd_ws_connections"); n != 2 {
		t.Fatalf("%v connections, want both", n)
	}
	// The slow client reads: chunks in order, each missing range announced.
	next := uint64(1)
	var gaps []wsproto.StreamGap
	for next <= chunks {
		m, err := slow.read()
		if err != nil {
			t.Fatalf("slow client after seq %d: %v", next-1, err)
		}
		switch m.Method {
		case wsproto.NotifyStreamOutput:
			var o wsproto.StreamOutput
			_ = json.Unmarshal(m.Params, &o)
			if o.Seq != next {
				t.Fatalf("chunk %d, want %d: a seq neither sent nor announced", o.Seq, next)
			}
			next++
		case wsproto.NotifyStreamGap:
			var g wsproto.StreamGap
			_ = json.Unmarshal(m.Params, &g)
			if g.FromSeq != next || g.ToSeq < g.FromSeq || g.Bytes != int64(g.ToSeq-g.FromSeq+1)*size || len(g.CallIDs) != 1 || string(g.CallIDs[0]) != `"flood"` {
				t.Fatalf("gap %+v after seq %d", g, next-1)
			}
			gaps = append(gaps, g)
			next = g.ToSeq + 1
		default:
			t.Fatalf("unexpected %s", m.Method)
		}
	}
	if len(gaps) == 0 {
		t.Fatal("no gap: the slow client got all 16 MiB through 8 KiB of socket buffer?")
	}
	// Reading the gaps back: the ring holds the newest 8 chunks.
	ringFirst := uint64(chunks - ring/size + 1)
	for i, g := range gaps {
		from := g.FromSeq
		for from <= g.ToSeq {
			var r wsproto.StreamReadResult
			slow.ok(fmt.Sprintf("r%d-%d", i, from), wsproto.MethodStreamRead, map[string]any{"session_id": s.SessionID, "from_seq": from, "to_seq": g.ToSeq}, &r)
			if r.NextSeq != chunks+1 {
				t.Fatalf("next_seq %d", r.NextSeq)
			}
			if from < ringFirst {
				if want := min(g.ToSeq, ringFirst-1); r.LostToSeq != want {
					t.Fatalf("read %d-%d: lost_to_seq %d, want %d", from, g.ToSeq, r.LostToSeq, want)
				}
				from = r.LostToSeq + 1
			} else if r.LostToSeq != 0 {
				t.Fatalf("read %d-%d: lost_to_seq %d, but the ring holds %d on", from, g.ToSeq, r.LostToSeq, ringFirst)
			}
			for _, ch := range r.Chunks {
				if ch.Seq != from || len(ch.Data) != size || string(ch.CallID) != `"flood"` {
					t.Fatalf("read back chunk %d (%d bytes), want %d", ch.Seq, len(ch.Data), from)
				}
				from++
			}
			if len(r.Chunks) == 0 && from <= g.ToSeq {
				t.Fatalf("read %d-%d gave nothing", from, g.ToSeq)
			}
		}
	}
	// Still serving, both.
	var r wsproto.CallResult
	fast.ok("after", wsproto.MethodToolsCall, call(s.SessionID, "echo", map[string]string{"text": "ok"}, false), &r)
	slow.ok("after", wsproto.MethodToolsCall, call(s.SessionID, "echo", map[string]string{"text": "ok"}, false), &r)
}

// stream.read checks its range and its session like any session method.
func TestStreamReadValidates(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	c.ok(1, wsproto.MethodToolsCall, call(s.SessionID, "stream", map[string]int{"chunks": 3, "size": 10}, true), nil)
	for _, p := range []map[string]any{
		{"session_id": s.SessionID, "from_seq": 0, "to_seq": 3},
		{"session_id": s.SessionID, "from_seq": 3, "to_seq": 2},
		{"session_id": s.SessionID, "from_seq": 1, "to_seq": 2, "max_bytes": -1},
		{"session_id": s.SessionID, "from_seq": 1, "to_seq": 2, "extra": true},
	} {
		if code := c.code(fmt.Sprint(p), wsproto.MethodStreamRead, p); code != wsproto.CodeInvalidParams {
			t.Errorf("stream.read %v: code %d, want invalid params", p, code)
		}
	}
	other := dial(t, ts)
	if code := other.code("x", wsproto.MethodStreamRead, map[string]any{"session_id": s.SessionID, "session_token": "wrong", "from_seq": 1, "to_seq": 3}); code == 0 {
		t.Error("stream.read with a wrong token answered")
	}
	// One byte at most still gives one chunk; seqs not printed yet are clamped.
	var r wsproto.StreamReadResult
	c.ok("r", wsproto.MethodStreamRead, map[string]any{"session_id": s.SessionID, "from_seq": 2, "to_seq": 99, "max_bytes": 1}, &r)
	if len(r.Chunks) != 1 || r.Chunks[0].Seq != 2 || r.NextSeq != 4 || r.LostToSeq != 0 {
		t.Fatalf("read 2-99 of 3 chunks, 1 byte: %+v", r)
	}
	c.ok("r2", wsproto.MethodStreamRead, map[string]any{"session_id": s.SessionID, "from_seq": 1, "to_seq": 99}, &r)
	if len(r.Chunks) != 3 || r.Chunks[2].Seq != 3 || r.Chunks[0].Data != strings.Repeat("x", 10) {
		t.Fatalf("read 1-99 of 3 chunks: %+v", r)
	}
}

func TestUploadDownloadChunked(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 10000) // 160 KB "tar"
	// One-message upload.
	var up wsproto.UploadResult
	c.ok("u1", wsproto.MethodFilesUpload, map[string]any{"session_id": s.SessionID, "path": "/workspace/a", "tar_base64": payload}, &up)
	if !up.Done || up.Bytes != int64(len(payload)) {
		t.Fatalf("upload %+v", up)
	}
	// Chunked upload, with a retried chunk (same request id) in the middle.
	f := false
	tr := true
	c.ok("c1", wsproto.MethodFilesUpload, map[string]any{"session_id": s.SessionID, "path": "/workspace/b", "tar_base64": payload[:50000], "final": &f}, &up)
	id := up.UploadID
	if id == "" || up.Done {
		t.Fatalf("first chunk %+v", up)
	}
	p2 := map[string]any{"session_id": s.SessionID, "upload_id": id, "offset": 50000, "tar_base64": payload[50000:100000], "final": &f}
	c.ok("c2", wsproto.MethodFilesUpload, p2, &up)
	c.ok("c2", wsproto.MethodFilesUpload, p2, &up) // retry: no second write
	if up.Bytes != 100000 {
		t.Fatalf("after retry %+v", up)
	}
	if code := c.code("c2b", wsproto.MethodFilesUpload, map[string]any{"session_id": s.SessionID, "upload_id": id, "offset": 1, "tar_base64": []byte("x"), "final": &f}); code != wsproto.CodeConflict {
		t.Fatalf("wrong offset: code %d", code)
	}
	c.ok("c3", wsproto.MethodFilesUpload, map[string]any{"session_id": s.SessionID, "upload_id": id, "offset": 100000, "tar_base64": payload[100000:], "final": &tr}, &up)
	if !up.Done || up.Bytes != int64(len(payload)) {
		t.Fatalf("last chunk %+v", up)
	}
	// Chunked download with a retried chunk.
	var got []byte
	var d wsproto.DownloadResult
	c.ok("d1", wsproto.MethodFilesDownload, map[string]any{"session_id": s.SessionID, "path": "/workspace/b", "chunk_size": 64 << 10}, &d)
	got = append(got, d.Data...)
	for i := 0; !d.EOF; i++ {
		next := map[string]any{"session_id": s.SessionID, "download_id": d.DownloadID, "offset": int64(len(got)), "chunk_size": 64 << 10}
		c.ok(fmt.Sprint("d", i+2), wsproto.MethodFilesDownload, next, &d)
		if i == 0 { // retry the same offset: the same bytes again
			var again wsproto.DownloadResult
			c.ok(fmt.Sprint("d", i+2, "r"), wsproto.MethodFilesDownload, next, &again)
			if !bytes.Equal(again.Data, d.Data) || again.Offset != d.Offset {
				t.Fatal("retried chunk differs")
			}
		}
		got = append(got, d.Data...)
	}
	if !bytes.Equal(got, payload) {
		t.Fatalf("downloaded %d bytes, want %d equal", len(got), len(payload))
	}
	if code := c.code("dx", wsproto.MethodFilesDownload, map[string]any{"session_id": s.SessionID, "path": "/nope"}); code != wsproto.CodeNotFound {
		t.Fatalf("download of a missing path: code %d", code)
	}
}

func TestCancelAndClose(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	c.send("long", wsproto.MethodToolsCall, call(s.SessionID, "sleep", map[string]int{"ms": 10000}, false))
	waitFor(t, func() bool { return ts.Backend.Sandbox(s.SessionID).Sleeping() == 1 }, "the call to run")
	c.send("cx", wsproto.MethodToolsCancel, map[string]any{"session_id": s.SessionID, "call_id": "long"})
	// The cancelled call may answer before the cancel does: either order.
	got := c.waitAll("cx", "long")
	var cr wsproto.CancelResult
	if err := json.Unmarshal(got["cx"].Result, &cr); err != nil || !cr.Cancelled {
		t.Fatalf("nothing cancelled: %s %v", got["cx"].Result, got["cx"].Error)
	}
	if m := got["long"]; m.Error == nil || m.Error.Code != wsproto.CodeCancelled {
		t.Fatalf("cancelled call: %+v", m.Error)
	}
	var closed wsproto.CloseResult
	c.ok("close", wsproto.MethodSessionClose, map[string]any{"session_id": s.SessionID}, &closed)
	// Attached clients hear about it.
	deadline := time.Now().Add(5 * time.Second)
	for !hasNote(c.notes, wsproto.NotifySessionClosed) {
		if time.Now().After(deadline) {
			t.Fatal("no session.closed notification")
		}
		m, err := c.read()
		if err != nil {
			t.Fatal(err)
		}
		c.notes = append(c.notes, m)
	}
	if ts.Backend.Live() != 0 {
		t.Fatal("session still live")
	}
	if code := c.code("after", wsproto.MethodToolsList, map[string]any{"session_id": s.SessionID}); code != wsproto.CodeNotFound {
		t.Fatalf("closed session: code %d", code)
	}
}

// session.close is idempotent for whoever could close the session: the
// same connection, the operator on a new one, the session's own token. A
// caller that never could gets the same not-found as for any other id.
func TestCloseTwiceSucceeds(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	other := c.create()
	ref := map[string]any{"session_id": s.SessionID}
	var closed wsproto.CloseResult
	c.ok(1, wsproto.MethodSessionClose, ref, &closed)
	c.ok(2, wsproto.MethodSessionClose, ref, &closed)
	if !closed.Closed {
		t.Fatal("second close: not closed")
	}
	dial(t, ts).ok(3, wsproto.MethodSessionClose, ref, &closed)
	dial(t, ts).ok(4, wsproto.MethodSessionClose, map[string]any{"session_id": s.SessionID, "session_token": s.SessionToken}, &closed)

	stranger := dialRaw(t, ts.URL, other.SessionToken)
	if code := stranger.code(5, wsproto.MethodSessionClose, ref); code != wsproto.CodeNotFound {
		t.Fatalf("another session's token closing a closed session: code %d, want %d", code, wsproto.CodeNotFound)
	}
	if code := c.code(6, wsproto.MethodSessionClose, map[string]any{"session_id": "never-was"}); code != wsproto.CodeNotFound {
		t.Fatalf("unknown session: code %d", code)
	}
}

func hasNote(notes []wsproto.Message, method string) bool {
	for _, n := range notes {
		if n.Method == method {
			return true
		}
	}
	return false
}

// Shutdown lets a running call finish, refuses new ones, closes WebSockets
// with 1001 and closes the sessions.
func TestGracefulShutdown(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	c.send("running", wsproto.MethodToolsCall, call(s.SessionID, "sleep", map[string]int{"ms": 300}, false))
	waitFor(t, func() bool { return ts.Backend.Sandbox(s.SessionID).Sleeping() == 1 }, "the call to run")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- ts.Shutdown(ctx)
	}()
	m := c.wait("running")
	if m.Error != nil || !bytes.Contains(m.Result, []byte("slept")) {
		t.Fatalf("in-flight call during drain: %s %+v", m.Result, m.Error)
	}
	if code := c.closeCode(); code != websocket.CloseGoingAway {
		t.Fatalf("close code %d, want 1001", code)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if ts.Backend.Live() != 0 {
		t.Fatal("sessions left after shutdown")
	}
}

// Calls that outlast the drain are cancelled.
func TestShutdownCancelsLongCalls(t *testing.T) {
	t.Parallel()
	ts := servertest.Start(t, func(o *server.Options) { o.DrainTimeout = 100 * time.Millisecond })
	c := dial(t, ts)
	s := c.create()
	c.send("forever", wsproto.MethodToolsCall, call(s.SessionID, "sleep", map[string]int{"ms": 60000}, false))
	waitFor(t, func() bool { return ts.Backend.Sandbox(s.SessionID).Sleeping() == 1 }, "the call to run")
	c.answerClose()
	// The call sleeps 60 s and the drain lasts 0.1 s. A shutdown that did
	// not cancel the call at the drain's end would be cut only by its
	// context (60 s, less a margin), so 20 s tells the two apart however
	// loaded the machine; it was 3 s, which measured the machine too.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Fatalf("shutdown took %v: the call was not cancelled at the drain's end", d)
	}
}

// metricValue sums the samples of a metric family.
func metricValue(t *testing.T, ts *servertest.Server, name string) float64 {
	t.Helper()
	fams, err := ts.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

// A session has at most core.DefaultMaxTransfers transfers in progress:
// each holds a goroutine, a transfer in the sandbox and, for a download, its
// last chunk. Finished downloads kept for a retry make room for new ones,
// so sequential transfers are never refused.
func TestTransfersPerSessionBounded(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	f := false
	var ids []string
	for i := range core.DefaultMaxTransfers {
		var up wsproto.UploadResult
		c.ok(fmt.Sprint("u", i), wsproto.MethodFilesUpload, map[string]any{"session_id": s.SessionID, "path": fmt.Sprint("/workspace/f", i), "tar_base64": []byte("x"), "final": &f}, &up)
		ids = append(ids, up.UploadID)
	}
	if code := c.code("u-over", wsproto.MethodFilesUpload, map[string]any{"session_id": s.SessionID, "path": "/workspace/g", "tar_base64": []byte("x"), "final": &f}); code != wsproto.CodeBusy {
		t.Fatalf("upload beyond the limit: code %d, want %d", code, wsproto.CodeBusy)
	}
	if code := c.code("d-over", wsproto.MethodFilesDownload, map[string]any{"session_id": s.SessionID, "path": "/workspace/f0"}); code != wsproto.CodeBusy {
		t.Fatalf("download beyond the limit: code %d, want %d", code, wsproto.CodeBusy)
	}
	// Finishing them makes room.
	tr := true
	for i, id := range ids {
		c.ok(fmt.Sprint("uf", i), wsproto.MethodFilesUpload, map[string]any{"session_id": s.SessionID, "upload_id": id, "offset": 1, "tar_base64": []byte("y"), "final": &tr}, nil)
	}
	// Many downloads in a row, each kept for a retry of its last chunk.
	for i := range 3 * core.DefaultMaxTransfers {
		var d wsproto.DownloadResult
		c.ok(fmt.Sprint("d", i), wsproto.MethodFilesDownload, map[string]any{"session_id": s.SessionID, "path": fmt.Sprint("/workspace/f", i%len(ids))}, &d)
		if !d.EOF || string(d.Data) != "xy" {
			t.Fatalf("download %d: %+v", i, d)
		}
	}
}

// A retried create returns the session's token, so an idempotency key is a
// secret of the client that made it: another client of the same operator
// token that guesses it gets the session. Guessable (short) keys are
// refused; the Go client's are 128 random bits.
func TestCreateIdempotencyKeyIsASecret(t *testing.T) {
	ts := servertest.Start(t, nil)
	a, b := dial(t, ts), dial(t, ts)
	for _, key := range []string{"1", "k1", "task-42", "job-000000000001"[:15]} {
		if code := a.code("short-"+key, wsproto.MethodSessionCreate, map[string]any{"idempotency_key": key}); code != wsproto.CodeInvalidParams {
			t.Fatalf("key %q: code %d, want %d", key, code, wsproto.CodeInvalidParams)
		}
		if code := b.code("short-"+key, wsproto.MethodSessionCreate, map[string]any{"idempotency_key": key}); code != wsproto.CodeInvalidParams {
			t.Fatalf("key %q from another client: code %d", key, code)
		}
	}
	if ts.Backend.Created() != 0 {
		t.Fatalf("%d sessions created with guessable keys", ts.Backend.Created())
	}
	var first, retry wsproto.CreateResult
	a.ok("long", wsproto.MethodSessionCreate, map[string]any{"idempotency_key": "8f14e45fceea167a5a36dedd4bea2543"}, &first)
	a.ok("long-retry", wsproto.MethodSessionCreate, map[string]any{"idempotency_key": "8f14e45fceea167a5a36dedd4bea2543"}, &retry)
	if first.SessionToken != retry.SessionToken || ts.Backend.Created() != 1 {
		t.Fatalf("retry with a long key: %+v vs %+v", first, retry)
	}
	// The same key with other options is a conflict that names the
	// parameter, never the key (nor the server's internal form of it).
	m := a.call("other-options", wsproto.MethodSessionCreate, map[string]any{"idempotency_key": "8f14e45fceea167a5a36dedd4bea2543", "cwd": "/tmp"})
	if m.Error == nil || m.Error.Code != wsproto.CodeConflict {
		t.Fatalf("same key, other options: %+v", m)
	}
	if msg := m.Error.Message; !strings.Contains(msg, "idempotency_key") || strings.Contains(msg, "8f14e45f") {
		t.Fatalf("conflict message %q", msg)
	}
}

// Sessions are capped by default (every one is a container): one more is
// refused as busy, WebSocket and MCP alike, until one closes.
func TestMaxSessionsByDefault(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	var last wsproto.CreateResult
	for i := range server.DefaultMaxSessions {
		c.ok(fmt.Sprint("c", i), wsproto.MethodSessionCreate, map[string]any{}, &last)
	}
	if code := c.code("over", wsproto.MethodSessionCreate, map[string]any{}); code != wsproto.CodeBusy {
		t.Fatalf("session %d: code %d, want %d", server.DefaultMaxSessions+1, code, wsproto.CodeBusy)
	}
	// An MCP session beyond the cap is refused at initialize (it would
	// hold no sandbox), with the limit in the error.
	if cs, err := mcpConnect(t, ts, ts.Token); err == nil {
		_ = cs.Close()
		t.Fatal("an MCP session beyond the cap was accepted")
	} else if !strings.Contains(err.Error(), fmt.Sprintf("maximum of %d sessions", server.DefaultMaxSessions)) {
		t.Fatalf("MCP refusal: %v", err)
	}
	if ts.Backend.Created() != server.DefaultMaxSessions {
		t.Fatalf("%d sandboxes created", ts.Backend.Created())
	}
	c.ok("close", wsproto.MethodSessionClose, map[string]any{"session_id": last.SessionID}, nil)
	// Once there is room, an MCP session starts and gets its sandbox.
	var cs *mcp.ClientSession
	waitFor(t, func() bool {
		var err error
		cs, err = mcpConnect(t, ts, ts.Token)
		return err == nil
	}, "an MCP session after a close")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
	if err != nil || res.IsError {
		t.Fatalf("the MCP session's call after a close: %+v %v", res, err)
	}
	cs.Close()
	waitFor(t, func() bool { return c.code("again", wsproto.MethodSessionCreate, map[string]any{}) == 0 }, "a create after a close")
}

// While calls drain, the listener stays open: /healthz says 503 draining
// and a new WebSocket is refused with 503; once the drain ends, the
// listener closes.
func TestHealthzDrainingDuringShutdown(t *testing.T) {
	t.Parallel()
	ts := servertest.Start(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- ts.Serve(ln) }()
	base := "http://" + ln.Addr().String()
	wsURL := "ws://" + ln.Addr().String() + wsproto.Path
	health := func() (int, string) {
		resp, err := http.Get(base + "/healthz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := health(); code != http.StatusOK || !strings.Contains(body, `"ok"`) {
		t.Fatalf("healthz before shutdown: %d %s", code, body)
	}
	c := dialRaw(t, wsURL, ts.Token)
	s := c.create()
	// The call runs until the test wakes it.
	c.send("running", wsproto.MethodToolsCall, call(s.SessionID, "sleep", map[string]int{"ms": 60000}, false))
	fake := ts.Backend.Sandbox(s.SessionID)
	waitFor(t, func() bool { return fake.Sleeping() == 1 }, "the call to run")
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- ts.Shutdown(ctx)
	}()
	// Shutdown marks the server draining before it waits for the call.
	var code int
	var body string
	waitFor(t, func() bool { code, body = health(); return code != http.StatusOK }, "healthz to leave 200")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, `"draining"`) {
		t.Fatalf("healthz while draining: %d %s", code, body)
	}
	_, resp, err := websocket.DefaultDialer.Dial(wsURL, http.Header{"Authorization": {"Bearer " + ts.Token}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("new WebSocket while draining: %v %+v", err, resp)
	}
	select {
	case err := <-served:
		t.Fatalf("the listener closed while a call drained: %v", err)
	default:
	}
	fake.Wake()
	if m := c.wait("running"); m.Error != nil {
		t.Fatalf("the call in flight: %+v", m.Error)
	}
	c.answerClose()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if code, _ := health(); code != 0 {
		t.Fatalf("healthz after shutdown: %d, want a refused connection", code)
	}
}

// A download its client abandoned halfway does not hold the shutdown for
// the whole drain timeout: once draining, transfers idle out after
// DrainTransferIdle.
func TestAbandonedDownloadDoesNotHoldShutdown(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	ts := servertest.Start(t, func(o *server.Options) {
		o.DrainTimeout = 30 * time.Second
		o.DrainTransferIdle = 50 * time.Millisecond
		o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	c := dial(t, ts)
	s := c.create()
	payload := bytes.Repeat([]byte("0123456789abcdef"), 10000)
	var up wsproto.UploadResult
	c.ok("u", wsproto.MethodFilesUpload, map[string]any{"session_id": s.SessionID, "path": "/workspace/a", "tar_base64": payload}, &up)
	var d wsproto.DownloadResult
	c.ok("d", wsproto.MethodFilesDownload, map[string]any{"session_id": s.SessionID, "path": "/workspace/a", "chunk_size": 16 << 10}, &d)
	if d.EOF {
		t.Fatal("the download ended in one chunk")
	}
	// The client never asks for the rest.
	c.answerClose()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	if err := ts.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Had the download held the drain, the drain would have timed out
	// (after DrainTimeout) and said so.
	if strings.Contains(logs.String(), "calls still running after the drain") {
		t.Fatalf("the abandoned download held the drain:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "shut down") {
		t.Fatalf("no shutdown in the log:\n%s", logs.String())
	}
}

// syncBuffer is a bytes.Buffer for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Tool names come from clients: only calls a tool answered make a latency
// series, so unknown and empty names cannot grow /metrics.
func TestCallMetricsOnlyForRealTools(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	s := c.create()
	var r wsproto.CallResult
	c.ok("e1", wsproto.MethodToolsCall, call(s.SessionID, "echo", map[string]string{"text": "x"}, false), &r)
	cs, err := mcpConnect(t, ts, ts.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, name := range []string{"", "nope", "bogus-tool-name"} {
		if code := c.code(fmt.Sprint("bad", i), wsproto.MethodToolsCall, call(s.SessionID, name, nil, false)); code == 0 {
			t.Fatalf("tool %q: no error", name)
		}
		if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name}); err == nil && !res.IsError {
			t.Fatalf("MCP tool %q: no error", name)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, ts.Base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+ts.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `tool="echo"`) {
		t.Fatalf("no series for echo:\n%s", body)
	}
	for _, bad := range []string{`tool=""`, `tool="nope"`, `tool="bogus-tool-name"`} {
		if strings.Contains(string(body), bad) {
			t.Errorf("a series for %s", bad)
		}
	}
}
