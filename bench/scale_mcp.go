package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The time-to-interactive samples through MCP, one real MCP client per
// sample (the official go-sdk client), beside the WebSocket ones.

// mcpTransport is a streamable-HTTP transport to the server's /mcp with
// the operator token.
func (s *harnessServer) mcpTransport() *mcp.StreamableClientTransport {
	return &mcp.StreamableClientTransport{
		Endpoint:   s.http + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{s.token, http.DefaultTransport}},
	}
}

// mcpSessionTTI is one MCP session of revision 2025-11-25 (one sandbox per
// MCP session): initialize, then the first terminal echo answered. The
// clock covers both, as the sandbox is the MCP session's; closing the MCP
// session (after the clock) closes the sandbox.
func (s *harnessServer) mcpSessionTTI(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	mc := mcp.NewClient(&mcp.Implementation{Name: "bench-scale", Version: "1"}, nil)
	start := time.Now()
	cs, err := mc.Connect(ctx, s.mcpTransport(), &mcp.ClientSessionOptions{ProtocolVersion: legacyMCP})
	if err != nil {
		return 0, fmt.Errorf("mcp initialize: %w", err)
	}
	markCreated(ctx, start)
	defer func() { _ = cs.Close() }()
	if v := cs.InitializeResult().ProtocolVersion; v != legacyMCP {
		return 0, fmt.Errorf("mcp: negotiated %s, not %s", v, legacyMCP)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo ready"}})
	d := time.Since(start)
	if err := echoAnswered(res, err); err != nil {
		return 0, err
	}
	return d, nil
}

// mcpHandleTTI is one sandbox opened by handle over stateless MCP
// (2026-07-28, the go-sdk client's default): the client is connected
// before the clock starts (as the WebSocket rows dial first), then
// sandbox_open and the first terminal echo naming the handle;
// sandbox_close after the clock.
func (s *harnessServer) mcpHandleTTI(ctx context.Context) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	mc := mcp.NewClient(&mcp.Implementation{Name: "bench-scale", Version: "1"}, nil)
	cs, err := mc.Connect(ctx, s.mcpTransport(), nil)
	if err != nil {
		return 0, fmt.Errorf("mcp connect: %w", err)
	}
	defer func() { _ = cs.Close() }()
	if v := cs.InitializeResult().ProtocolVersion; v != modernMCP {
		return 0, fmt.Errorf("mcp: negotiated %s, not %s", v, modernMCP)
	}
	start := time.Now()
	h, err := openSandbox(ctx, cs)
	if err != nil {
		return 0, err
	}
	markCreated(ctx, start)
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		_, _ = cs.CallTool(cctx, &mcp.CallToolParams{Name: "sandbox_close", Arguments: map[string]any{"sandbox": h}})
	}()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "echo ready", "sandbox": h}})
	d := time.Since(start)
	if err := echoAnswered(res, err); err != nil {
		return 0, err
	}
	return d, nil
}

func echoAnswered(res *mcp.CallToolResult, err error) error {
	switch {
	case err != nil:
		return fmt.Errorf("echo: %w", err)
	case res.IsError || !strings.Contains(resultText(res), "ready"):
		return fmt.Errorf("echo: %q", resultText(res))
	}
	return nil
}
