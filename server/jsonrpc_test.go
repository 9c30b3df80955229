package server_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

func TestJSONRPCBadInput(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	sess := c.create()
	raw := func(msg string) wsproto.Message {
		t.Helper()
		if err := c.ws.WriteMessage(websocket.TextMessage, []byte(msg)); err != nil {
			t.Fatal(err)
		}
		m, err := c.read()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	tests := []struct {
		name string
		msg  string
		want int
	}{
		{"malformed JSON", `{"jsonrpc":"2.0","id":1,"method":`, wsproto.CodeParseError},
		{"not JSON at all", `hello`, wsproto.CodeParseError},
		{"batch", `[{"jsonrpc":"2.0","id":1,"method":"session.list"}]`, wsproto.CodeInvalidRequest},
		{"wrong version", `{"jsonrpc":"1.0","id":1,"method":"session.list"}`, wsproto.CodeInvalidRequest},
		{"no method", `{"jsonrpc":"2.0","id":1}`, wsproto.CodeInvalidRequest},
		{"method not a string", `{"jsonrpc":"2.0","id":1,"method":7}`, wsproto.CodeInvalidRequest},
		{"id is an object", `{"jsonrpc":"2.0","id":{},"method":"session.list"}`, wsproto.CodeInvalidRequest},
		{"unknown method", `{"jsonrpc":"2.0","id":1,"method":"session.explode"}`, wsproto.CodeMethodNotFound},
		{"params not an object", `{"jsonrpc":"2.0","id":1,"method":"tools.call","params":[1,2]}`, wsproto.CodeInvalidParams},
		{"unknown param", `{"jsonrpc":"2.0","id":1,"method":"session.create","params":{"imagee":"x"}}`, wsproto.CodeInvalidParams},
		{"wrong param type", `{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"session_id":5}}`, wsproto.CodeInvalidParams},
		{"missing session_id", `{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"name":"echo"}}`, wsproto.CodeInvalidParams},
		{"missing tool name", `{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"session_id":"` + sess.SessionID + `"}}`, wsproto.CodeInvalidParams},
		{"unknown tool", `{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"session_id":"` + sess.SessionID + `","name":"nope"}}`, wsproto.CodeInvalidParams},
		{"bad duration", `{"jsonrpc":"2.0","id":1,"method":"session.create","params":{"idle_timeout":"soon"}}`, wsproto.CodeInvalidParams},
		{"negative limits", `{"jsonrpc":"2.0","id":1,"method":"session.create","params":{"limits":{"memory_mb":-1}}}`, wsproto.CodeInvalidParams},
		{"invalid options from the manager", `{"jsonrpc":"2.0","id":1,"method":"session.create","params":{"image":"bad image"}}`, wsproto.CodeInvalidParams},
		{"bad tools format", `{"jsonrpc":"2.0","id":1,"method":"tools.list","params":{"session_id":"` + sess.SessionID + `","format":"xml"}}`, wsproto.CodeInvalidParams},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := raw(tt.msg)
			if m.Error == nil {
				t.Fatalf("no error; result %s", m.Result)
			}
			if m.Error.Code != tt.want {
				t.Fatalf("code %d (%s), want %d", m.Error.Code, m.Error.Message, tt.want)
			}
			// Every error names its kind (the doc's table).
			if d, _ := m.Error.Data.(map[string]any); d == nil || d["kind"] == nil || d["kind"] == "" {
				t.Fatalf("error without data.kind: %+v", m.Error)
			}
		})
	}
	// The connection survives all of that.
	var list wsproto.ListResult
	c.ok(99, wsproto.MethodSessionList, nil, &list)
}

func TestOversizedMessageCloses1009(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.MaxMessageBytes = 64 << 10 })
	c := dial(t, ts)
	big := `{"jsonrpc":"2.0","id":1,"method":"session.list","params":{"pad":"` + strings.Repeat("x", 70<<10) + `"}}`
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(big)); err != nil {
		t.Fatal(err)
	}
	if code := c.closeCode(); code != websocket.CloseMessageTooBig {
		t.Fatalf("close code %d, want %d", code, websocket.CloseMessageTooBig)
	}
	// Other clients are unaffected.
	var list wsproto.ListResult
	dial(t, ts).ok(1, wsproto.MethodSessionList, nil, &list)
}

func TestToolFormats(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	sess := c.create()
	if len(sess.Tools) == 0 {
		t.Fatal("create returned no tools")
	}
	for _, f := range []string{"", "mcp", "openai"} {
		var r struct{ Tools []map[string]any }
		c.ok("f"+f, wsproto.MethodToolsList, map[string]any{"session_id": sess.SessionID, "format": f}, &r)
		if len(r.Tools) != len(sess.Tools) {
			t.Fatalf("format %q: %d tools", f, len(r.Tools))
		}
		switch f {
		case "mcp":
			if r.Tools[0]["inputSchema"] == nil || r.Tools[0]["annotations"] == nil {
				t.Fatalf("mcp format: %v", r.Tools[0])
			}
		case "openai":
			if r.Tools[0]["type"] != "function" {
				t.Fatalf("openai format: %v", r.Tools[0])
			}
		}
	}
}

// Request ids and idempotency keys are kept as cache keys for minutes and
// ids are echoed in every stream.output: they are bounded, so a client
// cannot make the server hold gigabytes with a few requests.
func TestIDAndIdempotencyKeyBounded(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	sess := c.create()
	echo := func(id string) wsproto.Message {
		t.Helper()
		return c.call(id, wsproto.MethodToolsCall, call(sess.SessionID, "echo", map[string]string{"text": "x"}, true))
	}
	longest := strings.Repeat("i", wsproto.MaxIDBytes-2) // plus the quotes
	if m := echo(longest); m.Error != nil {
		t.Fatalf("an id of %d bytes: %v", wsproto.MaxIDBytes, m.Error)
	}
	c.send(longest+"x", wsproto.MethodToolsCall, call(sess.SessionID, "echo", map[string]string{"text": "x"}, true))
	m := c.wait(nil)
	if m.Error == nil || m.Error.Code != wsproto.CodeInvalidRequest {
		t.Fatalf("an id of %d bytes: %+v", wsproto.MaxIDBytes+1, m)
	}
	key := strings.Repeat("k", wsproto.MaxIDBytes+1)
	if code := c.code("k1", wsproto.MethodSessionCreate, map[string]any{"idempotency_key": key}); code != wsproto.CodeInvalidParams {
		t.Fatalf("a long idempotency key: code %d", code)
	}
	if ts.Backend.Created() != 1 {
		t.Fatalf("%d sessions created", ts.Backend.Created())
	}
}

// Running requests keep their params: the bytes of running requests are
// bounded per connection (4 messages' worth) and in all (16), so a few
// connections with slow calls of big messages cannot pin gigabytes.
func TestInFlightBytesBounded(t *testing.T) {
	t.Parallel()
	const maxMsg = 64 << 10
	ts := servertest.Start(t, func(o *server.Options) { o.MaxMessageBytes = maxMsg })
	op := dial(t, ts)
	s := op.create()
	msg := func(id string) []byte { // exactly 63 KiB
		head := `{"jsonrpc":"2.0","id":"` + id + `","method":"tools.call","params":{"session_id":"` + s.SessionID + `","name":"sleep","arguments":{"ms":60000,"text":"`
		tail := `"}}}`
		return []byte(head + strings.Repeat("x", 63<<10-len(head)-len(tail)) + tail)
	}
	// The calls sleep until the test wakes them: running is when the
	// server holds their bytes.
	fake := ts.Backend.Sandbox(s.SessionID)
	sleeping := func(n int) func() bool { return func() bool { return fake.Sleeping() == n } }
	send := func(c *rawClient, ids ...string) {
		t.Helper()
		for _, id := range ids {
			if err := c.ws.WriteMessage(websocket.TextMessage, msg(id)); err != nil {
				t.Fatal(err)
			}
		}
	}
	busy := func(got map[string]wsproto.Message) (n int) {
		for _, m := range got {
			if m.Error != nil && m.Error.Code == wsproto.CodeBusy {
				n++
			} else if m.Error != nil {
				t.Fatalf("error %v", m.Error)
			}
		}
		return n
	}
	// One connection: 4 run, the 5th is refused.
	// The refusal is awaited before the wake, as below: woken first, the
	// four would free their bytes before a slow reader reached a5, which
	// would then run and sleep for a minute.
	send(op, "a1", "a2", "a3", "a4", "a5")
	waitFor(t, sleeping(4), "4 calls to run")
	n := busy(op.waitAll("a5"))
	fake.Wake()
	if n += busy(op.waitAll("a1", "a2", "a3", "a4")); n != 1 {
		t.Fatalf("one connection, 5 big requests: %d refused, want 1", n)
	}
	// Four connections with 4 each fill the total of 16; a 17th request,
	// alone on a fifth connection, is refused.
	var clients []*rawClient
	for range 5 {
		clients = append(clients, dialRaw(t, ts.URL, s.SessionToken))
	}
	ids := func(i, n int) []string {
		var out []string
		for j := range n {
			out = append(out, fmt.Sprint("b", i, j))
		}
		return out
	}
	for i, c := range clients[:4] {
		send(c, ids(i, 4)...)
	}
	waitFor(t, sleeping(16), "16 calls to run")
	send(clients[4], ids(4, 1)...)
	refused := busy(clients[4].waitAll(ids(4, 1)...))
	fake.Wake()
	for i, c := range clients[:4] {
		refused += busy(c.waitAll(ids(i, 4)...))
	}
	if refused != 1 {
		t.Fatalf("17 big requests on five connections: %d refused, want 1", refused)
	}
	for _, c := range append(clients, op) {
		c.answerClose()
	}
}

// RFC 6455: a text frame that is not UTF-8 fails the connection with 1007
// and is never run; the same bytes in a binary frame are JSON like any other.
func TestInvalidUTF8TextFrameCloses1007(t *testing.T) {
	t.Parallel()
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	msg := []byte("{\"jsonrpc\":\"2.0\",\"id\":\"\xff\xfe\",\"method\":\"session.list\"}")
	require.NoError(t, c.ws.WriteMessage(websocket.TextMessage, msg))
	assert.Equal(t, websocket.CloseInvalidFramePayloadData, c.closeCode())

	b := dial(t, ts)
	require.NoError(t, b.ws.WriteMessage(websocket.BinaryMessage, msg))
	m, err := b.read()
	require.NoError(t, err)
	assert.Nil(t, m.Error, "a binary frame carries bytes, not text")
}
