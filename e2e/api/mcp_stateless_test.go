package api

// MCP revision 2026-07-28 (issue 10) end to end: stateless clients get
// sandboxes through explicit handles (sandbox_open, a "sandbox" argument on
// every session tool, sandbox_close, an idle expiry), while clients pinned
// to 2025-11-25 keep one sandbox per MCP session, on the same /mcp path.
// Three real clients: the official Go SDK pinned to 2025-11-25, the same
// SDK on its default (2026-07-28), and mark3labs/mcp-go on its default
// (2026-07-28).

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	m3client "github.com/mark3labs/mcp-go/client"
	m3transport "github.com/mark3labs/mcp-go/client/transport"
	m3 "github.com/mark3labs/mcp-go/mcp"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server"
)

const (
	legacyVersion    = "2025-11-25"
	statelessVersion = "2026-07-28"
)

// sessionTools are the tools that run in a sandbox: on 2026-07-28 each
// takes the handle as its required "sandbox" argument.
var sessionTools = []string{"terminal", "file_editor", "grep", "glob"}

var handleRE = regexp.MustCompile(`^sb_[A-Za-z0-9_-]{32}$`)

// toolResult is a tools/call result, whichever client got it.
type toolResult struct {
	text       string
	isError    bool
	structured map[string]any
}

// listedTool is a tools/list entry, its input schema as plain JSON.
type listedTool struct {
	name       string
	properties map[string]any
	required   []string
}

// mcpClient hides the two client libraries behind what the tests need.
type mcpClient interface {
	// version is the negotiated protocol version.
	version() string
	call(ctx context.Context, name string, args map[string]any) (toolResult, error)
	// list is tools/list and its ttlMs.
	list(ctx context.Context) ([]listedTool, int64, error)
	close() error
}

// ---- the official Go SDK ----

type goSDKClient struct{ cs *mcp.ClientSession }

// connectGoSDK connects the official Go SDK client; version "" is its
// default (2026-07-28), anything else pins that version.
func connectGoSDK(ctx context.Context, t *testing.T, s *apiServer, version string) *goSDKClient {
	t.Helper()
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-gosdk", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   s.base + "/mcp",
		HTTPClient: &http.Client{Transport: bearer{s.token, http.DefaultTransport}},
		MaxRetries: -1,
	}, opts)
	if err != nil {
		t.Fatalf("go-sdk connect (%q): %v", version, err)
	}
	return &goSDKClient{cs}
}

func (c *goSDKClient) version() string { return c.cs.InitializeResult().ProtocolVersion }

func (c *goSDKClient) call(ctx context.Context, name string, args map[string]any) (toolResult, error) {
	res, err := c.cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		return toolResult{}, err
	}
	var b strings.Builder
	for _, ct := range res.Content {
		if tc, ok := ct.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	r := toolResult{text: b.String(), isError: res.IsError}
	r.structured, _ = res.StructuredContent.(map[string]any)
	return r, nil
}

func (c *goSDKClient) list(ctx context.Context) ([]listedTool, int64, error) {
	res, err := c.cs.ListTools(ctx, nil)
	if err != nil {
		return nil, 0, err
	}
	tools := make([]listedTool, 0, len(res.Tools))
	for _, tool := range res.Tools {
		lt, err := toListed(tool)
		if err != nil {
			return nil, 0, err
		}
		tools = append(tools, lt)
	}
	return tools, int64(res.TTLMs), nil
}

func (c *goSDKClient) close() error { return c.cs.Close() }

// ---- mark3labs/mcp-go ----

type mark3Client struct {
	c  *m3client.Client
	ir *m3.InitializeResult
}

// connectMark3 connects a mark3labs/mcp-go client on its default protocol
// (server/discover, 2026-07-28).
func connectMark3(ctx context.Context, t *testing.T, s *apiServer, opts ...m3client.ClientOption) *mark3Client {
	t.Helper()
	tr, err := m3transport.NewStreamableHTTP(s.base+"/mcp",
		m3transport.WithHTTPHeaders(map[string]string{"Authorization": "Bearer " + s.token}))
	if err != nil {
		t.Fatal(err)
	}
	c := m3client.NewClient(tr, opts...)
	if err := c.Start(ctx); err != nil {
		t.Fatalf("mark3labs start: %v", err)
	}
	var req m3.InitializeRequest
	req.Params.ClientInfo = m3.Implementation{Name: "e2e-mark3labs", Version: "1"}
	ir, err := c.Initialize(ctx, req)
	if err != nil {
		c.Close()
		t.Fatalf("mark3labs initialize: %v", err)
	}
	return &mark3Client{c: c, ir: ir}
}

func (c *mark3Client) version() string { return c.ir.ProtocolVersion }

func (c *mark3Client) call(ctx context.Context, name string, args map[string]any) (toolResult, error) {
	var req m3.CallToolRequest
	req.Params.Name = name
	req.Params.Arguments = args
	res, err := c.c.CallTool(ctx, req)
	if err != nil {
		return toolResult{}, err
	}
	var b strings.Builder
	for _, ct := range res.Content {
		if tc, ok := m3.AsTextContent(ct); ok {
			b.WriteString(tc.Text)
		}
	}
	r := toolResult{text: b.String(), isError: res.IsError}
	r.structured, _ = res.StructuredContent.(map[string]any)
	return r, nil
}

func (c *mark3Client) list(ctx context.Context) ([]listedTool, int64, error) {
	res, err := c.c.ListTools(ctx, m3.ListToolsRequest{})
	if err != nil {
		return nil, 0, err
	}
	tools := make([]listedTool, 0, len(res.Tools))
	for _, tool := range res.Tools {
		lt, err := toListed(tool)
		if err != nil {
			return nil, 0, err
		}
		tools = append(tools, lt)
	}
	ttl, _ := res.TTL()
	return tools, ttl, nil
}

func (c *mark3Client) close() error { return c.c.Close() }

// toListed reads a tool of either library through its JSON form.
func toListed(tool any) (listedTool, error) {
	b, err := json.Marshal(tool)
	if err != nil {
		return listedTool{}, err
	}
	var w struct {
		Name        string `json:"name"`
		InputSchema struct {
			Properties map[string]any `json:"properties"`
			Required   []string       `json:"required"`
		} `json:"inputSchema"`
	}
	if err := json.Unmarshal(b, &w); err != nil {
		return listedTool{}, err
	}
	req := slices.Clone(w.InputSchema.Required)
	sort.Strings(req)
	return listedTool{name: w.Name, properties: w.InputSchema.Properties, required: req}, nil
}

// ---- helpers ----

// statelessClients connects the two stateless clients, asserting that each
// negotiated 2026-07-28; they are closed when the test ends.
func statelessClients(ctx context.Context, t *testing.T, s *apiServer) map[string]mcpClient {
	t.Helper()
	clients := map[string]mcpClient{
		"go-sdk":    connectGoSDK(ctx, t, s, ""),
		"mark3labs": connectMark3(ctx, t, s),
	}
	for name, c := range clients {
		t.Cleanup(func() { _ = c.close() })
		if v := c.version(); v != statelessVersion {
			t.Fatalf("%s negotiated %q, want %q", name, v, statelessVersion)
		}
	}
	return clients
}

// mustCall calls a tool and fails the test on a protocol error.
func mustCall(ctx context.Context, t *testing.T, c mcpClient, name string, args map[string]any) toolResult {
	t.Helper()
	res, err := c.call(ctx, name, args)
	if err != nil {
		t.Fatalf("%s %v: %v", name, args, err)
	}
	return res
}

// mustOK calls a tool that must succeed.
func mustOK(ctx context.Context, t *testing.T, c mcpClient, name string, args map[string]any) toolResult {
	t.Helper()
	res := mustCall(ctx, t, c, name, args)
	if res.isError {
		t.Fatalf("%s %v: isError: %q", name, args, res.text)
	}
	return res
}

// withHandle is args plus the "sandbox" argument (none when h is "").
func withHandle(h string, args map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range args {
		out[k] = v
	}
	if h != "" {
		out["sandbox"] = h
	}
	return out
}

// openSandbox calls sandbox_open and returns the handle, checking the
// result's shape.
func openSandbox(ctx context.Context, t *testing.T, c mcpClient, wantIdle time.Duration) string {
	t.Helper()
	res := mustOK(ctx, t, c, "sandbox_open", map[string]any{})
	h, _ := res.structured["sandbox"].(string)
	if !handleRE.MatchString(h) {
		t.Fatalf("sandbox_open: handle %q (structured %v)", h, res.structured)
	}
	if !strings.Contains(res.text, h) {
		t.Fatalf("sandbox_open: the text does not mention the handle: %q", res.text)
	}
	if idle := res.structured["idle_timeout_seconds"]; idle != wantIdle.Seconds() {
		t.Fatalf("sandbox_open: idle_timeout_seconds %v, want %v", idle, wantIdle.Seconds())
	}
	return h
}

// closeSandbox calls sandbox_close on a live handle.
func closeSandbox(ctx context.Context, t *testing.T, c mcpClient, h string) {
	t.Helper()
	res := mustOK(ctx, t, c, "sandbox_close", map[string]any{"sandbox": h})
	if res.structured["sandbox"] != h || res.structured["closed"] != true {
		t.Fatalf("sandbox_close: structured %v", res.structured)
	}
}

func randomWord(t *testing.T) string {
	t.Helper()
	b := make([]byte, 9)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer("-", "x", "_", "y").Replace(base64.RawURLEncoding.EncodeToString(b))
}

// shellFileGrep is the acceptance scenario run through one sandbox: the
// shell keeps its state across calls, a file made with file_editor is
// found by grep. h is the handle ("" on a session-mode client).
func shellFileGrep(ctx context.Context, t *testing.T, c mcpClient, h string) {
	t.Helper()
	mustOK(ctx, t, c, "terminal", withHandle(h, map[string]any{"command": "cd /tmp"}))
	res := mustOK(ctx, t, c, "terminal", withHandle(h, map[string]any{"command": "pwd"}))
	if firstLine(res.text) != "/tmp" {
		t.Fatalf("pwd after cd /tmp: %q", res.text)
	}
	if res.structured["exit_code"] != float64(0) {
		t.Fatalf("pwd structured: %v", res.structured)
	}
	needle := "needle-" + randomWord(t)
	mustOK(ctx, t, c, "file_editor", withHandle(h, map[string]any{
		"command": "create", "path": "/workspace/found.txt", "file_text": "first line\n" + needle + "\n",
	}))
	res = mustOK(ctx, t, c, "grep", withHandle(h, map[string]any{"pattern": needle, "path": "/workspace"}))
	if !strings.Contains(res.text, "/workspace/found.txt") {
		t.Fatalf("grep %s: %q", needle, res.text)
	}
}

// ---- tests ----

// Each of the three clients gets a sandbox, keeps its shell state across
// calls, finds with grep a file it made with file_editor, and closing (the
// session on 2025-11-25, sandbox_close on 2026-07-28) removes the sandbox.
func TestMCPThreeClientsOneSandboxEach(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("go-sdk 2025-11-25 session", func(t *testing.T) {
		c := connectGoSDK(ctx, t, s, legacyVersion)
		defer func() { _ = c.close() }() // the test checks its sandboxes' end itself
		if v := c.version(); v != legacyVersion {
			t.Fatalf("negotiated %q, want %q", v, legacyVersion)
		}
		if c.cs.ID() == "" {
			t.Fatal("a 2025-11-25 client has no Mcp-Session-Id")
		}
		shellFileGrep(ctx, t, c, "")
		if n := containers(t); n != 1 {
			t.Fatalf("%d containers for one MCP session", n)
		}
		if err := c.close(); err != nil {
			t.Fatal(err)
		}
		waitNoContainers(t, "after the MCP session was closed")
	})

	stateless := func(t *testing.T, c mcpClient, want string) {
		t.Helper()
		defer func() { _ = c.close() }() // the test checks its sandboxes' end itself
		if v := c.version(); v != want {
			t.Fatalf("negotiated %q, want %q", v, want)
		}
		waitNoContainers(t, "before sandbox_open")
		h := openSandbox(ctx, t, c, 30*time.Minute)
		if n := containers(t); n != 1 {
			t.Fatalf("%d containers after one sandbox_open", n)
		}
		shellFileGrep(ctx, t, c, h)
		closeSandbox(ctx, t, c, h)
		waitNoContainers(t, "after sandbox_close")
	}
	t.Run("go-sdk 2026-07-28 stateless", func(t *testing.T) {
		c := connectGoSDK(ctx, t, s, "")
		if c.cs.ID() != "" {
			t.Errorf("a 2026-07-28 client has session id %q", c.cs.ID())
		}
		stateless(t, c, statelessVersion)
	})
	t.Run("mark3labs 2026-07-28 stateless", func(t *testing.T) {
		stateless(t, connectMark3(ctx, t, s), statelessVersion)
	})
}

// A made-up handle, a closed one and an expired one are each "unknown
// sandbox" on every tool, and never reach the sandbox that is open at the
// time (its marker file is seen by none of these calls). A call without a
// handle says to call sandbox_open.
//
// The sandboxes that must stay open run on a server with the default idle
// timeout (30 min), so only a hang loses them; the expired handle comes
// from a server of its own with a short one, and is probed once its
// container is gone (the event), next to a sandbox of that server that a
// call every few seconds keeps open well inside its idle timeout.
func TestMCPStatelessBadHandles(t *testing.T) {
	const defaultIdle = 30 * time.Minute // the server's MCP idle timeout unless set
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	clients := statelessClients(ctx, t, s)
	c := clients["go-sdk"]

	closed := openSandbox(ctx, t, c, defaultIdle)
	closeSandbox(ctx, t, c, closed)
	madeUp := "sb_" + base64.RawURLEncoding.EncodeToString(make([]byte, 24)) // well-formed, never minted
	live := newVictim(ctx, t, c, defaultIdle)
	probeBadHandles(ctx, t, clients, live, map[string]string{"made-up": madeUp, "closed": closed, "garbage": "not-a-handle"})
	// No handle at all.
	for cname, cl := range clients {
		for _, p := range badHandleProbes[:len(badHandleProbes)-1] {
			res := mustCall(ctx, t, cl, p.tool, p.args)
			if strings.Contains(res.text, live.marker) {
				t.Fatalf("%s: %s without a handle reached the live sandbox: %q", cname, p.tool, res.text)
			}
			if !res.isError || !strings.HasPrefix(res.text, `missing "sandbox"`) || !strings.Contains(res.text, "sandbox_open") {
				t.Errorf("%s: %s without a handle: isError=%v %q", cname, p.tool, res.isError, res.text)
			}
		}
	}
	live.touch()
	closeSandbox(ctx, t, c, live.handle)
	waitNoContainers(t, "after closing the live sandbox")

	// An expired handle: opened on a server of its own, then left without
	// a call until the server reaps its sandbox (the event waited on). Its
	// idle clock starts once it is ready, after the open call began and
	// before the call answered: it is reaped no sooner than idle after
	// opened (sound whatever the load, unlike a bound taken from the answer).
	// The idle timeout is also that of the sandbox open while the expired
	// handle is probed, touched after each probe: long enough that only a
	// hang lets it expire between two calls.
	const idle = 10 * time.Second
	se := startServerIn(t, testScope(t)+"-expiry", func(o *server.Options) { o.MCPSessionTimeout = idle })
	eclients := statelessClients(ctx, t, se)
	opened := time.Now()
	expired := openSandbox(ctx, t, eclients["mark3labs"], idle)
	for deadline := time.Now().Add(idle + time.Minute); containers(t) != 0; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d containers %v after the open call on a sandbox left idle (idle timeout %v)", containers(t), time.Since(opened), idle)
		}
	}
	if d := time.Since(opened); d < idle {
		t.Fatalf("a sandbox reaped %v after its open call began, before the idle timeout %v", d, idle)
	}
	elive := newVictim(ctx, t, eclients["go-sdk"], idle)
	probeBadHandles(ctx, t, eclients, elive, map[string]string{"expired": expired})
	closeSandbox(ctx, t, eclients["go-sdk"], elive.handle)
	waitNoContainers(t, "after closing the sandbox open next to the expired one")
}

// victim is the sandbox open while bad handles are probed: none of the
// probes may reach it, and it must still be there after each.
type victim struct {
	handle, marker string
	touch          func()
}

// newVictim opens a sandbox with a marker file.
func newVictim(ctx context.Context, t *testing.T, c mcpClient, idle time.Duration) victim {
	t.Helper()
	v := victim{handle: openSandbox(ctx, t, c, idle), marker: "marker-" + randomWord(t)}
	mustOK(ctx, t, c, "file_editor", withHandle(v.handle, map[string]any{
		"command": "create", "path": "/workspace/marker.txt", "file_text": v.marker + "\n",
	}))
	v.touch = func() {
		t.Helper()
		res := mustOK(ctx, t, c, "terminal", withHandle(v.handle, map[string]any{"command": "cat /workspace/marker.txt"}))
		if !strings.Contains(res.text, v.marker) {
			t.Fatalf("the live sandbox lost its marker: %q", res.text)
		}
	}
	return v
}

// badHandleProbes are the calls made with each bad handle (sandbox_close
// last: it takes no handle-free form).
var badHandleProbes = []struct {
	tool string
	args map[string]any
}{
	{"terminal", map[string]any{"command": "cat /workspace/marker.txt; hostname"}},
	{"file_editor", map[string]any{"command": "view", "path": "/workspace/marker.txt"}},
	{"grep", map[string]any{"pattern": "marker-", "path": "/workspace"}},
	{"glob", map[string]any{"pattern": "*.txt", "path": "/workspace"}},
	{"sandbox_close", map[string]any{}},
}

// probeBadHandles makes each probe with each bad handle through each
// client: each is "unknown sandbox" and none reaches the victim, which is
// touched after each.
func probeBadHandles(ctx context.Context, t *testing.T, clients map[string]mcpClient, v victim, bad map[string]string) {
	t.Helper()
	for cname, cl := range clients {
		for what, h := range bad {
			for _, p := range badHandleProbes {
				// An expired handle may vanish a moment after its
				// container: poll (bounded) until it reads as unknown.
				var res toolResult
				for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
					res = mustCall(ctx, t, cl, p.tool, withHandle(h, p.args))
					if strings.Contains(res.text, v.marker) || strings.Contains(res.text, "marker.txt") {
						t.Fatalf("%s: %s with the %s handle reached the live sandbox: %q", cname, p.tool, what, res.text)
					}
					if !res.isError {
						t.Fatalf("%s: %s with the %s handle %q succeeded: %q", cname, p.tool, what, h, res.text)
					}
					v.touch()
					if strings.HasPrefix(res.text, "unknown sandbox") || what != "expired" || time.Now().After(deadline) {
						break
					}
				}
				if !strings.HasPrefix(res.text, "unknown sandbox") {
					t.Errorf("%s: %s with the %s handle: %q, want it to start with \"unknown sandbox\"", cname, p.tool, what, res.text)
				}
			}
		}
	}
}

// Two stateless clients' sandboxes are apart: different containers, and a
// file written through one handle is not seen through the other.
func TestMCPStatelessSandboxesApart(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	clients := statelessClients(ctx, t, s)
	a, b := clients["go-sdk"], clients["mark3labs"]
	ha := openSandbox(ctx, t, a, 30*time.Minute)
	hb := openSandbox(ctx, t, b, 30*time.Minute)
	if ha == hb {
		t.Fatalf("two sandbox_open calls gave the same handle %q", ha)
	}
	if n := containers(t); n != 2 {
		t.Fatalf("%d containers for two sandboxes", n)
	}
	idA, idB := containerID(ctx, t, a, ha), containerID(ctx, t, b, hb)
	if idA == idB {
		t.Fatalf("both handles run in container %s", idA)
	}

	secret := "only-in-a-" + randomWord(t)
	mustOK(ctx, t, a, "file_editor", withHandle(ha, map[string]any{
		"command": "create", "path": "/workspace/only-a.txt", "file_text": secret + "\n",
	}))
	// Through a's handle: there. Through b's handle (from either client): not.
	if res := mustOK(ctx, t, b, "file_editor", withHandle(ha, map[string]any{"command": "view", "path": "/workspace/only-a.txt"})); !strings.Contains(res.text, secret) {
		t.Fatalf("a's file through a's handle (other client): %q", res.text)
	}
	for cname, cl := range clients {
		res := mustCall(ctx, t, cl, "file_editor", withHandle(hb, map[string]any{"command": "view", "path": "/workspace/only-a.txt"}))
		if !res.isError || strings.Contains(res.text, secret) {
			t.Fatalf("%s: a's file through b's handle: isError=%v %q", cname, res.isError, res.text)
		}
		if id := containerID(ctx, t, cl, hb); id != idB {
			t.Fatalf("%s: b's handle runs in %s, not %s", cname, id, idB)
		}
		res = mustOK(ctx, t, cl, "terminal", withHandle(hb, map[string]any{"command": "ls -a /workspace; grep -rl " + secret + " /workspace /tmp"}))
		if strings.Contains(res.text, "only-a.txt") {
			t.Fatalf("%s: b's sandbox shows a's file or is not b: %q", cname, res.text)
		}
		res = mustOK(ctx, t, cl, "glob", withHandle(hb, map[string]any{"pattern": "**/*.txt", "path": "/workspace"}))
		if strings.Contains(res.text, "only-a.txt") {
			t.Fatalf("%s: glob in b finds a's file: %q", cname, res.text)
		}
	}
	// Closing one leaves the other.
	closeSandbox(ctx, t, a, ha)
	for deadline := time.Now().Add(2 * time.Minute); containers(t) != 1; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d containers after closing one of two", containers(t))
		}
	}
	if id := containerID(ctx, t, b, hb); id != idB {
		t.Fatalf("b after a's close runs in %s, not %s", id, idB)
	}
	closeSandbox(ctx, t, b, hb)
	waitNoContainers(t, "after closing both sandboxes")
}

// The stateless tools/list is the same for both stateless clients, may be
// cached (ttlMs > 0), has sandbox_open and sandbox_close, and each session
// tool has exactly its session-mode parameters plus a required string
// "sandbox"; the session-mode list has no "sandbox" anywhere.
func TestMCPStatelessToolList(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	clients := statelessClients(ctx, t, s)

	lists := map[string]map[string]listedTool{}
	for cname, c := range clients {
		tools, ttl, err := c.list(ctx)
		if err != nil {
			t.Fatalf("%s: tools/list: %v", cname, err)
		}
		if ttl <= 0 {
			t.Errorf("%s: tools/list ttlMs %d, want > 0", cname, ttl)
		}
		byName := map[string]listedTool{}
		for _, tool := range tools {
			byName[tool.name] = tool
		}
		lists[cname] = byName
	}
	if n := containers(t); n != 0 {
		t.Fatalf("listing tools made %d containers", n)
	}
	gs, m3l := lists["go-sdk"], lists["mark3labs"]
	if fmt.Sprint(names(gs)) != fmt.Sprint(names(m3l)) {
		t.Fatalf("the two stateless clients see different tools: %v vs %v", names(gs), names(m3l))
	}
	for name, tool := range gs {
		other := m3l[name]
		if js(tool.properties) != js(other.properties) || fmt.Sprint(tool.required) != fmt.Sprint(other.required) {
			t.Errorf("%s differs between the clients:\n go-sdk    %s %v\n mark3labs %s %v", name, js(tool.properties), tool.required, js(other.properties), other.required)
		}
	}
	for _, name := range []string{"sandbox_open", "sandbox_close"} {
		if _, ok := gs[name]; !ok {
			t.Fatalf("the stateless tools/list lacks %s: %v", name, names(gs))
		}
	}
	if len(gs["sandbox_open"].required) != 0 || len(gs["sandbox_open"].properties) != 0 {
		t.Errorf("sandbox_open takes arguments: %s required %v", js(gs["sandbox_open"].properties), gs["sandbox_open"].required)
	}
	if !hasHandleArg(gs["sandbox_close"]) {
		t.Errorf("sandbox_close: no required string \"sandbox\": %s %v", js(gs["sandbox_close"].properties), gs["sandbox_close"].required)
	}

	// The session mode's list: the same session tools, without "sandbox".
	legacy := connectGoSDK(ctx, t, s, legacyVersion)
	if v := legacy.version(); v != legacyVersion {
		t.Fatalf("negotiated %q, want %q", v, legacyVersion)
	}
	ltools, _, err := legacy.list(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lm := map[string]listedTool{}
	for _, tool := range ltools {
		lm[tool.name] = tool
		if _, ok := tool.properties["sandbox"]; ok || slices.Contains(tool.required, "sandbox") {
			t.Errorf("session mode: %s has a \"sandbox\" argument: %s", tool.name, js(tool.properties))
		}
		if tool.name == "sandbox_open" || tool.name == "sandbox_close" {
			t.Errorf("session mode lists %s", tool.name)
		}
	}
	for _, name := range sessionTools {
		st, ok := gs[name]
		if !ok {
			t.Fatalf("the stateless tools/list lacks %s: %v", name, names(gs))
		}
		if !hasHandleArg(st) {
			t.Errorf("stateless %s: no required string \"sandbox\": %s %v", name, js(st.properties), st.required)
		}
		lt, ok := lm[name]
		if !ok {
			t.Fatalf("the session-mode tools/list lacks %s: %v", name, names(lm))
		}
		props := map[string]any{}
		for k, v := range st.properties {
			if k != "sandbox" {
				props[k] = v
			}
		}
		req := slices.DeleteFunc(slices.Clone(st.required), func(r string) bool { return r == "sandbox" })
		if js(props) != js(lt.properties) || fmt.Sprint(req) != fmt.Sprint(lt.required) {
			t.Errorf("%s: stateless parameters minus \"sandbox\" differ from the session mode's:\n stateless %s %v\n session   %s %v", name, js(props), req, js(lt.properties), lt.required)
		}
	}
	if err := legacy.close(); err != nil {
		t.Fatal(err)
	}
	waitNoContainers(t, "after the session-mode client closed")
}

// firstLine is the first line of a terminal result (the command's output
// before the terminal's exit code and directory notes).
func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return strings.TrimSpace(line)
}

// containerID is the id of the container a handle's commands run in (from
// the container's own mounts), checked to be one of this run's labelled
// containers: all sandboxes have the same hostname.
func containerID(ctx context.Context, t *testing.T, c mcpClient, h string) string {
	t.Helper()
	res := mustOK(ctx, t, c, "terminal", withHandle(h, map[string]any{
		"command": `grep -o 'containers/[0-9a-f]\{64\}' /proc/self/mountinfo | head -1 | cut -d/ -f2`,
	}))
	id := firstLine(res.text)
	if len(id) != 64 {
		t.Fatalf("no container id in %q", res.text)
	}
	f := filters.NewArgs(filters.Arg("label", labelRun+"="+runID), filters.Arg("label", sandbox.LabelManaged+"=true"), filters.Arg("id", id))
	ctrs, err := engine.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrs) != 1 {
		t.Fatalf("container %s (handle %s) is not one of this run's sandboxes", id, h)
	}
	return id
}

func hasHandleArg(tool listedTool) bool {
	p, _ := tool.properties["sandbox"].(map[string]any)
	return p != nil && p["type"] == "string" && slices.Contains(tool.required, "sandbox")
}

func names(m map[string]listedTool) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func js(v any) string {
	b, _ := json.Marshal(v) // map keys come out sorted
	return string(b)
}
