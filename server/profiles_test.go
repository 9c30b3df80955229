package server_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/wsproto"
)

// testProfiles are two profiles that differ in every way a test reads.
var testProfiles = map[string]sandbox.SessionOptions{
	"fuzz": {Image: "fuzz:1", Env: map[string]string{"X": "fuzz", "KEEP": "1"}, Cwd: "/src", Limits: sandbox.Limits{Memory: 2 << 30}},
	"web":  {Image: "web:1", Env: map[string]string{"X": "web"}, Network: sandbox.NetworkBridge, IdleTimeout: time.Hour},
}

func withProfiles(profiles map[string]sandbox.SessionOptions) func(*server.Options) {
	return func(o *server.Options) { o.Profiles = profiles }
}

// fakeOf returns the fake sandbox of a session id.
func fakeOf(t *testing.T, ts *servertest.Server, id string) *servertest.FakeSandbox {
	t.Helper()
	sb := ts.Backend.Sandbox(id)
	require.NotNil(t, sb, "session %s", id)
	return sb
}

// session.create names a profile; its own fields overlay the profile's.
func TestCreateWithProfile(t *testing.T) {
	ts := servertest.Start(t, withProfiles(testProfiles))
	c := dial(t, ts)
	var r wsproto.CreateResult
	c.ok(1, wsproto.MethodSessionCreate, map[string]any{"profile": "fuzz"}, &r)
	assert.Equal(t, testProfiles["fuzz"], fakeOf(t, ts, r.SessionID).Options(), "the profile's options, as written")

	c.ok(2, wsproto.MethodSessionCreate, map[string]any{"profile": "fuzz", "env": map[string]string{"X": "mine"}, "cwd": "/tmp",
		"limits": map[string]any{"cpus": 2}, "idle_timeout": 60}, &r)
	assert.Equal(t, sandbox.SessionOptions{Image: "fuzz:1", Env: map[string]string{"X": "mine", "KEEP": "1"}, Cwd: "/tmp",
		Limits: sandbox.Limits{Memory: 2 << 30, CPUs: 2}, IdleTimeout: time.Minute}, fakeOf(t, ts, r.SessionID).Options(),
		"the request's fields win, each limit too; env merges")

	c.ok(3, wsproto.MethodSessionCreate, map[string]any{"profile": "web", "image": "other:2"}, &r)
	o := fakeOf(t, ts, r.SessionID).Options()
	assert.Equal(t, "other:2", o.Image)
	assert.Equal(t, sandbox.NetworkBridge, o.Network)
	assert.Equal(t, time.Hour, o.IdleTimeout)

	// No profile and no default profile: the server's defaults alone.
	c.ok(4, wsproto.MethodSessionCreate, map[string]any{}, &r)
	assert.Equal(t, "fake:latest", fakeOf(t, ts, r.SessionID).Options().Image, "the fake backend's default")
	assert.Empty(t, fakeOf(t, ts, r.SessionID).Options().Env)
}

// With a "default" profile, a create that names none gets it, and so does
// /mcp; --mcp-image is not used then.
func TestDefaultProfile(t *testing.T) {
	profiles := map[string]sandbox.SessionOptions{"default": {Image: "dflt:1", Env: map[string]string{"D": "1"}}, "fuzz": testProfiles["fuzz"]}
	ts := servertest.Start(t, withProfiles(profiles))
	c := dial(t, ts)
	var r wsproto.CreateResult
	c.ok(1, wsproto.MethodSessionCreate, map[string]any{}, &r)
	assert.Equal(t, profiles["default"], fakeOf(t, ts, r.SessionID).Options())
	c.ok(2, wsproto.MethodSessionCreate, map[string]any{"profile": "default"}, &r)
	assert.Equal(t, profiles["default"], fakeOf(t, ts, r.SessionID).Options())

	cs, err := mcpConnectAt(t, ts, "/mcp", "2025-11-25")
	require.NoError(t, err)
	defer cs.Close()
	sb := mcpSandbox(t, ts, cs)
	assert.Equal(t, "dflt:1", sb.Options().Image, "/mcp serves the default profile, not --mcp-image")

	h := openHandle(t, mcpConnectModernAt(t, ts, "/mcp/default"))
	require.NotEmpty(t, h)
	for _, s := range ts.Backend.List() {
		assert.Equal(t, "dflt:1", s.Info().Image, "/mcp/default is /mcp")
	}
}

// An unknown profile is an invalid-params error that lists the defined ones.
func TestCreateUnknownProfile(t *testing.T) {
	ts := servertest.Start(t, withProfiles(testProfiles))
	c := dial(t, ts)
	m := c.call(1, wsproto.MethodSessionCreate, map[string]any{"profile": "nope"})
	require.NotNil(t, m.Error)
	assert.Equal(t, wsproto.CodeInvalidParams, m.Error.Code)
	assert.Equal(t, `unknown profile "nope" (defined: fuzz, web)`, m.Error.Message)
	assert.Zero(t, ts.Backend.Created(), "nothing started")

	// Through the Go client.
	cl, err := client.Dial(context.Background(), ts.URL, ts.Token, client.Options{})
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.CreateSession(context.Background(), client.CreateOptions{Profile: "Fuzz"})
	require.ErrorContains(t, err, `unknown profile "Fuzz" (defined: fuzz, web)`)

	// A server without profiles says so.
	bare := servertest.Start(t, nil)
	m = dial(t, bare).call(1, wsproto.MethodSessionCreate, map[string]any{"profile": "fuzz"})
	require.NotNil(t, m.Error)
	assert.Equal(t, `unknown profile "fuzz": this server defines no profiles`, m.Error.Message)
}

// --allow-image applies to a request's image, never to a profile's own
// (the operator chose it).
func TestProfileImageIsAllowed(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) {
		o.Profiles = testProfiles
		o.AllowedImages = []string{"ok:*"}
	})
	c := dial(t, ts)
	var r wsproto.CreateResult
	c.ok(1, wsproto.MethodSessionCreate, map[string]any{"profile": "fuzz"}, &r)
	assert.Equal(t, "fuzz:1", fakeOf(t, ts, r.SessionID).Options().Image)
	assert.Equal(t, wsproto.CodePermission, c.code(2, wsproto.MethodSessionCreate, map[string]any{"profile": "fuzz", "image": "evil:1"}))
	c.ok(3, wsproto.MethodSessionCreate, map[string]any{"profile": "fuzz", "image": "ok:2"}, &r)
	assert.Equal(t, "ok:2", fakeOf(t, ts, r.SessionID).Options().Image)

	// An MCP endpoint's profile image is the operator's too.
	cs, err := mcpConnectAt(t, ts, "/mcp/web", "2025-11-25")
	require.NoError(t, err)
	defer cs.Close()
	assert.Equal(t, "web:1", mcpSandbox(t, ts, cs).Options().Image)
}

func mcpConnectAt(t *testing.T, ts *servertest.Server, path, version string) (*mcp.ClientSession, error) {
	t.Helper()
	cl := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	transport := &mcp.StreamableClientTransport{
		Endpoint:   ts.Base + path,
		HTTPClient: &http.Client{Transport: bearer{ts.Token, http.DefaultTransport}},
		MaxRetries: -1,
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return cl.Connect(ctx, transport, &mcp.ClientSessionOptions{ProtocolVersion: version})
}

func mcpConnectModernAt(t *testing.T, ts *servertest.Server, path string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcpConnectAt(t, ts, path, "")
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	require.Equal(t, "2026-07-28", cs.InitializeResult().ProtocolVersion)
	return cs
}

// mcpSandbox is the fake sandbox of a legacy MCP session: the one whose
// terminal answers its call.
func mcpSandbox(t *testing.T, ts *servertest.Server, cs *mcp.ClientSession) *servertest.FakeSandbox {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "count", Arguments: map[string]any{}})
	require.NoError(t, err)
	require.False(t, res.IsError)
	var found *servertest.FakeSandbox
	for _, s := range ts.Backend.List() {
		if sb := s.(*servertest.FakeSandbox); sb.Counts() > 0 && sb.CreateOptions().IdleTimeout == sandbox.NoIdleTimeout && found == nil {
			found = sb
		}
	}
	require.NotNil(t, found, "the MCP session's sandbox")
	return found
}

// /mcp/NAME serves profile NAME to legacy MCP sessions: the sandbox has
// exactly the profile's options (so a pool of the profile serves it), and
// MCP's own idle timeout beside them.
func TestMCPProfileEndpoint(t *testing.T) {
	ts := servertest.Start(t, withProfiles(testProfiles))
	for _, name := range []string{"fuzz", "web"} {
		cs, err := mcpConnectAt(t, ts, "/mcp/"+name, "2025-11-25")
		require.NoError(t, err)
		sb := mcpSandbox(t, ts, cs)
		want := testProfiles[name]
		want.IdleTimeout = sandbox.NoIdleTimeout // in force: the MCP session's end closes it
		assert.Equal(t, want, sb.Options(), name)
		assert.Equal(t, sandbox.CreateOptions{IdleTimeout: sandbox.NoIdleTimeout, Profile: name}, sb.CreateOptions(), name+": the profile goes with the create (its pool serves only it)")
		require.NoError(t, cs.Close())
		waitFor(t, func() bool { return ts.Backend.Live() == 0 }, "the MCP session's end closes its sandbox")
	}
	// /mcp without a default profile: --mcp-image.
	cs, err := mcpConnectAt(t, ts, "/mcp", "2025-11-25")
	require.NoError(t, err)
	defer cs.Close()
	assert.Equal(t, sandbox.SessionOptions{Image: "fake:latest", IdleTimeout: sandbox.NoIdleTimeout}, mcpSandbox(t, ts, cs).Options())
}

// The stateless path of /mcp/NAME opens sandboxes of profile NAME, lists
// the profile's tools (Options.MCPTools, the seam for skills), and a
// handle works only at the endpoint that opened it.
func TestMCPStatelessProfileEndpoint(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]sandbox.SessionOptions{}
	ts := servertest.Start(t, func(o *server.Options) {
		o.Profiles = testProfiles
		o.MCPSessionTimeout = 7 * time.Minute
		o.MCPTools = func(profile string, opts sandbox.SessionOptions) []tools.Definition {
			mu.Lock()
			asked[profile] = opts
			mu.Unlock()
			d := tools.Definition{Name: "only_" + profile, Description: "a tool of " + profile, InputSchema: tools.SchemaFor[struct{}]()}
			if profile == "" {
				d.Name = "only_default"
			}
			return []tools.Definition{d}
		}
	})
	fuzz := mcpConnectModernAt(t, ts, "/mcp/fuzz")
	web := mcpConnectModernAt(t, ts, "/mcp/web")
	def := mcpConnectModernAt(t, ts, "/mcp")
	ctx := context.Background()
	for cs, want := range map[*mcp.ClientSession]string{fuzz: "only_fuzz", web: "only_web", def: "only_default"} {
		list, err := cs.ListTools(ctx, nil)
		require.NoError(t, err)
		var names []string
		for _, tool := range list.Tools {
			names = append(names, tool.Name)
		}
		assert.Equal(t, []string{"sandbox_open", "sandbox_close", want}, names)
	}
	mu.Lock()
	assert.Equal(t, map[string]sandbox.SessionOptions{"fuzz": testProfiles["fuzz"], "web": testProfiles["web"], "": {Image: "fake:latest"}}, asked)
	mu.Unlock()

	h := openHandle(t, fuzz)
	all := ts.Backend.List()
	require.Len(t, all, 1)
	sb := ts.Backend.Sandbox(all[0].ID())
	want := testProfiles["fuzz"]
	want.IdleTimeout = 7 * time.Minute
	assert.Equal(t, want, sb.Options(), "the profile's options; the MCP idle timeout in force")
	assert.Equal(t, sandbox.CreateOptions{IdleTimeout: 7 * time.Minute, Profile: "fuzz"}, sb.CreateOptions())

	res, text := callText(t, web, "sandbox_close", map[string]any{"sandbox": h})
	assert.True(t, res.IsError)
	assert.Equal(t, "this sandbox was opened at /mcp/fuzz, not /mcp/web: call its tools there (its tools are that endpoint's)", text)
	assert.Equal(t, 1, ts.Backend.Live(), "not closed from another endpoint")
	res, text = callText(t, fuzz, "sandbox_close", map[string]any{"sandbox": h})
	require.False(t, res.IsError, text)
}

// An unknown /mcp/NAME is a 404 whose JSON-RPC error names the endpoints
// there are; the MCP SDK client shows that message. Without the operator
// token it is a 401 like /mcp (the profiles' names are not for anyone).
func TestMCPUnknownProfile(t *testing.T) {
	ts := servertest.Start(t, withProfiles(testProfiles))
	for _, version := range []string{"2025-11-25", ""} {
		_, err := mcpConnectAt(t, ts, "/mcp/nope", version)
		require.Error(t, err, version)
		assert.Contains(t, err.Error(), `no MCP endpoint at /mcp/nope: unknown profile "nope" (defined: fuzz, web); the endpoints here are /mcp, /mcp/fuzz, /mcp/web`, version)
	}
	assert.Zero(t, ts.Backend.Created())

	type answer struct {
		status      int
		contentType string
	}
	post := func(path, token string) (answer, []byte) {
		req, err := http.NewRequest(http.MethodPost, ts.Base+path, strings.NewReader(`{"jsonrpc":"2.0","id":"init-1","method":"initialize","params":{}}`))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return answer{resp.StatusCode, resp.Header.Get("Content-Type")}, body
	}
	for _, path := range []string{"/mcp/nope", "/mcp/", "/mcp/fuzz/x", "/mcp/default"} {
		resp, body := post(path, ts.Token)
		assert.Equal(t, http.StatusNotFound, resp.status, path)
		assert.Equal(t, "application/json", resp.contentType, path)
		var msg struct {
			JSONRPC string          `json:"jsonrpc"`
			ID      json.RawMessage `json:"id"`
			Error   wsproto.Error   `json:"error"`
		}
		require.NoError(t, json.Unmarshal(body, &msg), string(body))
		assert.Equal(t, "2.0", msg.JSONRPC)
		assert.JSONEq(t, `"init-1"`, string(msg.ID), "the request's id")
		assert.Equal(t, wsproto.CodeNotFound, msg.Error.Code)
		assert.Contains(t, msg.Error.Message, "the endpoints here are /mcp, /mcp/fuzz, /mcp/web", path)

		resp, body = post(path, "")
		assert.Equal(t, http.StatusUnauthorized, resp.status, path)
		assert.NotContains(t, string(body), "fuzz")
	}
	resp, _ := post("/mcp/fuzz", "not-the-token-at-all-0123456789")
	assert.Equal(t, http.StatusUnauthorized, resp.status)
}

// The image's own user (root included) is the operator's to allow: a
// profile of the config may set it, a request may not, not even over a
// profile that sets it. Editable paths come from either.
func TestImageUserOnlyFromAProfile(t *testing.T) {
	profiles := map[string]sandbox.SessionOptions{
		"task": {Image: "task:1", User: sandbox.UserImage, WritableRootfs: true, EditablePaths: []string{"/testbed"}},
	}
	ts := servertest.Start(t, withProfiles(profiles))
	c := dial(t, ts)
	var r wsproto.CreateResult
	c.ok(1, wsproto.MethodSessionCreate, map[string]any{"profile": "task"}, &r)
	assert.Equal(t, profiles["task"], fakeOf(t, ts, r.SessionID).Options())

	for i, params := range []map[string]any{
		{"user": "image"},
		{"profile": "task", "user": "image"},
	} {
		m := c.call(10+i, wsproto.MethodSessionCreate, params)
		require.NotNil(t, m.Error, "%v", params)
		assert.Equal(t, wsproto.CodePermission, m.Error.Code, "%v", params)
		assert.Contains(t, m.Error.Message, `user "image" runs the session as the image's own user, root included: only a session profile`)
	}
	// A request's own user over the profile's is an ordinary session user.
	c.ok(21, wsproto.MethodSessionCreate, map[string]any{"profile": "task", "user": "1000:1000", "editable_paths": []string{"/testbed", "/opt/venv"}}, &r)
	o := fakeOf(t, ts, r.SessionID).Options()
	assert.Equal(t, "1000:1000", o.User)
	assert.Equal(t, []string{"/testbed", "/opt/venv"}, o.EditablePaths, "the request's list replaces the profile's")
	assert.True(t, o.WritableRootfs, "the profile's")
}
