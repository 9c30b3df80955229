package mcpapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/mcpapi"
	"github.com/sandboxd/sandboxd/server/servertest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	)
}

const initialize = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// The handler checks Host and Origin itself (and keeps the SDK's own
// DNS-rebinding check on): mounted without the server's middleware it still
// refuses a rebound Host or another origin, and starts no sandbox for them.
func TestHandlerChecksHostAndOrigin(t *testing.T) {
	m := servertest.NewFakeBackend()
	c, err := core.New(core.Options{Backend: m, OperatorToken: auth.NewToken(), MCPDefault: sandbox.SessionOptions{Image: "fake:latest"}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown(context.Background(), false)
	for _, tc := range []struct {
		name         string
		policy       auth.RequestPolicy
		host, origin string
		want         int
	}{
		{"rebound host", auth.RequestPolicy{}, "evil.example:7070", "", http.StatusForbidden},
		{"foreign origin", auth.RequestPolicy{}, "", "https://evil.example", http.StatusForbidden},
		{"null origin", auth.RequestPolicy{}, "", "null", http.StatusForbidden},
		{"allowed origin", auth.RequestPolicy{Origins: auth.OriginPolicy{Allowed: []string{"https://app.example"}}}, "", "https://app.example", http.StatusOK},
		{"allowed host", auth.RequestPolicy{Hosts: auth.HostPolicy{Allowed: []string{"proxy.example"}}}, "proxy.example", "", http.StatusOK},
		{"plain", auth.RequestPolicy{}, "", "", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := mcpapi.New(c, mcpapi.Options{Requests: tc.policy})
			hs := httptest.NewServer(h)
			defer hs.Close()
			defer h.Shutdown(context.Background())
			req, _ := http.NewRequest(http.MethodPost, hs.URL+mcpapi.Path, strings.NewReader(initialize))
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Accept", "application/json, text/event-stream")
			if tc.host != "" {
				req.Host = tc.host
			}
			if tc.origin != "" {
				req.Header.Set("Origin", tc.origin)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
		})
	}
}
