package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/sandboxmgr"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/server"
)

func init() {
	register(suite{
		name: "server",
		about: "a no-op-sized tool call through the API server (WebSocket, MCP) vs the in-process Session.Call on the same " +
			"Docker sandbox (image: $SANDBOXD_TEST_IMAGE or sandboxd-test:latest)",
		run: runServerSuite,
	})
}

// noopCall is the no-op-sized call of every row: file_editor view of a
// one-line file (what the agent and docker suites call a no-op too).
var noopCall = map[string]any{"command": "view", "path": "/workspace/one.txt"}

func runServerSuite(ctx context.Context, e *env) ([]row, error) {
	bin, err := e.sandboxdBinary()
	if err != nil {
		return nil, err
	}
	image := os.Getenv("SANDBOXD_TEST_IMAGE")
	if image == "" {
		image = "sandboxd-test:latest"
	}
	quiet := slog.New(slog.NewTextHandler(e.log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	rt, err := docker.New(ctx, docker.Options{AgentBinary: bin, Logger: quiet,
		Labels: map[string]string{"sandboxd.bench.run": strconv.FormatInt(time.Now().UnixNano(), 36)}})
	if err != nil {
		return nil, fmt.Errorf("server suite (is the Docker engine up?): %w", err)
	}
	defer rt.Close()
	m, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: image}, Logger: quiet})
	if err != nil {
		return nil, err
	}
	token := auth.NewToken()
	srv, err := server.New(server.Options{Backend: sandboxmgr.New(m), OperatorToken: token, MCPImage: image, Logger: quiet})
	if err != nil {
		_ = m.Shutdown(ctx, false)
		return nil, err
	}
	hs := httptest.NewServer(srv.Handler())
	defer func() {
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = srv.Shutdown(sctx)
		hs.CloseClientConnections()
		hs.Close()
	}()

	// The WebSocket session; the direct baseline calls the same sandbox.
	c, err := client.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/v1/ws", token, client.Options{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	e.logf("creating the WebSocket session (image %s)", image)
	ws, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating a session (is %s built? make test-image): %w", image, err)
	}
	if obs, err := ws.Call(ctx, "file_editor", map[string]any{"command": "create", "path": "/workspace/one.txt", "file_text": "one line\n"}, nil); err != nil || obs.IsError {
		return nil, fmt.Errorf("preparing the file: %v %v", err, obs)
	}
	direct, err := m.Get(ws.ID)
	if err != nil {
		return nil, err
	}
	args, _ := json.Marshal(noopCall)

	// The MCP session (its own sandbox, the same image).
	e.logf("opening the MCP session")
	mc := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   hs.URL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token, http.DefaultTransport}},
	}, nil)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "file_editor", Arguments: map[string]any{"command": "create", "path": "/workspace/one.txt", "file_text": "one line\n"}}); err != nil || res.IsError {
		return nil, fmt.Errorf("preparing the MCP file: %v", err)
	}

	n := e.n(2000)
	check := func(isError bool, err error) error {
		if err != nil {
			return err
		}
		if isError {
			return fmt.Errorf("the no-op call failed")
		}
		return nil
	}
	e.logf("direct Session.Call x%d", n)
	base, err := measure(n, 50, func() error {
		obs, err := direct.Call(ctx, "file_editor", args, nil)
		return check(obs != nil && obs.IsError, err)
	})
	if err != nil {
		return nil, err
	}
	e.logf("WebSocket x%d", n)
	wsS, err := measure(n, 50, func() error {
		obs, err := ws.Call(ctx, "file_editor", noopCall, nil)
		return check(obs != nil && obs.IsError, err)
	})
	if err != nil {
		return nil, err
	}
	e.logf("MCP x%d", n)
	mcpS, err := measure(n, 50, func() error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "file_editor", Arguments: noopCall})
		return check(res != nil && res.IsError, err)
	})
	if err != nil {
		return nil, err
	}
	target, met := p50Below(2 * time.Millisecond)
	const baseline = "in-process sandbox.Session.Call, same sandbox"
	return []row{
		{scenario: "server: no-op call, in-process Session.Call (baseline)", s: base},
		{scenario: "server: no-op call via WebSocket JSON-RPC (Go client)", s: wsS, baseline: baseline, base: base, target: target, met: met},
		{scenario: "server: no-op call via MCP streamable HTTP (Go SDK client)", s: mcpS, baseline: baseline, base: base, target: target, met: met},
	}, nil
}

type bearerTransport struct {
	token string
	next  http.RoundTripper
}

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}
