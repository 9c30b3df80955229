package server_test

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

func TestWebSocketHandshakeAuth(t *testing.T) {
	ts := servertest.Start(t, nil)
	bearer := func(tok string) http.Header { return http.Header{"Authorization": {"Bearer " + tok}} }
	tests := []struct {
		name   string
		url    string
		header http.Header
		want   int
	}{
		{"no token", ts.URL, http.Header{}, http.StatusUnauthorized},
		{"wrong token", ts.URL, bearer(strings.Repeat("x", 43)), http.StatusUnauthorized},
		{"basic scheme", ts.URL, http.Header{"Authorization": {"Basic " + ts.Token}}, http.StatusUnauthorized},
		{"operator token", ts.URL, bearer(ts.Token), http.StatusSwitchingProtocols},
		{"token in subprotocol (browsers)", ts.URL, http.Header{
			"Sec-WebSocket-Protocol": {wsproto.Subprotocol + ", " + wsproto.BearerPrefix + ts.Token},
			"Origin":                 {"http://app.example"}}, http.StatusForbidden}, // origin not allowed
		{"token in subprotocol, no origin", ts.URL, http.Header{
			"Sec-WebSocket-Protocol": {wsproto.Subprotocol + ", " + wsproto.BearerPrefix + ts.Token}}, http.StatusSwitchingProtocols},
		{"cross-origin browser", ts.URL, http.Header{"Authorization": {"Bearer " + ts.Token}, "Origin": {"https://evil.example"}}, http.StatusForbidden},
		{"rebound host", ts.URL, http.Header{"Authorization": {"Bearer " + ts.Token}, "Host": {"evil.example:7070"}}, http.StatusForbidden},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := tt.header.Clone()
			host := h.Get("Host")
			h.Del("Host")
			d := *websocket.DefaultDialer
			if host != "" {
				// gorilla takes Host from the header map.
				h.Set("Host", host)
			}
			ws, resp, err := d.Dial(tt.url, h)
			got := 0
			if resp != nil {
				got = resp.StatusCode
			}
			if err == nil {
				ws.Close()
			}
			if got != tt.want {
				t.Fatalf("status %d, want %d (err %v)", got, tt.want, err)
			}
		})
	}
}

// Python's websocket-client (what most Python agent code uses) sends
// "Origin: http://<host>:<port>" of the server it dials. That same-origin
// request is accepted without --allow-origin; another origin, another local
// port's included, is not. The handshake is written byte for byte as that
// client writes it.
func TestSameOriginHandshake(t *testing.T) {
	ts := servertest.Start(t, nil)
	hostport := strings.TrimPrefix(strings.TrimSuffix(ts.URL, "/v1/ws"), "ws://")
	handshake := func(origin string) string {
		conn, err := net.Dial("tcp", hostport)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		req := "GET /v1/ws HTTP/1.1\r\n" +
			"Upgrade: websocket\r\n" +
			"Host: " + hostport + "\r\n" +
			"Origin: " + origin + "\r\n" +
			"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
			"Sec-WebSocket-Version: 13\r\n" +
			"Connection: Upgrade\r\n" +
			"Authorization: Bearer " + ts.Token + "\r\n\r\n"
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		status, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(status)
	}
	if got := handshake("http://" + hostport); got != "HTTP/1.1 101 Switching Protocols" {
		t.Errorf("same origin: %q, want 101", got)
	}
	host, port, _ := net.SplitHostPort(hostport)
	other, _ := strconv.Atoi(port)
	for _, origin := range []string{"http://" + net.JoinHostPort(host, strconv.Itoa(other+1)), "http://evil.example:" + port, "null"} {
		if got := handshake(origin); !strings.HasPrefix(got, "HTTP/1.1 403") {
			t.Errorf("Origin %s: %q, want 403", origin, got)
		}
	}
}

func TestAllowedOriginAndSubprotocolSelected(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.AllowOrigins = []string{"http://app.example"} })
	h := http.Header{
		"Sec-WebSocket-Protocol": {wsproto.Subprotocol + ", " + wsproto.BearerPrefix + ts.Token},
		"Origin":                 {"http://app.example"},
	}
	ws, resp, err := websocket.DefaultDialer.Dial(ts.URL, h)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer ws.Close()
	// The token must never be echoed back as the selected subprotocol.
	if got := resp.Header.Get("Sec-WebSocket-Protocol"); got != wsproto.Subprotocol {
		t.Fatalf("selected subprotocol %q, want %q", got, wsproto.Subprotocol)
	}
}

func TestHTTPEndpointsAuth(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts)
	sess := c.create()
	get := func(path, token, host, origin string) int {
		req, _ := http.NewRequest(http.MethodGet, ts.Base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		if host != "" {
			req.Host = host
		}
		if origin != "" {
			req.Header.Set("Origin", origin)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	tests := []struct {
		name                      string
		path, token, host, origin string
		want                      int
	}{
		{"healthz needs nothing", "/healthz", "", "", "", 200},
		{"metrics without token", "/metrics", "", "", "", 401},
		{"metrics wrong token", "/metrics", "nope-nope-nope-nope-nope-nope-nope-nope", "", "", 401},
		{"metrics with session token", "/metrics", sess.SessionToken, "", "", 403},
		{"metrics operator", "/metrics", ts.Token, "", "", 200},
		{"metrics rebound host", "/metrics", ts.Token, "attacker.example", "", 403},
		{"metrics localhost name", "/metrics", ts.Token, "localhost:1234", "", 200},
		{"metrics cross origin", "/metrics", ts.Token, "", "https://evil.example", 403},
		{"mcp without token", "/mcp", "", "", "", 401},
		{"mcp with session token", "/mcp", sess.SessionToken, "", "", 403},
		{"mcp rebound host", "/mcp", ts.Token, "attacker.example:7070", "", 403},
		{"mcp cross origin", "/mcp", ts.Token, "", "https://evil.example", 403},
		{"mcp null origin", "/mcp", ts.Token, "", "null", 403},
		{"ws endpoint rebound host", "/v1/ws", ts.Token, "attacker.example", "", 403},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := get(tt.path, tt.token, tt.host, tt.origin); got != tt.want {
				t.Fatalf("GET %s: %d, want %d", tt.path, got, tt.want)
			}
		})
	}
}

// A session's token opens that session and nothing else; every other
// session answers "not found", exactly like one that does not exist.
func TestSessionCapabilityIsolation(t *testing.T) {
	ts := servertest.Start(t, nil)
	op := dial(t, ts)
	a := op.create()
	b := op.create()

	// A long call in b, which a's token must not be able to cancel.
	op.send("b-long", wsproto.MethodToolsCall, map[string]any{"session_id": b.SessionID, "name": "sleep", "arguments": map[string]int{"ms": 300}})
	ca := dialRaw(t, ts.URL, a.SessionToken)
	var r wsproto.CallResult
	ca.ok(1, wsproto.MethodToolsCall, map[string]any{"session_id": a.SessionID, "name": "echo", "arguments": map[string]string{"text": "mine"}}, &r)
	if r.Text() != "mine" {
		t.Fatalf("own session: %q", r.Text())
	}
	for i, m := range []struct {
		method string
		params map[string]any
	}{
		{wsproto.MethodToolsCall, map[string]any{"session_id": b.SessionID, "name": "echo", "arguments": map[string]string{"text": "x"}}},
		{wsproto.MethodToolsList, map[string]any{"session_id": b.SessionID}},
		{wsproto.MethodSessionAttach, map[string]any{"session_id": b.SessionID}},
		{wsproto.MethodSessionAttach, map[string]any{"session_id": b.SessionID, "session_token": a.SessionToken}},
		{wsproto.MethodSessionClose, map[string]any{"session_id": b.SessionID}},
		{wsproto.MethodFilesDownload, map[string]any{"session_id": b.SessionID, "path": "/workspace"}},
		{wsproto.MethodFilesUpload, map[string]any{"session_id": b.SessionID, "path": "/workspace", "tar_base64": []byte("x")}},
		{wsproto.MethodToolsCancel, map[string]any{"session_id": b.SessionID, "call_id": "b-long"}},
		{wsproto.MethodToolsCall, map[string]any{"session_id": "no-such-session", "name": "echo"}},
	} {
		m1 := ca.call(10+i, m.method, m.params)
		if m1.Error == nil || m1.Error.Code != wsproto.CodeNotFound {
			t.Fatalf("%s on another session: %+v, want code %d", m.method, m1.Error, wsproto.CodeNotFound)
		}
	}
	if m := op.wait("b-long"); m.Error != nil {
		t.Fatalf("b's call was cancelled from session a: %v", m.Error)
	}
	// Request ids are idempotency keys per session: the same id and params
	// in another session run there, never return the first session's result.
	args := map[string]any{"name": "count", "arguments": map[string]int{}}
	args["session_id"] = a.SessionID
	var ra, rb wsproto.CallResult
	ca.ok("same-id", wsproto.MethodToolsCall, args, &ra)
	args["session_id"] = b.SessionID
	op.ok("same-id", wsproto.MethodToolsCall, args, &rb)
	if ts.Backend.Sandbox(a.SessionID).Counts() != 1 || ts.Backend.Sandbox(b.SessionID).Counts() != 1 {
		t.Fatalf("same request id in two sessions: ran %d and %d times", ts.Backend.Sandbox(a.SessionID).Counts(), ts.Backend.Sandbox(b.SessionID).Counts())
	}
	// Not found and forbidden read the same, so ids cannot be probed.
	other := ca.call(30, wsproto.MethodToolsList, map[string]any{"session_id": b.SessionID})
	missing := ca.call(31, wsproto.MethodToolsList, map[string]any{"session_id": "fake-000000000000"})
	if strings.Replace(other.Error.Message, b.SessionID, "ID", 1) != strings.Replace(missing.Error.Message, "fake-000000000000", "ID", 1) {
		t.Fatalf("messages differ: %q vs %q", other.Error.Message, missing.Error.Message)
	}
	// A session token lists only its session and cannot create.
	var list wsproto.ListResult
	ca.ok(40, wsproto.MethodSessionList, nil, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].SessionID != a.SessionID {
		t.Fatalf("session token lists %+v", list.Sessions)
	}
	if code := ca.code(41, wsproto.MethodSessionCreate, map[string]any{}); code != wsproto.CodePermission {
		t.Fatalf("create with a session token: code %d", code)
	}
	// The operator, on a new connection, needs the session token too.
	op2 := dial(t, ts)
	if code := op2.code(50, wsproto.MethodToolsList, map[string]any{"session_id": a.SessionID}); code != wsproto.CodeNotFound {
		t.Fatalf("operator without session token: code %d", code)
	}
	if code := op2.code(51, wsproto.MethodToolsList, map[string]any{"session_id": a.SessionID, "session_token": b.SessionToken}); code != wsproto.CodeNotFound {
		t.Fatalf("operator with the wrong session's token: code %d", code)
	}
	if code := op2.code(52, wsproto.MethodToolsList, map[string]any{"session_id": a.SessionID, "session_token": a.SessionToken}); code != 0 {
		t.Fatalf("operator with the session token: code %d", code)
	}
	op2.ok(53, wsproto.MethodSessionList, nil, &list)
	if len(list.Sessions) != 2 {
		t.Fatalf("operator lists %d sessions, want 2", len(list.Sessions))
	}
}

func TestRefusesRemoteListenWithoutTLS(t *testing.T) {
	m := servertest.NewFakeBackend()
	for _, listen := range []string{"0.0.0.0:7070", "192.0.2.1:7070", "[::]:7070", ":7070"} {
		_, err := server.New(server.Options{Backend: m, OperatorToken: strings.Repeat("t", 43), Listen: listen})
		if err == nil || !strings.Contains(err.Error(), "refusing to listen") {
			t.Fatalf("listen %s: err %v, want a refusal", listen, err)
		}
	}
	for _, o := range []server.Options{
		{Listen: "0.0.0.0:7070", InsecureAllowRemote: true},
		{Listen: "0.0.0.0:7070", TLSCert: "c.pem", TLSKey: "k.pem"},
		{Listen: "127.0.0.1:0"},
		{Listen: "localhost:7070"},
		{Listen: "[::1]:7070"},
		{Listen: "unix:/tmp/sandboxd.sock"},
	} {
		o.Backend, o.OperatorToken = m, strings.Repeat("t", 43)
		if _, err := server.New(o); err != nil {
			t.Fatalf("listen %s: %v", o.Listen, err)
		}
	}
	if _, err := server.New(server.Options{Backend: m, OperatorToken: "short"}); err == nil {
		t.Fatal("a short operator token was accepted")
	}
}

// A reconnect with the token of a session that ended (its container was
// killed, say) is refused with why, not a bare 401; a made-up token still
// learns nothing.
func TestEndedSessionTokenSaysWhy(t *testing.T) {
	ts := servertest.Start(t, nil)
	op := dial(t, ts)
	s := op.create()
	ts.Backend.Sandbox(s.SessionID).Fail(errors.New("exited with code 137 (SIGKILL)"))
	status := func(tok string) (int, string) {
		ws, resp, err := websocket.DefaultDialer.Dial(ts.URL, http.Header{"Authorization": {"Bearer " + tok}})
		if err == nil {
			ws.Close()
		}
		if resp == nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	require.Eventually(t, func() bool {
		code, body := status(s.SessionToken)
		return code == http.StatusUnauthorized && strings.Contains(body, "session "+s.SessionID+" ended: ") && strings.Contains(body, "SIGKILL")
	}, time.Minute, 10*time.Millisecond, "the ended session's token gets the reason")
	code, body := status(strings.Repeat("x", 43))
	assert.Equal(t, http.StatusUnauthorized, code)
	assert.NotContains(t, body, "ended")
}
