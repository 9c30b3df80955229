package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

// A retried create returns the session's token: the Go client's default
// idempotency key is a fresh random secret per create, not derived from its
// request ids (which every client attached to a session sees as call_id).
func TestCreateIdempotencyKeyIsRandom(t *testing.T) {
	type seen struct{ id, key string }
	got := make(chan seen, 4)
	up := websocket.Upgrader{}
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			var req wsproto.Request
			if err := ws.ReadJSON(&req); err != nil {
				return
			}
			var p wsproto.CreateParams
			_ = json.Unmarshal(req.Params, &p)
			got <- seen{string(req.ID), p.IdempotencyKey}
			res, _ := json.Marshal(wsproto.CreateResult{SessionID: "s" + p.IdempotencyKey[:4], SessionToken: "t", NextSeq: 1})
			_ = ws.WriteJSON(wsproto.Response{JSONRPC: "2.0", ID: req.ID, Result: res})
		}
	}))
	defer hs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http"), "token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var keys []seen
	for range 2 {
		if _, err := c.CreateSession(ctx, client.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, <-got)
	}
	for _, k := range keys {
		id := strings.Trim(k.id, `"`)
		prefix, _, _ := strings.Cut(id, "-")
		if len(k.key) < 32 || strings.Contains(k.key, prefix) {
			t.Fatalf("idempotency key %q (request id %s): want 128 random bits unrelated to the ids", k.key, id)
		}
	}
	if keys[0].key == keys[1].key {
		t.Fatal("two creates share an idempotency key")
	}
}
