package server_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

const fuzzMaxMessage = 64 << 10

// FuzzJSONRPC sends arbitrary messages to the WebSocket API (the JSON-RPC
// decoding, the id checks, the strict params decoding of every method and
// the methods themselves, over the fake manager) and checks that the server
// never panics, answers only valid JSON, and keeps the connection: after
// each input a session.list sentinel must be answered.
//
//	go test -run '^$' -fuzz FuzzJSONRPC -fuzztime 60s ./server/
func FuzzJSONRPC(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"session.list"}`,
		`{"jsonrpc":"2.0","id":"c","method":"session.create","params":{"image":"x","env":{"A":"b"},"limits":{"memory_mb":1,"cpus":0.5,"pids":1,"tmp_mb":1},"idle_timeout":"1m","labels":{"k":"v"},"network":"none","idempotency_key":"0123456789abcdef"}}`,
		`{"jsonrpc":"2.0","id":2,"method":"session.create","params":{"idle_timeout":-1.5e308}}`,
		`{"jsonrpc":"2.0","id":3,"method":"session.attach","params":{"session_id":"fake-x","session_token":"t","last_seq":18446744073709551615}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools.call","params":{"session_id":"fake-x","name":"echo","arguments":{"text":"hi"},"stream":true}}`,
		`{"jsonrpc":"2.0","id":5,"method":"tools.cancel","params":{"session_id":"fake-x","call_id":{"a":[1]}}}`,
		`{"jsonrpc":"2.0","id":6,"method":"tools.list","params":{"session_id":"fake-x","format":"openai"}}`,
		`{"jsonrpc":"2.0","id":7,"method":"files.upload","params":{"session_id":"fake-x","path":"/workspace","tar_base64":"eA==","final":false,"offset":-1}}`,
		`{"jsonrpc":"2.0","id":8,"method":"files.download","params":{"session_id":"fake-x","download_id":"d","offset":9223372036854775807,"chunk_size":-5}}`,
		`{"jsonrpc":"2.0","id":9,"method":"session.close","params":null}`,
		`{"jsonrpc":"2.0","method":"session.list"}`,
		`{"jsonrpc":"2.0","id":null,"method":"session.list"}`,
		`{"jsonrpc":"2.0","id":-0.0e-0,"method":"session.list","params":[]}`,
		`{"jsonrpc":"2.0","id":"\ud800","method":"session.list","params":{}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"session.list"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"session.list"}{"x":1}`,
		`{"jsonrpc":"2.0","id":1,"method":"session.list","params":{"x":1}}`,
		`{"jsonrpc":1,"id":true,"method":["a"]}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools.call","params":{"session_id":"","name":""}}`,
		"\xff\xfe{}",
		``,
		`null`,
		`"x"`,
		`{`,
	} {
		f.Add([]byte(seed))
	}
	ts := servertest.Start(f, func(o *server.Options) { o.MaxMessageBytes = fuzzMaxMessage })
	var ws *websocket.Conn
	redial := func(t *testing.T) {
		if ws != nil {
			ws.Close()
		}
		var err error
		ws, _, err = websocket.DefaultDialer.Dial(ts.URL, http.Header{"Authorization": {"Bearer " + ts.Token}})
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
	}
	f.Cleanup(func() {
		if ws != nil {
			ws.Close()
		}
	})
	n := 0
	f.Fuzz(func(t *testing.T, msg []byte) {
		if ws == nil {
			redial(t)
		}
		if len(msg) > fuzzMaxMessage {
			return // closes with 1009: TestOversizedMessageCloses1009
		}
		if !utf8.Valid(msg) {
			// RFC 6455: such a text frame fails the connection with 1007.
			if err := ws.WriteMessage(websocket.TextMessage, msg); err != nil {
				t.Fatalf("write: %v", err)
			}
			_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			var err error
			for err == nil { // answers to earlier messages may come first
				_, _, err = ws.ReadMessage()
			}
			redial(t)
			var ce *websocket.CloseError
			if !errors.As(err, &ce) || ce.Code != websocket.CloseInvalidFramePayloadData {
				t.Fatalf("a text frame of invalid UTF-8 %q: %v, want close 1007", msg, err)
			}
			return
		}
		n++
		sentinel := fmt.Sprintf(`"sentinel-%d"`, n)
		if err := ws.WriteMessage(websocket.TextMessage, msg); err != nil {
			t.Fatalf("write: %v", err)
		}
		if err := ws.WriteMessage(websocket.TextMessage, []byte(`{"jsonrpc":"2.0","id":`+sentinel+`,"method":"session.list"}`)); err != nil {
			t.Fatalf("write sentinel: %v", err)
		}
		for {
			_ = ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, b, err := ws.ReadMessage()
			if err != nil {
				redial(t)
				t.Fatalf("the connection ended after %q: %v", msg, err)
			}
			var m wsproto.Message
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatalf("the server sent invalid JSON %q after %q: %v", b, msg, err)
			}
			if string(m.ID) == sentinel {
				return
			}
		}
	})
}
