package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/daemon"
)

func init() {
	register(suite{
		name: "server",
		about: "a no-op-sized tool call through the API server (WebSocket; MCP 2025-11-25 in a session, 2026-07-28 with a handle) " +
			"vs the in-process Session.Call on the same Docker sandbox (image: $SANDBOXD_TEST_IMAGE or sandboxd-test:latest)",
		run: runServerSuite,
	})
}

// noopCall is the no-op-sized call of every row: file_editor view of a
// one-line file (what the agent and docker suites call a no-op too).
var noopCall = map[string]any{"command": "view", "path": "/workspace/one.txt"}

func runServerSuite(ctx context.Context, e *env) ([]row, error) {
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	bin, image, quiet := su.bin, su.image, su.quiet
	// The direct path to the agent on, as serve has it (decision 0035).
	run := strconv.FormatInt(time.Now().UnixNano(), 36)
	ip, err := startInProcess(ctx, "server", bin, image, quiet, map[string]string{scopeKey: run}, time.Minute, nil)
	if err != nil {
		return nil, err
	}
	m := ip.d.Manager
	if rt, ok := ip.d.Runtime.(interface{ DirectOn() (bool, error) }); ok {
		if on, why := rt.DirectOn(); !on {
			e.logf("the direct path to the agent is off (%v): every row goes through the engine's attach stream", why)
		}
	}
	defer ip.stop()

	// The WebSocket session; the direct baseline calls the same sandbox.
	c, err := client.Dial(ctx, ip.ws, ip.token, client.Options{})
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
	if !direct.Direct() {
		e.logf("the session does not use the direct path: its rows measure the attach stream")
	}

	// The same call over the engine's attach stream (serve --direct=false):
	// a runtime with the direct path off and a session of its own.
	ipAttach, err := startInProcess(ctx, "server", bin, image, quiet, map[string]string{scopeKey: run + "-attach"}, time.Minute,
		func(c *daemon.Config) { c.Direct = false })
	if err != nil {
		return nil, err
	}
	defer ipAttach.stop()
	mAttach := ipAttach.d.Manager
	attach, err := mAttach.Create(ctx, sandbox.SessionOptions{})
	if err != nil {
		return nil, err
	}
	if obs, err := attach.Call(ctx, "file_editor", json.RawMessage(`{"command":"create","path":"/workspace/one.txt","file_text":"one line\n"}`), nil); err != nil || obs.IsError {
		return nil, fmt.Errorf("preparing the attach-stream file: %v %v", err, obs)
	}

	// MCP, revision 2025-11-25: one MCP session, its own sandbox (the same image).
	e.logf("opening the MCP session (2025-11-25)")
	mcpTransport := func() *mcp.StreamableClientTransport {
		return &mcp.StreamableClientTransport{
			Endpoint:   ip.http + "/mcp",
			HTTPClient: &http.Client{Transport: bearerTransport{ip.token, http.DefaultTransport}},
		}
	}
	mc := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil)
	cs, err := mc.Connect(ctx, mcpTransport(), &mcp.ClientSessionOptions{ProtocolVersion: legacyMCP})
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	if v := cs.InitializeResult().ProtocolVersion; v != legacyMCP {
		return nil, fmt.Errorf("the pinned MCP client negotiated %s, not %s", v, legacyMCP)
	}
	if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "file_editor", Arguments: map[string]any{"command": "create", "path": "/workspace/one.txt", "file_text": "one line\n"}}); err != nil || res.IsError {
		return nil, fmt.Errorf("preparing the MCP file: %v", err)
	}

	// MCP, revision 2026-07-28: the go-sdk client's default (stateless, no
	// MCP session); sandbox_open once, then every call names the handle.
	e.logf("opening a sandbox over stateless MCP (2026-07-28)")
	ms, err := mc.Connect(ctx, mcpTransport(), nil)
	if err != nil {
		return nil, err
	}
	defer ms.Close()
	if v := ms.InitializeResult().ProtocolVersion; v != modernMCP {
		return nil, fmt.Errorf("the default MCP client negotiated %s, not %s (does the server serve it?)", v, modernMCP)
	}
	handle, err := openSandbox(ctx, ms)
	if err != nil {
		return nil, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, _ = ms.CallTool(cctx, &mcp.CallToolParams{Name: "sandbox_close", Arguments: map[string]any{"sandbox": handle}})
	}()
	if res, err := ms.CallTool(ctx, &mcp.CallToolParams{Name: "file_editor", Arguments: map[string]any{"command": "create", "path": "/workspace/one.txt", "file_text": "one line\n", "sandbox": handle}}); err != nil || res.IsError {
		return nil, fmt.Errorf("preparing the stateless MCP file: %v %v", err, res)
	}
	handleCall := map[string]any{"sandbox": handle}
	for k, v := range noopCall {
		handleCall[k] = v
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
	// The direct path and the attach stream are measured interleaved, call
	// by call (alternating which goes first), so that both see the same
	// load on a shared machine.
	e.logf("in-process Session.Call, direct path and attach stream interleaved, x%d each", n)
	base, attachS, err := measurePair(n, 50, func() error {
		obs, err := direct.Call(ctx, "file_editor", args, nil)
		return check(obs != nil && obs.IsError, err)
	}, func() error {
		obs, err := attach.Call(ctx, "file_editor", args, nil)
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
	e.logf("MCP 2025-11-25 (session) x%d", n)
	mcpS, err := measure(n, 50, func() error {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "file_editor", Arguments: noopCall})
		return check(res != nil && res.IsError, err)
	})
	if err != nil {
		return nil, err
	}
	e.logf("MCP 2026-07-28 (handle) x%d", n)
	mcpH, err := measure(n, 50, func() error {
		res, err := ms.CallTool(ctx, &mcp.CallToolParams{Name: "file_editor", Arguments: handleCall})
		return check(res != nil && res.IsError, err)
	})
	if err != nil {
		return nil, err
	}
	// The same call asking for progress: the stateless path answers it as
	// an SSE stream (the only place its progress can go), any other as one
	// JSON response (decision 0033); this row is the stream's cost beside it.
	e.logf("MCP 2026-07-28 (handle, progress token: SSE) x%d", n)
	mcpHP, err := measure(n, 50, func() error {
		params := &mcp.CallToolParams{Name: "file_editor", Arguments: handleCall}
		params.SetProgressToken("bench")
		res, err := ms.CallTool(ctx, params)
		return check(res != nil && res.IsError, err)
	})
	if err != nil {
		return nil, err
	}
	target, met := p50Below(2 * time.Millisecond)
	const baseline = "in-process sandbox.Session.Call, same sandbox"
	return []row{
		{scenario: "server: no-op call, in-process Session.Call (baseline; direct path)", s: base},
		{scenario: "server: no-op call, in-process Session.Call over the attach stream (--direct=false)", s: attachS, baseline: baseline, base: base},
		{scenario: "server: no-op call via WebSocket JSON-RPC (Go client)", s: wsS, baseline: baseline, base: base, target: target, met: met},
		{scenario: "server: MCP no-op (2025-11-25, session)", s: mcpS, baseline: baseline, base: base, target: target, met: met},
		{scenario: "server: MCP no-op (2026-07-28, handle; plain JSON response)", s: mcpH, baseline: baseline, base: base, target: target, met: met},
		{scenario: "server: MCP no-op (2026-07-28, handle, progress token: SSE stream)", s: mcpHP, baseline: baseline, base: base, target: target, met: met},
	}, nil
}

// The two MCP revisions the server suite measures: the pinned legacy one
// (one sandbox per MCP session) and the go-sdk client's default (stateless,
// sandboxes named by handles).
const (
	legacyMCP = "2025-11-25"
	modernMCP = "2026-07-28"
)

// openSandbox calls sandbox_open and returns the handle from its
// structured result.
func openSandbox(ctx context.Context, cs *mcp.ClientSession) (string, error) {
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_open", Arguments: map[string]any{}})
	if err != nil {
		return "", fmt.Errorf("sandbox_open: %w", err)
	}
	if res.IsError {
		return "", fmt.Errorf("sandbox_open failed: %s", resultText(res))
	}
	sc, _ := res.StructuredContent.(map[string]any)
	h, _ := sc["sandbox"].(string)
	if !strings.HasPrefix(h, "sb_") {
		return "", fmt.Errorf("sandbox_open returned no handle: %v", res.StructuredContent)
	}
	return h, nil
}

func resultText(res *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			b.WriteString(t.Text)
		}
	}
	return b.String()
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

// measurePair measures a and b n times each, alternating call by call (and
// which of the two goes first), after warmup calls of each.
func measurePair(n, warmup int, a, b func() error) (sample, sample, error) {
	for range warmup {
		if err := a(); err != nil {
			return sample{}, sample{}, err
		}
		if err := b(); err != nil {
			return sample{}, sample{}, err
		}
	}
	da, db := make([]time.Duration, n), make([]time.Duration, n)
	timed := func(fn func() error, into []time.Duration, i int) error {
		start := time.Now()
		err := fn()
		into[i] = time.Since(start)
		return err
	}
	for i := range n {
		x, dx, y, dy := a, da, b, db
		if i%2 == 1 {
			x, dx, y, dy = b, db, a, da
		}
		if err := timed(x, dx, i); err != nil {
			return sample{}, sample{}, err
		}
		if err := timed(y, dy, i); err != nil {
			return sample{}, sample{}, err
		}
	}
	return summarize(da), summarize(db), nil
}

func summarize(ds []time.Duration) sample {
	slices.Sort(ds)
	n := len(ds)
	return sample{n: n, p50: ds[(n-1)/2], p99: ds[int(math.Ceil(float64(n)*0.99))-1]}
}
