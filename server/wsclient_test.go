package server_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

// rawClient is a bare JSON-RPC-over-WebSocket client: the tests speak the
// protocol byte for byte, without the Go client's conveniences.
type rawClient struct {
	t     testing.TB
	ws    *websocket.Conn
	notes []wsproto.Message // notifications read while waiting for responses
}

func dialRaw(t testing.TB, url, token string) *rawClient {
	t.Helper()
	h := http.Header{}
	if token != "" {
		h.Set("Authorization", "Bearer "+token)
	}
	ws, resp, err := websocket.DefaultDialer.Dial(url, h)
	if err != nil {
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.Fatalf("dial: %v (HTTP %d)", err, status)
	}
	c := &rawClient{t: t, ws: ws}
	t.Cleanup(func() { ws.Close() })
	return c
}

func dial(t testing.TB, ts *servertest.Server) *rawClient { return dialRaw(t, ts.URL, ts.Token) }

// send writes one request.
func (c *rawClient) send(id any, method string, params any) {
	c.t.Helper()
	req := map[string]any{"jsonrpc": "2.0", "id": id, "method": method}
	if params != nil {
		req["params"] = params
	}
	if err := c.ws.WriteJSON(req); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// read reads the next message.
func (c *rawClient) read() (wsproto.Message, error) {
	_ = c.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	var m wsproto.Message
	_, b, err := c.ws.ReadMessage()
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		c.t.Fatalf("server sent invalid JSON %q: %v", b, err)
	}
	return m, nil
}

// wait reads until the response with id, keeping notifications.
func (c *rawClient) wait(id any) wsproto.Message {
	c.t.Helper()
	want, _ := json.Marshal(id)
	for {
		m, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for response %s: %v", want, err)
		}
		if m.Method != "" {
			c.notes = append(c.notes, m)
			continue
		}
		if string(m.ID) == string(want) {
			return m
		}
		c.t.Fatalf("response to %s while waiting for %s", m.ID, want)
	}
}

// waitAll reads until the responses to all ids arrived, in any order,
// keeping notifications.
func (c *rawClient) waitAll(ids ...string) map[string]wsproto.Message {
	c.t.Helper()
	want := map[string]string{}
	for _, id := range ids {
		b, _ := json.Marshal(id)
		want[string(b)] = id
	}
	got := map[string]wsproto.Message{}
	for len(got) < len(ids) {
		m, err := c.read()
		if err != nil {
			c.t.Fatalf("waiting for responses %v: %v", ids, err)
		}
		if m.Method != "" {
			c.notes = append(c.notes, m)
			continue
		}
		id, ok := want[string(m.ID)]
		if !ok {
			c.t.Fatalf("response to %s while waiting for %v", m.ID, ids)
		}
		got[id] = m
	}
	return got
}

// call sends a request and returns its response.
func (c *rawClient) call(id any, method string, params any) wsproto.Message {
	c.t.Helper()
	c.send(id, method, params)
	return c.wait(id)
}

// ok calls and decodes the result, failing on an error response.
func (c *rawClient) ok(id any, method string, params any, into any) {
	c.t.Helper()
	m := c.call(id, method, params)
	if m.Error != nil {
		c.t.Fatalf("%s: %v", method, m.Error)
	}
	if into != nil {
		if err := json.Unmarshal(m.Result, into); err != nil {
			c.t.Fatalf("%s result %s: %v", method, m.Result, err)
		}
	}
}

// code calls and returns the error code (0 for success).
func (c *rawClient) code(id any, method string, params any) int {
	c.t.Helper()
	m := c.call(id, method, params)
	if m.Error == nil {
		return 0
	}
	return m.Error.Code
}

func (c *rawClient) create() wsproto.CreateResult {
	c.t.Helper()
	var r wsproto.CreateResult
	c.ok("create-"+time.Now().Format("150405.000000000"), wsproto.MethodSessionCreate, map[string]any{}, &r)
	return r
}

// outputs returns the stream.output notifications read so far.
func (c *rawClient) outputs() []wsproto.StreamOutput {
	var out []wsproto.StreamOutput
	for _, n := range c.notes {
		if n.Method == wsproto.NotifyStreamOutput {
			var o wsproto.StreamOutput
			if err := json.Unmarshal(n.Params, &o); err != nil {
				c.t.Fatal(err)
			}
			out = append(out, o)
		}
	}
	return out
}

// closeCode reads until the connection ends and returns its close code
// (-1 if it ended without a close frame).
func (c *rawClient) closeCode() int {
	for {
		_, err := c.read()
		if err == nil {
			continue
		}
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return ce.Code
		}
		return -1
	}
}

// answerClose reads, and drops, whatever comes until the connection ends,
// so the client answers the server's close frame as a real client does
// (gorilla echoes it) and the server's shutdown need not wait out its
// close grace. Call it once the test reads nothing more.
func (c *rawClient) answerClose() {
	go func() {
		_ = c.ws.SetReadDeadline(time.Time{})
		for {
			if _, _, err := c.ws.ReadMessage(); err != nil {
				return
			}
		}
	}()
}
