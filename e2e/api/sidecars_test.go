package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/wsproto"
)

// The sidecar images of `make sidecar-images`: the MCP Go SDK's example
// servers.
const (
	memoryImage     = "sandboxd-mcp-memory:latest"
	everythingImage = "sandboxd-mcp-everything:latest"
	// testserverImage is e2e/mcptestserver: its tool list changes, and it
	// counts the cancellations it receives.
	testserverImage = "sandboxd-mcp-testserver:latest"
)

// ensureSidecarImages builds the sidecar images when one is missing (the
// script skips what is current).
func ensureSidecarImages(ctx context.Context, t *testing.T) {
	t.Helper()
	for _, img := range []string{memoryImage, everythingImage, testserverImage, evilImage} {
		if _, err := engine.ImageInspect(ctx, img); err == nil {
			continue
		}
		root, err := testenv.RepoRoot()
		if err != nil {
			t.Fatal(err)
		}
		out, err := exec.CommandContext(ctx, filepath.Join(root, "images", "build-sidecar-images.sh")).CombinedOutput()
		if err != nil {
			t.Fatalf("building the sidecar images (make sidecar-images): %v\n%s", err, out)
		}
		return
	}
}

// sidecarContainers lists this run's sidecar containers of a session.
func sidecarContainers(ctx context.Context, t *testing.T, session string) []container.Summary {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", labelRun+"="+runID), filters.Arg("label", sandbox.LabelSession+"="+session),
		filters.Arg("label", sandbox.LabelSidecar))
	ctrs, err := engine.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	return ctrs
}

// sidecarRig is a daemon for a sidecar test, the sidecar images built,
// and a WebSocket client dialled to it.
type sidecarRig struct {
	serve *serveProc
	token string
	base  string // http://host:port, for the MCP endpoints
	c     *client.Client
}

// startSidecarServe builds the sidecar images if needed, starts serve with
// extra flags in a fresh state folder, and dials it; the client closes
// with the test.
func startSidecarServe(ctx context.Context, t *testing.T, extra ...string) *sidecarRig {
	t.Helper()
	ensureSidecarImages(ctx, t)
	state := t.TempDir()
	serve := startServe(t, state, extra...)
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, serve.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	base := "http" + strings.TrimSuffix(strings.TrimPrefix(serve.url, "ws"), "/v1/ws")
	return &sidecarRig{serve: serve, token: token, base: base, c: c}
}

func sidecarConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf(`profiles:
  mem:
    image: %s
    mcp_servers:
      - name: memory
        image: %s
`, testImage, memoryImage)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// MCP servers as sidecar containers, through a real MCP client (the go-sdk)
// and the WebSocket client: the memory server over stdio, declared in a
// profile and in session.create, lists its tools as memory__<tool> beside
// the sandbox's, keeps its state across 20 calls (one daemon-owned MCP
// session, not a container per call), runs with the sandbox's security
// settings and no network, and goes with its session. A client's sidecar
// image must be allowed.
func TestSidecarsServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rig := startSidecarServe(ctx, t, "--config", sidecarConfig(t),
		"--allow-image", testImage, "--allow-image", "sandboxd-mcp-*")
	serve, token, base, c := rig.serve, rig.token, rig.base, rig.c

	// MCP, the profile's sidecar.
	cs, err := mcpConnectPath(ctx, base, "/mcp/mem", token, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range list.Tools {
		tools[tl.Name] = tl
	}
	for _, want := range []string{"terminal", "memory__create_entities", "memory__read_graph", "memory__search_nodes"} {
		if tools[want] == nil {
			t.Fatalf("tools/list lacks %s: %v", want, names2(tools))
		}
	}
	if tools["memory__create_entities"].InputSchema == nil || !strings.Contains(string(mustMarshal(t, tools["memory__create_entities"].InputSchema)), "entities") {
		t.Fatalf("memory__create_entities lost its schema: %s", mustMarshal(t, tools["memory__create_entities"].InputSchema))
	}
	for i := range 20 {
		mcpText(ctx, t, cs, "memory__create_entities", map[string]any{"entities": []any{
			map[string]any{"name": fmt.Sprintf("e%02d", i), "entityType": "test", "observations": []string{fmt.Sprintf("call %d", i)}},
		}})
	}
	res, out := callResult(ctx, t, cs, "memory__read_graph", map[string]any{})
	if res.IsError {
		t.Fatalf("read_graph: %s", out)
	}
	graph := string(mustMarshal(t, res.StructuredContent)) + out
	for i := range 20 {
		if !strings.Contains(graph, fmt.Sprintf(`"e%02d"`, i)) {
			t.Fatalf("the graph lacks e%02d after 20 calls: state was lost\n%s", i, graph)
		}
	}
	// The sandbox's own tools still work beside the sidecar's.
	wantAll(t, "terminal", mcpText(ctx, t, cs, "terminal", map[string]any{"command": "echo beside"}), "beside")

	// Stateless MCP: the profile's list has the sidecar's tools (learned
	// at serve's start), without a sandbox; a call by handle reaches it.
	modern, listed := statelessTools(ctx, t, base, "/mcp/mem", token, "memory__read_graph", "memory__create_entities", "sandbox_open")
	defer modern.Close()
	wantAll(t, "stateless create_entities schema", string(mustMarshal(t, listed["memory__create_entities"].InputSchema)), `"sandbox"`, `"entities"`)
	gc := &goSDKClient{cs: modern}
	h := openSandbox(ctx, t, gc, 30*time.Minute)
	mustOK(ctx, t, gc, "memory__create_entities", withHandle(h, map[string]any{"entities": []any{
		map[string]any{"name": "stateless", "entityType": "t", "observations": []string{"o"}}}}))
	if r := mustOK(ctx, t, gc, "memory__read_graph", withHandle(h, map[string]any{})); !strings.Contains(r.text+string(mustMarshal(t, r.structured)), "stateless") {
		t.Fatalf("stateless read_graph: %s", r.text)
	}
	closeSandbox(ctx, t, gc, h)

	// WebSocket: a client declares the sidecar in session.create.
	if _, err := c.CreateSession(ctx, client.CreateOptions{Image: testImage, MCPServers: []wsproto.MCPServer{{Name: "evil", Image: "evil:latest"}}}); err == nil ||
		!strings.Contains(err.Error(), `image "evil:latest" is not allowed`) {
		t.Fatalf("a sidecar of a disallowed image: %v", err)
	}
	sess, err := c.CreateSession(ctx, client.CreateOptions{Image: testImage, MCPServers: []wsproto.MCPServer{{Name: "mem", Image: memoryImage, Workspace: "ro"}}})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sess.ToolsList(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range raw {
		var d struct{ Name string }
		if err := json.Unmarshal(r, &d); err != nil {
			t.Fatal(err)
		}
		names = append(names, d.Name)
	}
	if got := strings.Join(names, " "); !strings.Contains(got, "mem__create_entities") || !strings.Contains(got, "terminal") {
		t.Fatalf("tools.list: %s", got)
	}
	for i := range 20 {
		obs, err := sess.Call(ctx, "mem__create_entities", map[string]any{"entities": []any{
			map[string]any{"name": fmt.Sprintf("ws%02d", i), "entityType": "test", "observations": []string{"x"}},
		}}, nil)
		if err != nil || obs.IsError {
			t.Fatalf("create_entities %d: %v %s", i, err, obs.Text())
		}
	}
	obs, err := sess.Call(ctx, "mem__search_nodes", map[string]any{"query": "ws19"}, nil)
	if err != nil || obs.IsError || !strings.Contains(obs.Text()+string(mustMarshal(t, obs.Structured)), "ws19") {
		t.Fatalf("search_nodes after 20 calls: %v %s %s", err, obs.Text(), mustMarshal(t, obs.Structured))
	}
	if _, err := sess.Call(ctx, "mem__no_such_tool", map[string]any{}, nil); err == nil || !strings.Contains(err.Error(), "no such tool") {
		t.Fatalf("an unknown sidecar tool: %v", err)
	}

	// One container per sidecar, with the sandbox's settings and no network.
	ctrs := sidecarContainers(ctx, t, sess.ID)
	if len(ctrs) != 1 {
		t.Fatalf("session %s has %d sidecar containers, want 1", sess.ID, len(ctrs))
	}
	ins, err := engine.ContainerInspect(ctx, ctrs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	hc := ins.HostConfig
	switch {
	case ins.Config.User != "1000:1000":
		t.Errorf("sidecar user %q", ins.Config.User)
	case len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL":
		t.Errorf("sidecar cap-drop %v", hc.CapDrop)
	case !hc.ReadonlyRootfs:
		t.Error("sidecar root is writable")
	case string(hc.NetworkMode) != "none":
		t.Errorf("stdio sidecar network %q", hc.NetworkMode)
	case hc.Init == nil || !*hc.Init:
		t.Error("sidecar without init")
	case hc.PidsLimit == nil || *hc.PidsLimit <= 0 || hc.Memory <= 0 || hc.NanoCPUs <= 0:
		t.Errorf("sidecar limits: pids %v memory %d cpus %d", hc.PidsLimit, hc.Memory, hc.NanoCPUs)
	case !strings.Contains(strings.Join(hc.SecurityOpt, " "), "no-new-privileges"):
		t.Errorf("sidecar security options %v", hc.SecurityOpt)
	}
	// The sidecar sees the session's workspace, read-only.
	if obs, err := term(ctx, sess, "echo from-sandbox > /workspace/shared.txt"); err != nil || obs.IsError {
		t.Fatalf("writing in the sandbox: %v %s", err, obs.Text())
	}
	if out, code := execIn(ctx, t, ctrs[0].ID, "cat", "/workspace/shared.txt"); code != 0 || !strings.Contains(out, "from-sandbox") {
		t.Fatalf("the sidecar does not see the workspace: exit %d %s", code, out)
	}
	if out, code := execIn(ctx, t, ctrs[0].ID, "touch", "/workspace/from-sidecar"); code == 0 || !strings.Contains(out, "Read-only") {
		t.Fatalf("the sidecar wrote to a read-only workspace: exit %d %s", code, out)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := sidecarContainers(ctx, t, sess.ID); len(left) != 0 {
		t.Fatalf("%d sidecar containers left after close", len(left))
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	serve.stop(t)
	waitNoContainers(t, "after the sidecar sessions")
}

// The three transports in one session: memory over stdio, everything over
// streamable HTTP and the sse example over legacy HTTP+SSE, each on its
// own; the HTTP ones on the session's internal sidecar network. Names the
// everything server gives with spaces and parentheses are exposed within
// ^[A-Za-z0-9_-]{1,64}$ and still called; structured content passes
// through. A sidecar that never answers fails the create with its stderr.
func TestSidecarsTransports(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rig := startSidecarServe(ctx, t, "--allow-image", testImage, "--allow-image", "sandboxd-mcp-*")
	serve, c := rig.serve, rig.c

	_, err := c.CreateSession(ctx, client.CreateOptions{Image: testImage, MCPServers: []wsproto.MCPServer{{
		Name: "broken", Image: memoryImage, Command: []string{"/bin/sh", "-c", "echo missing-config-xyz >&2; exit 3"},
	}}})
	if err == nil || !strings.Contains(err.Error(), "missing-config-xyz") || !strings.Contains(err.Error(), `mcp server "broken"`) {
		t.Fatalf("a sidecar that exits at once: %v", err)
	}

	sess, err := c.CreateSession(ctx, client.CreateOptions{Image: testImage, MCPServers: []wsproto.MCPServer{
		{Name: "memory", Image: memoryImage},
		{Name: "everything", Image: everythingImage, Args: []string{"-http", "0.0.0.0:8080"}, Transport: "http", Port: 8080, Path: "/"},
		{Name: "old", Image: "sandboxd-mcp-sse:latest", Args: []string{"-host", "0.0.0.0", "-port", "8081"}, Transport: "sse", Port: 8081, Path: "/greeter1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	lctx, lcancel := context.WithTimeout(ctx, time.Minute)
	raw, err := sess.ToolsList(lctx, "")
	lcancel()
	if err != nil {
		t.Fatalf("tools.list: %v\n%s", err, serve.logs())
	}
	var structured string
	have := map[string]bool{}
	for _, r := range raw {
		var d struct{ Name string }
		if err := json.Unmarshal(r, &d); err != nil {
			t.Fatal(err)
		}
		if len(d.Name) > 64 || strings.Trim(d.Name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-") != "" {
			t.Errorf("tool name %q is not ^[A-Za-z0-9_-]{1,64}$", d.Name)
		}
		if strings.HasPrefix(d.Name, "everything__greet__structured_") {
			structured = d.Name
		}
		have[d.Name] = true
	}
	for _, want := range []string{"terminal", "memory__read_graph", "everything__greet", "old__greet1"} {
		if !have[want] {
			t.Fatalf("tools.list lacks %s: %v", want, have)
		}
	}
	if structured == "" {
		t.Fatalf("no everything__greet__structured_<hash> among %v", have)
	}
	for name, want := range map[string]string{"everything__greet": "Hi sidecar", "old__greet1": "Hi sidecar"} {
		obs, err := sess.Call(ctx, name, map[string]any{"name": "sidecar"}, nil)
		if err != nil || obs.IsError || !strings.Contains(obs.Text(), want) {
			t.Fatalf("%s: %v %q", name, err, obs.Text())
		}
	}
	obs, err := sess.Call(ctx, structured, map[string]any{"name": "sidecar"}, nil)
	if err != nil || obs.IsError || !strings.Contains(string(mustMarshal(t, obs.Structured)), "sidecar") {
		t.Fatalf("%s: %v %q %s", structured, err, obs.Text(), mustMarshal(t, obs.Structured))
	}

	ctrs := sidecarContainers(ctx, t, sess.ID)
	if len(ctrs) != 3 {
		t.Fatalf("%d sidecar containers, want 3", len(ctrs))
	}
	for _, ctr := range ctrs {
		ins, err := engine.ContainerInspect(ctx, ctr.ID)
		if err != nil {
			t.Fatal(err)
		}
		mode := string(ins.HostConfig.NetworkMode)
		switch ins.Config.Labels[sandbox.LabelSidecar] {
		case "memory":
			if mode != "none" {
				t.Errorf("stdio sidecar on network %q", mode)
			}
		default:
			net, err := engine.NetworkInspect(ctx, mode, networkInspectOptions)
			if err != nil {
				t.Fatal(err)
			}
			if !net.Internal || net.Labels[sandbox.LabelSession] != sess.ID {
				t.Errorf("HTTP sidecar network %s: internal %v, labels %v", mode, net.Internal, net.Labels)
			}
		}
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	serve.stop(t)
	waitNoContainers(t, "after the transports session")
}

var networkInspectOptions = network.InspectOptions{}

// Faults and scale: a sidecar killed from outside gives a clear error at
// once (state lost), the rest of the session works, and it comes back; ten
// sessions with a sidecar each, created at once and called concurrently,
// leave exactly one sidecar container per session and no zombie process;
// two sessions cannot reach each other's HTTP sidecars, tried from inside
// a sidecar; nothing is left after close.
func TestSidecarsFaultsAndScale(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	rig := startSidecarServe(ctx, t, "--allow-image", testImage, "--allow-image", "sandboxd-mcp-*")
	serve, c := rig.serve, rig.c
	entity := func(name string) map[string]any {
		return map[string]any{"entities": []any{map[string]any{"name": name, "entityType": "t", "observations": []string{"o"}}}}
	}

	// Ten sessions at once, each with memory (stdio) and everything (HTTP).
	const n = 10
	sessions := make([]*client.Session, n)
	var wg sync.WaitGroup
	errs := make(chan error, n*6)
	for i := range n {
		wg.Go(func() {
			s, err := c.CreateSession(ctx, client.CreateOptions{Image: testImage, MCPServers: []wsproto.MCPServer{
				{Name: "memory", Image: memoryImage},
				{Name: "everything", Image: everythingImage, Args: []string{"-http", "0.0.0.0:8080"}, Transport: "http", Port: 8080, Path: "/"},
			}})
			if err != nil {
				errs <- err
				return
			}
			sessions[i] = s
			// Five concurrent calls on the one MCP session of each sidecar
			// (the memory example's knowledge base is not safe for
			// concurrent writes: its calls go one after the other).
			var cw sync.WaitGroup
			for j := range 5 {
				cw.Go(func() {
					obs, err := s.Call(ctx, "everything__greet", map[string]any{"name": fmt.Sprintf("g%d", j)}, nil)
					if err == nil && (obs.IsError || !strings.Contains(obs.Text(), fmt.Sprintf("g%d", j))) {
						err = fmt.Errorf("greet: %s", obs.Text())
					}
					if err != nil {
						errs <- err
					}
				})
			}
			for j := range 5 {
				obs, err := s.Call(ctx, "memory__create_entities", entity(fmt.Sprintf("s%d-%d", i, j)), nil)
				if err == nil && obs.IsError {
					err = fmt.Errorf("is_error: %s", obs.Text())
				}
				if err != nil {
					errs <- err
				}
			}
			cw.Wait()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, s := range sessions {
		ctrs := sidecarContainers(ctx, t, s.ID)
		if len(ctrs) != 2 {
			t.Fatalf("session %d has %d sidecar containers, want 2", i, len(ctrs))
		}
		for _, ctr := range ctrs {
			top, err := engine.ContainerTop(ctx, ctr.ID, []string{"-o", "pid,stat,comm"})
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range top.Processes {
				if strings.Contains(strings.Join(p, " "), "Z") && strings.Contains(strings.Join(p, " "), "defunct") {
					t.Errorf("zombie in %s: %v", ctr.Names, p)
				}
			}
		}
		obs, err := s.Call(ctx, "memory__read_graph", map[string]any{}, nil)
		if err != nil || obs.IsError {
			t.Fatalf("read_graph %d: %v %s", i, err, obs.Text())
		}
		got := obs.Text() + string(mustMarshal(t, obs.Structured))
		for j := range 5 {
			if !strings.Contains(got, fmt.Sprintf("s%d-%d", i, j)) {
				t.Fatalf("session %d lacks s%d-%d: %s", i, i, j, got)
			}
		}
		if strings.Contains(got, fmt.Sprintf("s%d-", (i+1)%n)) {
			t.Fatalf("session %d sees another session's memory: %s", i, got)
		}
	}

	// Isolation, tried from inside: session 1's HTTP sidecar cannot reach
	// session 0's.
	addr := func(s *client.Session) (string, string) {
		for _, ctr := range sidecarContainers(ctx, t, s.ID) {
			if ctr.Labels[sandbox.LabelSidecar] == "everything" {
				ins, err := engine.ContainerInspect(ctx, ctr.ID)
				if err != nil {
					t.Fatal(err)
				}
				for _, ep := range ins.NetworkSettings.Networks {
					return ctr.ID, ep.IPAddress
				}
			}
		}
		t.Fatal("no everything sidecar")
		return "", ""
	}
	_, ip0 := addr(sessions[0])
	id1, ip1 := addr(sessions[1])
	connect := func(ip string) (string, int) {
		return execIn(ctx, t, id1, "timeout", "3", "bash", "-c", "exec 3<>/dev/tcp/"+ip+"/8080 && echo connected")
	}
	if out, code := connect(ip1); code != 0 { // the probe works: its own server
		t.Fatalf("session 1's sidecar cannot reach itself at %s: exit %d %s", ip1, code, out)
	}
	out, code := connect(ip0)
	if code == 0 {
		t.Fatalf("session 1's sidecar reached session 0's at %s: %s", ip0, out)
	}
	t.Logf("from session 1's sidecar to session 0's (%s): exit %d: %s", ip0, code, strings.TrimSpace(out))

	// A sidecar killed from outside: a clear error at once, the sandbox
	// works on, and the sidecar comes back without its state.
	s := sessions[0]
	var memID string
	for _, ctr := range sidecarContainers(ctx, t, s.ID) {
		if ctr.Labels[sandbox.LabelSidecar] == "memory" {
			memID = ctr.ID
		}
	}
	if err := engine.ContainerKill(ctx, memID, "KILL"); err != nil {
		t.Fatal(err)
	}
	var down string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(20 * time.Millisecond) {
		obs, err := s.Call(ctx, "memory__read_graph", map[string]any{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if obs.IsError {
			down = obs.Text()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the killed sidecar still answers")
		}
	}
	if !strings.Contains(down, `mcp server "memory" is down`) || !strings.Contains(down, "state it held is lost") {
		t.Fatalf("the error of a killed sidecar: %s", down)
	}
	obs, err := s.Call(ctx, "everything__greet", map[string]any{"name": "still"}, nil)
	if err != nil || obs.IsError || !strings.Contains(obs.Text(), "Hi still") {
		t.Fatalf("the other sidecar while one is down: %v %s", err, obs.Text())
	}
	if obs, err := term(ctx, s, "echo alive"); err != nil || !strings.Contains(obs.Text(), "alive") {
		t.Fatalf("the sandbox while a sidecar is down: %v %s", err, obs.Text())
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		obs, err := s.Call(ctx, "memory__read_graph", map[string]any{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !obs.IsError {
			if strings.Contains(obs.Text(), "s0-0") {
				t.Fatalf("a restarted sidecar kept its state: %s", obs.Text())
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the killed sidecar did not come back: %s", obs.Text())
		}
	}
	if got := len(sidecarContainers(ctx, t, s.ID)); got != 2 {
		t.Fatalf("%d sidecar containers after the restart, want 2", got)
	}

	for _, s := range sessions {
		if err := s.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if left := sidecarContainers(ctx, t, s.ID); len(left) != 0 {
			t.Fatalf("%d sidecar containers left after close", len(left))
		}
	}
	serve.stop(t)
	waitNoContainers(t, "after the ten sidecar sessions")
}

// execIn runs argv in a container (as the harness, from outside) and
// returns its output and exit code.
func execIn(ctx context.Context, t *testing.T, id string, argv ...string) (string, int) {
	t.Helper()
	out, err := exec.CommandContext(ctx, "docker", append([]string{"exec", id}, argv...)...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &ee):
		return string(out), ee.ExitCode()
	}
	t.Fatal(err)
	return "", -1
}

// A profile's sidecar secret comes from the operator's --secrets-file into
// the sidecar's environment and into nothing else: no label of the run's
// containers, volumes or networks, and no log line (at debug level) holds
// it. A secret the daemon lacks fails the create, naming it.
func TestSidecarsSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	value := "s3cr3t-" + auth.NewToken()[:16]
	secrets := filepath.Join(dir, "secrets")
	if err := os.WriteFile(secrets, []byte("# test\nAPI_TOKEN="+value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	config := filepath.Join(dir, "config.yaml")
	src := fmt.Sprintf(`profiles:
  sec:
    image: %[1]s
    mcp_servers:
      - name: memory
        image: %[2]s
        secrets:
          - name: API_TOKEN
            env: MEMORY_TOKEN
  nosec:
    image: %[1]s
    mcp_servers:
      - name: memory
        image: %[2]s
        secrets:
          - name: NOT_THERE
`, testImage, memoryImage)
	if err := os.WriteFile(config, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	rig := startSidecarServe(ctx, t, "--config", config, "--secrets-file", secrets, "--log-level", "debug")
	serve, c := rig.serve, rig.c
	if _, err := c.CreateSession(ctx, client.CreateOptions{Profile: "nosec"}); err == nil || !strings.Contains(err.Error(), `no secret "NOT_THERE"`) {
		t.Fatalf("a missing secret: %v", err)
	}
	sess, err := c.CreateSession(ctx, client.CreateOptions{Profile: "sec"})
	if err != nil {
		t.Fatal(err)
	}
	if obs, err := sess.Call(ctx, "memory__read_graph", map[string]any{}, nil); err != nil || obs.IsError {
		t.Fatalf("read_graph: %v %s", err, obs.Text())
	}
	ctrs := sidecarContainers(ctx, t, sess.ID)
	if len(ctrs) != 1 {
		t.Fatalf("%d sidecars", len(ctrs))
	}
	ins, err := engine.ContainerInspect(ctx, ctrs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(ins.Config.Env, "\n"), "MEMORY_TOKEN="+value) {
		t.Fatal("the sidecar lacks its secret")
	}
	f := filters.NewArgs(filters.Arg("label", labelRun+"="+runID))
	all, err := engine.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, ctr := range all {
		if strings.Contains(string(mustMarshal(t, ctr.Labels)), value) {
			t.Fatalf("container %v carries the secret in a label", ctr.Names)
		}
	}
	nets, err := engine.NetworkList(ctx, network.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nets {
		if strings.Contains(string(mustMarshal(t, n.Labels)), value) {
			t.Fatalf("network %s carries the secret in a label", n.Name)
		}
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	serve.stop(t)
	if logs := serve.logs(); strings.Contains(logs, value) {
		t.Fatal("the secret's value is in the daemon's log")
	} else if !strings.Contains(logs, "sidecar") {
		t.Fatalf("the debug log says nothing of the sidecar: the check above proves nothing\n%s", logs)
	}
	waitNoContainers(t, "after the secrets session")
}

// Over a daemon restart: with --keep-sessions the sidecars stay with their
// sandbox; the next daemon adopts the session, and its sidecar starts
// again at first use (replacing the old container: its state is lost, as
// said), one container per sidecar. Without --keep-sessions the sidecars
// are removed with the sandbox at shutdown; nothing is left.
func TestSidecarsOverRestart(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ensureSidecarImages(ctx, t)
	state := t.TempDir()
	first := startServe(t, state, "--keep-sessions", "--allow-image", testImage, "--allow-image", "sandboxd-mcp-*")
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, first.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(ctx, client.CreateOptions{Image: testImage, MCPServers: []wsproto.MCPServer{{Name: "memory", Image: memoryImage}}})
	if err != nil {
		t.Fatal(err)
	}
	if obs, err := s.Call(ctx, "memory__read_graph", map[string]any{}, nil); err != nil || obs.IsError {
		t.Fatalf("read_graph: %v %s", err, obs.Text())
	}
	c.Close()
	first.stop(t)
	if n := len(sidecarContainers(ctx, t, s.ID)); n != 1 {
		t.Fatalf("%d sidecar containers after a shutdown with --keep-sessions, want 1", n)
	}

	second := startServe(t, state, "--allow-image", testImage, "--allow-image", "sandboxd-mcp-*")
	c2, err := client.Dial(ctx, second.url, s.Token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s2, err := c2.Attach(ctx, s.ID, s.Token, 0)
	if err != nil {
		t.Fatalf("attach after restart: %v\n%s", err, second.logs())
	}
	obs, err := s2.Call(ctx, "memory__create_entities", map[string]any{"entities": []any{
		map[string]any{"name": "after", "entityType": "t", "observations": []string{"o"}}}}, nil)
	if err != nil || obs.IsError {
		t.Fatalf("a sidecar call after the restart: %v %s\n%s", err, obs.Text(), second.logs())
	}
	if n := len(sidecarContainers(ctx, t, s.ID)); n != 1 {
		t.Fatalf("%d sidecar containers after the restart, want 1", n)
	}
	second.stop(t) // without --keep-sessions: removes the session, sidecars included
	waitNoContainers(t, "after a shutdown without --keep-sessions")
}

// rootSidecarImage builds, for this run, the memory server's image with
// USER root (the sidecar images run as uid 1000), labelled with the run
// and removed after the test.
func rootSidecarImage(ctx context.Context, t *testing.T) string {
	t.Helper()
	tag := "sandboxd-e2e-mcp-root:" + runID
	cmd := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, "--label", labelRun+"="+runID, "-")
	cmd.Stdin = strings.NewReader("FROM " + memoryImage + "\nUSER 0:0\n")
	cmd.Env = append(os.Environ(), "DOCKER_BUILDKIT=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", tag, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("docker", "image", "rm", "-f", tag).CombinedOutput(); err != nil {
			t.Errorf("removing %s: %v\n%s", tag, err, out)
		}
	})
	return tag
}

// A profile's sidecar limits and user: declared memory, CPU and pids are
// what the engine enforces, undeclared ones are the sandbox's; a sidecar
// runs as uid 1000 unless its profile says `user: image`, and then as its
// image's user, root here, still without capabilities, with
// no-new-privileges and a read-only root with a tmpfs /tmp. A sidecar that
// starts but never answers initialize fails the create after
// SidecarReadyTimeout with its stderr tail, and leaves nothing behind.
func TestSidecarsLimitsUserReadiness(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ensureSidecarImages(ctx, t)
	rootImage := rootSidecarImage(ctx, t)
	config := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf(`profiles:
  lim:
    image: %[1]s
    limits:
      memory: 384MiB
      cpus: 0.75
      pids: 200
    mcp_servers:
      - name: small
        image: %[2]s
        limits:
          memory: 96MiB
          cpus: 0.5
          pids: 64
      - name: plain
        image: %[2]s
      - name: rooted
        image: %[3]s
        user: image
  silent:
    image: %[1]s
    mcp_servers:
      - name: mute
        image: %[2]s
        command: ["/bin/sh", "-c", "echo never-ready-xyz >&2; exec sleep 600"]
`, testImage, memoryImage, rootImage)
	if err := os.WriteFile(config, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	rig := startSidecarServe(ctx, t, "--config", config)
	sess, err := rig.c.CreateSession(ctx, client.CreateOptions{Profile: "lim"})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"small__read_graph", "plain__read_graph", "rooted__read_graph"} {
		if obs, err := sess.Call(ctx, name, map[string]any{}, nil); err != nil || obs.IsError {
			t.Fatalf("%s: %v %s", name, err, obs.Text())
		}
	}
	ctrs := sidecarContainers(ctx, t, sess.ID)
	if len(ctrs) != 3 {
		t.Fatalf("%d sidecar containers, want 3", len(ctrs))
	}
	type want struct {
		memory, cpus, pids int64
		user, uid          string
	}
	wants := map[string]want{
		"small":  {96 << 20, 5e8, 64, "1000:1000", "1000"},
		"plain":  {384 << 20, 75e7, 200, "1000:1000", "1000"},
		"rooted": {384 << 20, 75e7, 200, "0:0", "0"}, // the image's USER
	}
	for _, ctr := range ctrs {
		name := ctr.Labels[sandbox.LabelSidecar]
		w, ok := wants[name]
		if !ok {
			t.Fatalf("an unexpected sidecar %q", name)
		}
		ins, err := engine.ContainerInspect(ctx, ctr.ID)
		if err != nil {
			t.Fatal(err)
		}
		hc := ins.HostConfig
		if hc.Memory != w.memory || hc.MemorySwap != w.memory || hc.NanoCPUs != w.cpus || hc.PidsLimit == nil || *hc.PidsLimit != w.pids {
			t.Errorf("%s: memory %d swap %d cpus %d pids %v, want %d, %d, %d", name, hc.Memory, hc.MemorySwap, hc.NanoCPUs, hc.PidsLimit, w.memory, w.cpus, w.pids)
		}
		if ins.Config.User != w.user {
			t.Errorf("%s: user %q, want %q", name, ins.Config.User, w.user)
		}
		if out, code := execIn(ctx, t, ctr.ID, "id", "-u"); code != 0 || strings.TrimSpace(out) != w.uid {
			t.Errorf("%s runs as uid %q (exit %d), want %s", name, strings.TrimSpace(out), code, w.uid)
		}
		if len(hc.CapDrop) != 1 || hc.CapDrop[0] != "ALL" || !hc.ReadonlyRootfs || hc.Tmpfs["/tmp"] == "" ||
			!strings.Contains(strings.Join(hc.SecurityOpt, " "), "no-new-privileges") {
			t.Errorf("%s: cap-drop %v, read-only root %v, tmpfs %v, security options %v", name, hc.CapDrop, hc.ReadonlyRootfs, hc.Tmpfs, hc.SecurityOpt)
		}
	}
	// Root in the sidecar is root without capabilities: it cannot write
	// the read-only root, nor change a file's owner.
	for _, ctr := range ctrs {
		if ctr.Labels[sandbox.LabelSidecar] != "rooted" {
			continue
		}
		if out, code := execIn(ctx, t, ctr.ID, "touch", "/etc/rooted"); code == 0 {
			t.Errorf("root in a sidecar wrote to the read-only root: %s", out)
		}
		if out, code := execIn(ctx, t, ctr.ID, "sh", "-c", "touch /tmp/f && chown 1:1 /tmp/f"); code == 0 || !strings.Contains(out, "ermitted") {
			t.Errorf("root in a sidecar changed a file's owner (CAP_CHOWN kept?): exit %d %s", code, out)
		}
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}

	began := time.Now()
	_, err = rig.c.CreateSession(ctx, client.CreateOptions{Profile: "silent"})
	took := time.Since(began)
	if err == nil || !strings.Contains(err.Error(), `mcp server "mute" did not answer within`) || !strings.Contains(err.Error(), "never-ready-xyz") {
		t.Fatalf("a sidecar that never answers initialize: %v", err)
	}
	t.Logf("a sidecar that never answers failed the create after %v: %v", took.Round(time.Millisecond), err)
	rig.serve.stop(t)
	waitNoContainers(t, "after the limits, user and readiness sessions")
}

// A sidecar's tool list changes and cancellations, with e2e/mcptestserver:
// its add_tool makes the server send notifications/tools/list_changed; the
// daemon reads the list again and tells the legacy MCP client with
// notifications/tools/list_changed (the new tool is listed and called), a
// stateless client's list of the profile has it too, and a restart after
// a kill (which loses the added tool) is announced the same way. A call
// cancelled by the client, through MCP (the go-sdk client's context) and
// through WebSocket (tools.cancel), is cancelled in the sidecar: the
// server counts it.
func TestSidecarsListChangedAndCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	config := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf("profiles:\n  ts:\n    image: %s\n    mcp_servers:\n      - name: ts\n        image: %s\n", testImage, testserverImage)
	if err := os.WriteFile(config, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	rig := startSidecarServe(ctx, t, "--config", config)

	changed := make(chan struct{}, 16)
	mc := mcp.NewClient(&mcp.Implementation{Name: "e2e-sidecars", Version: "1"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changed <- struct{}{} },
	})
	cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: rig.base + "/mcp/ts", HTTPClient: &http.Client{Transport: bearer{rig.token, http.DefaultTransport}}, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	listed := func() map[string]bool {
		t.Helper()
		list, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, tl := range list.Tools {
			have[tl.Name] = true
		}
		return have
	}
	awaitChanged := func(why string) {
		t.Helper()
		select {
		case <-changed:
		case <-time.After(time.Minute):
			t.Fatalf("no notifications/tools/list_changed after %s\n%s", why, rig.serve.logs())
		}
	}
	if have := listed(); !have["ts__wait"] || !have["ts__add_tool"] || have["ts__extra1"] {
		t.Fatalf("tools/list: %v", have)
	}
	wantAll(t, "add_tool", mcpText(ctx, t, cs, "ts__add_tool", map[string]any{"name": "extra1"}), "added extra1")
	awaitChanged("the sidecar added a tool")
	if have := listed(); !have["ts__extra1"] {
		t.Fatalf("tools/list after list_changed lacks ts__extra1: %v", have)
	}
	wantAll(t, "extra1", mcpText(ctx, t, cs, "ts__extra1", map[string]any{}), "I am extra1")
	modern, _ := statelessTools(ctx, t, rig.base, "/mcp/ts", rig.token, "ts__extra1", "ts__wait")
	_ = modern.Close()

	// Cancelled through MCP: the go-sdk client sends notifications/cancelled.
	cancelled := func(call func(context.Context, string, map[string]any) (string, error)) {
		t.Helper()
		cctx, ccancel := context.WithCancel(ctx)
		timer := time.AfterFunc(time.Second, ccancel)
		defer timer.Stop()
		began := time.Now()
		out, err := call(cctx, "ts__wait", map[string]any{"seconds": 120})
		if err == nil {
			t.Fatalf("a cancelled wait returned %q", out)
		}
		t.Logf("the cancelled call returned after %v: %v", time.Since(began).Round(time.Millisecond), err)
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
			n, err := call(ctx, "ts__cancelled", map[string]any{})
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(n) == "1" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sidecar counted %s cancellations, want 1\n%s", n, rig.serve.logs())
			}
		}
	}
	cancelled(func(ctx context.Context, name string, args map[string]any) (string, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return "", err
		}
		if res.IsError || len(res.Content) == 0 {
			return "", fmt.Errorf("%s: is_error %v", name, res.IsError)
		}
		return res.Content[0].(*mcp.TextContent).Text, nil
	})
	// Cancelled through WebSocket: tools.cancel.
	ws, err := rig.c.CreateSession(ctx, client.CreateOptions{Profile: "ts"})
	if err != nil {
		t.Fatal(err)
	}
	cancelled(func(ctx context.Context, name string, args map[string]any) (string, error) {
		obs, err := ws.Call(ctx, name, args, nil)
		if err != nil {
			return "", err
		}
		if obs.IsError {
			return "", fmt.Errorf("%s: %s", name, obs.Text())
		}
		return obs.Text(), nil
	})
	if err := ws.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A restart lists other tools (the added one is gone): announced too.
	for len(changed) > 0 {
		<-changed
	}
	// The WebSocket session is closed: the run's one ts sidecar is the MCP
	// session's.
	ctrs, err := engine.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", labelRun+"="+runID), filters.Arg("label", sandbox.LabelSidecar+"=ts"))})
	if err != nil {
		t.Fatal(err)
	}
	if len(ctrs) != 1 {
		t.Fatalf("%d ts sidecars, want the MCP session's one", len(ctrs))
	}
	if err := engine.ContainerKill(ctx, ctrs[0].ID, "KILL"); err != nil {
		t.Fatal(err)
	}
	awaitChanged("the sidecar restarted without its added tool")
	if have := listed(); have["ts__extra1"] || !have["ts__wait"] {
		t.Fatalf("tools/list after the restart: %v", have)
	}
	if err := cs.Close(); err != nil {
		t.Fatal(err)
	}
	rig.serve.stop(t)
	waitNoContainers(t, "after the list_changed and cancel sessions")
}

// A sidecar has no egress unless its profile entry says network: bridge;
// then it reaches what its allow_hosts name and nothing else, through an
// egress network of its own that the host firewall guards as a bridge
// session's, and that goes with the session. Each sidecar proves its own
// reach: its command connects (busybox nc) to a listener the test opened
// in a network namespace outside the engine, writes what it saw to its
// stderr (its container's log), then runs the memory server; the
// listener confirms which addresses were reached.
func TestSidecarEgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	tn := newEgressNet(t)
	port := tn.port()
	probe := func(addr string) string {
		return fmt.Sprintf(`
        command: ["/bin/sh", "-c", "if nc -w 3 %s %d </dev/null >/dev/null 2>&1; then echo PROBE=OPEN >&2; else echo PROBE=CLOSED >&2; fi; exec /usr/local/bin/memory"]`, addr, port)
	}
	config := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf(`profiles:
  egress:
    image: %[1]s
    mcp_servers:
      - name: none
        image: %[2]s%[3]s
      - name: open
        image: %[2]s
        network: bridge%[3]s
      - name: allowed
        image: %[2]s
        network: bridge
        allow_hosts: [%[4]s]%[3]s
      - name: denied
        image: %[2]s
        network: bridge
        allow_hosts: [%[4]s]%[5]s
      - name: web
        image: %[6]s
        args: ["-http", "0.0.0.0:8080"]
        transport: http
        port: 8080
        path: /
        network: bridge
        allow_hosts: [%[4]s]
`, testImage, memoryImage, probe(tn.allowed), tn.allowed, probe(tn.other), everythingImage)
	if err := os.WriteFile(config, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	rig := startSidecarServe(ctx, t, "--config", config)
	// serve learned the profile's tools before it listened: that probe
	// ran the sidecars once already.
	before := tn.counts()
	sess, err := rig.c.CreateSession(ctx, client.CreateOptions{Profile: "egress"}) // eager: they probe now
	if err != nil {
		t.Fatal(err)
	}
	for _, srv := range []string{"none", "open", "allowed", "denied"} {
		if obs, err := sess.Call(ctx, srv+"__read_graph", map[string]any{}, nil); err != nil || obs.IsError {
			t.Fatalf("%s__read_graph: %v %s", srv, err, obs.Text())
		}
	}
	// The HTTP sidecar keeps its private network to the daemon beside
	// its egress network.
	if obs, err := sess.Call(ctx, "web__greet", map[string]any{"name": "egress"}, nil); err != nil || obs.IsError || !strings.Contains(obs.Text(), "egress") {
		t.Fatalf("web__greet: %v %s", err, obs.Text())
	}
	want := map[string]string{"none": "PROBE=CLOSED", "open": "PROBE=OPEN", "allowed": "PROBE=OPEN", "denied": "PROBE=CLOSED"}
	for srv, w := range want {
		logs, err := exec.CommandContext(ctx, "docker", "logs", "sandboxd-"+sess.ID+"-mcp-"+srv).CombinedOutput()
		if err != nil {
			t.Fatalf("docker logs %s: %v %s", srv, err, logs)
		}
		if !strings.Contains(string(logs), w) {
			t.Errorf("sidecar %s: want %s, its log says:\n%s", srv, w, logs)
		}
	}
	after := tn.counts()
	if got := after[tn.allowed] - before[tn.allowed]; got != 2 {
		t.Errorf("the listener saw %d connections to %s, want 2 (open, allowed)", got, tn.allowed)
	}
	if got := after[tn.other] - before[tn.other]; got != 0 {
		t.Errorf("the listener saw %d connections to %s, want 0 (denied is held to allow_hosts)", got, tn.other)
	}

	netsOf := func() []string {
		f := filters.NewArgs(filters.Arg("label", labelRun+"="+runID), filters.Arg("label", sandbox.LabelSession+"="+sess.ID))
		nets, err := engine.NetworkList(ctx, network.ListOptions{Filters: f})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, n := range nets {
			names = append(names, n.Name)
		}
		return names
	}
	rules := func() string {
		out, err := exec.CommandContext(ctx, "iptables", "-S").CombinedOutput()
		if err != nil {
			t.Fatalf("iptables -S: %v %s", err, out)
		}
		var mine []string
		for line := range strings.Lines(string(out)) {
			if strings.Contains(line, ":"+sess.ID) {
				mine = append(mine, line)
			}
		}
		return strings.Join(mine, "")
	}
	nets := strings.Join(netsOf(), " ")
	for _, srv := range []string{"open", "allowed", "denied", "web"} {
		if !strings.Contains(nets, "sandboxd-egress-"+sess.ID+"-"+srv) {
			t.Errorf("no egress network for %s among %s", srv, nets)
		}
	}
	if strings.Contains(nets, "sandboxd-egress-"+sess.ID+"-none") {
		t.Error("a sidecar without network: bridge has an egress network")
	}
	if r := rules(); !strings.Contains(r, ":"+sess.ID+"/allowed") || !strings.Contains(r, ":"+sess.ID+"/open") {
		t.Errorf("the egress networks' firewall rules are missing:\n%s", r)
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if left := netsOf(); len(left) != 0 {
		t.Errorf("networks left after Close: %v", left)
	}
	if r := rules(); r != "" {
		t.Errorf("firewall rules left after Close:\n%s", r)
	}
	rig.serve.stop(t)
	waitNoContainers(t, "after the egress session")
}

// egressNet is a network namespace with two addresses (.2 and .3 of a free
// /29) behind a veth pair whose host end is .1, and a TCP listener on both:
// a place outside the engine that sidecars reach through the host's
// forwarding and NAT, like any egress, but that the test made (as
// e2e/network_test.go's testNet, on other candidate subnets so the two
// packages may run at once).
type egressNet struct {
	allowed, other string
	ln             net.Listener
	mu             sync.Mutex
	seen           map[string]int // connections by the address dialled
}

func newEgressNet(t *testing.T) *egressNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root")
	}
	suffix := runID[:6]
	ns, hostIf, nsIf := "sbxsc-"+suffix, "sbxs"+suffix+"h", "sbxs"+suffix+"n"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	ip("link", "set", nsIf, "netns", ns)
	subnet := freeEgressSubnet(t)
	addr := func(n int) netip.Addr {
		a := subnet.Addr()
		for range n {
			a = a.Next()
		}
		return a
	}
	ip("addr", "add", netip.PrefixFrom(addr(1), 29).String(), "dev", hostIf)
	ip("link", "set", hostIf, "up")
	for _, n := range []int{2, 3} {
		ip("-n", ns, "addr", "add", netip.PrefixFrom(addr(n), 29).String(), "dev", nsIf)
	}
	ip("-n", ns, "link", "set", nsIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")
	ln, err := testenv.ListenInNetns(ns, "tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	e := &egressNet{allowed: addr(2).String(), other: addr(3).String(), ln: ln, seen: map[string]int{}}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.LocalAddr().String())
			e.mu.Lock()
			e.seen[host]++
			e.mu.Unlock()
			_ = c.Close()
		}
	}()
	return e
}

func (e *egressNet) port() int { return e.ln.Addr().(*net.TCPAddr).Port }

func (e *egressNet) counts() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.seen)
}

// freeEgressSubnet picks a /29 that overlaps no address and no route of
// this machine (candidates apart from e2e's, which may run at once).
func freeEgressSubnet(t *testing.T) netip.Prefix {
	t.Helper()
	p, err := testenv.FreeSubnet("198.18.214.0/29", "198.19.214.0/29", "100.127.214.0/29", "10.213.78.0/29")
	if err != nil {
		t.Skipf("for the test's namespace: %v", err)
	}
	return p
}
