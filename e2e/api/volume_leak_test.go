package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/daemon"
)

// labelLeak gives a daemon of these tests a runtime scope of its own, so
// its agent volume is its own (daemons of one scope share it).
const labelLeak = "sandboxd.e2e-api.leak"

// scopeVolumes are the volumes of this run with label=value: the session
// volumes and the shared agent volume of that scope.
func scopeVolumes(t *testing.T, value string) []string {
	t.Helper()
	vols, err := engine.VolumeList(context.Background(), volume.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", labelRun+"="+runID), filters.Arg("label", labelLeak+"="+value))})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, v := range vols.Volumes {
		names = append(names, v.Name)
	}
	return names
}

// writableDaemon is an in-process daemon, of a scope of its own, whose
// profile "wr" has a writable root filesystem (its agent binary in the
// shared sandboxd-agent-* volume).
func writableDaemon(t *testing.T) (d *daemon.Daemon, base, scope string) {
	t.Helper()
	scope = auth.NewToken()[:12]
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("profiles:\n  wr:\n    writable_rootfs: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d = newDaemon(t, func(c *daemon.Config) {
		c.ConfigPath = config
		c.Labels = daemon.KeyValues{labelRun: runID, labelLeak: scope}
	})
	hs := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		hs.CloseClientConnections()
		hs.Close()
	})
	t.Cleanup(func() { // what a failed run left, so the suite's leftover check names only this test
		for _, v := range scopeVolumes(t, scope) {
			_ = engine.VolumeRemove(context.Background(), v, true)
		}
	})
	return d, hs.URL, scope
}

// openWritable opens a writable-root session over MCP (left open) and one
// over WebSocket (closed), each after a call, as a harness would.
func openWritable(ctx context.Context, t *testing.T, d *daemon.Daemon, base, scope string) {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: base + "/mcp/wr", HTTPClient: &http.Client{Transport: bearer{d.Token, http.DefaultTransport}}, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"command": "touch /etc/written && echo ok"}})
	if err != nil || res.IsError {
		t.Fatalf("terminal over MCP: %v %+v", err, res)
	}

	c, err := client.Dial(ctx, "ws"+strings.TrimPrefix(base, "http")+"/v1/ws", d.Token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.CreateSession(ctx, client.CreateOptions{Profile: "wr"})
	if err != nil {
		t.Fatal(err)
	}
	if obs, err := s.Call(ctx, "terminal", map[string]any{"command": "touch /usr/written"}, nil); err != nil || obs.IsError {
		t.Fatalf("terminal over WebSocket: %v %s", err, obs.Text())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	agent := false
	for _, v := range scopeVolumes(t, scope) {
		agent = agent || strings.HasPrefix(v, "sandboxd-agent-")
	}
	if !agent {
		t.Fatalf("no sandboxd-agent-* volume while a writable-root session runs: %v", scopeVolumes(t, scope))
	}
}

// Issue 24: a writable_rootfs session leaves a sandboxd-agent-* volume
// after shutdown. A clean shutdown with one such session open over MCP and
// one closed over WebSocket leaves no volume at all.
func TestWritableRootLeavesNoVolume(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, base, scope := writableDaemon(t)
	openWritable(ctx, t, d, base, scope)
	if err := d.Shutdown(ctx); err != nil {
		t.Fatalf("shutdown: %v", err)
	}
	if left := scopeVolumes(t, scope); len(left) > 0 {
		t.Fatalf("volumes left after shutdown: %v", left)
	}
}

// A shutdown whose deadline passes while sessions are still being removed
// (many sandboxes, a loaded engine) returns with the removals still
// running; the runtime's close must wait for them before it removes the
// shared volumes, else the agent volume, still mounted at that moment,
// stays behind for good.
func TestWritableRootLeavesNoVolumeAfterLateShutdown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, base, scope := writableDaemon(t)
	openWritable(ctx, t, d, base, scope)
	late, lateCancel := context.WithCancel(ctx)
	lateCancel() // the shutdown's time is up before it starts
	_ = d.Shutdown(late)
	// The removals go on in the background: once they are done (1 min
	// bounds a hang), nothing may be left.
	var ctrs, vols []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if ctrs, vols = containersOf(t, scope), scopeVolumes(t, scope); len(ctrs)+len(vols) == 0 {
			return
		}
	}
	t.Fatalf("left a minute after a late shutdown: containers %v, volumes %v", ctrs, vols)
}

// containersOf are the containers of this run with labelLeak=scope.
func containersOf(t *testing.T, scope string) []string {
	t.Helper()
	ctrs, err := engine.ContainerList(context.Background(), container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", labelRun+"="+runID), filters.Arg("label", labelLeak+"="+scope))})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range ctrs {
		names = append(names, strings.Join(c.Names, ","))
	}
	return names
}
