package api

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/server/auth"
)

// harnessTaskImage is the benchmark task image (`make task-image`).
func harnessTaskImage(t *testing.T) string {
	t.Helper()
	img := os.Getenv("SANDBOXD_TASK_IMAGE")
	if img == "" {
		img = "sandboxd-task:latest"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := engine.ImageInspect(ctx, img); err != nil {
		if os.Getenv("SANDBOXD_E2E_REQUIRE_IMAGES") != "" {
			t.Fatalf("%s is not on the engine although SANDBOXD_E2E_REQUIRE_IMAGES is set: %v", img, err)
		}
		t.Skipf("%s is not on the engine (make task-image): %v", img, err)
	}
	return img
}

// docs/harness.md, through `serve --config` and both APIs: a hardened
// profile (editable paths) over WebSocket and the image's-user profile
// over MCP, each fixing the task's bug and passing its evaluation in the
// same session; a request's own editable_paths; a request for the image's
// user refused.
func TestHarnessServe(t *testing.T) {
	img := harnessTaskImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	state := t.TempDir()
	scope := auth.NewToken()[:12]
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`profiles:
  swe:
    image: %[1]s
    editable_paths: [/testbed, /opt/venv]
  swe-as-image:
    image: %[1]s
    user: image
    writable_rootfs: true
`, img)), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := startServe(t, state, "--config", config, "--label", labelTest+"="+scope)
	defer serve.stop(t)
	t.Cleanup(func() { // the agent volume of the writable root, this server's own
		vols, err := engine.VolumeList(context.Background(), volume.ListOptions{Filters: filters.NewArgs(
			filters.Arg("label", labelTest+"="+scope), filters.Arg("label", sdocker.LabelAgent))})
		if err != nil {
			t.Error(err)
			return
		}
		for _, v := range vols.Volumes {
			if err := engine.VolumeRemove(context.Background(), v.Name, false); err != nil {
				t.Error(err)
			}
		}
	})
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	base := "http" + strings.TrimSuffix(strings.TrimPrefix(serve.url, "ws"), "/v1/ws")
	const fix = `{"command":"str_replace","path":"/testbed/calc/stats.py","old_str":"return sum(xs) / (len(xs) + 1)","new_str":"return sum(xs) / len(xs)"}`

	// WebSocket, the hardened profile.
	c, err := client.Dial(ctx, serve.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.CreateSession(ctx, client.CreateOptions{Profile: "swe"})
	if err != nil {
		t.Fatalf("create swe: %v\n%s", err, serve.logs())
	}
	call := func(s *client.Session, tool string, args any) map[string]any {
		t.Helper()
		obs, err := s.Call(ctx, tool, args, nil)
		if err != nil || obs.IsError {
			t.Fatalf("%s %v: %v %s", tool, args, err, obs.Text())
		}
		st, _ := obs.Structured.(map[string]any)
		return st
	}
	call(s, "file_editor", rawJSON(fix))
	if st := call(s, "terminal", map[string]any{"command": "id -u; run_tests.sh >/tmp/eval.log 2>&1", "timeout": 300}); st["exit_code"] != float64(0) {
		t.Fatalf("run_tests.sh after the fix: %v", st)
	}
	call(s, "terminal", map[string]any{"command": "git -C /testbed diff > /workspace/model.patch", "timeout": 300})
	var tarball bytes.Buffer
	if err := s.Download(ctx, "/workspace/model.patch", &tarball); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&tarball)
	if _, err := tr.Next(); err != nil {
		t.Fatal(err)
	}
	patch, _ := io.ReadAll(tr)
	if !strings.Contains(string(patch), "-    return sum(xs) / (len(xs) + 1)\n+    return sum(xs) / len(xs)\n") {
		t.Fatalf("the patch: %q", patch)
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// A request's own editable paths, no profile.
	s, err = c.CreateSession(ctx, client.CreateOptions{Image: img, EditablePaths: []string{"/testbed"}})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := s.Call(ctx, "terminal", map[string]any{"command": "pwd; id -u; stat -c %u /testbed/setup.py; touch /opt/venv/x", "timeout": 300}, nil)
	if err != nil || !strings.Contains(obs.Text(), "/testbed\n1000\n1000\n") || !strings.Contains(obs.Text(), "Read-only file system") {
		t.Fatalf("editable_paths on the request: %v %q", err, obs.Text())
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}

	// The image's user is the operator's to give, in a profile only.
	if _, err := c.CreateSession(ctx, client.CreateOptions{Profile: "swe-as-image", User: "image"}); err == nil ||
		!strings.Contains(err.Error(), `only a session profile of the server's config`) {
		t.Fatalf("a request for the image's user: %v", err)
	}

	// MCP (2026-07-28) on the image's-user profile.
	cs, err := mcpConnectPath(ctx, base, "/mcp/swe-as-image", token, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	open, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_open", Arguments: map[string]any{}})
	if err != nil || open.IsError {
		t.Fatalf("sandbox_open: %v %+v\n%s", err, open, serve.logs())
	}
	sb, _ := open.StructuredContent.(map[string]any)["sandbox"].(string)
	if out := mcpText(ctx, t, cs, "terminal", map[string]any{"sandbox": sb, "command": "id -u; pwd"}); !strings.HasPrefix(out, "0\n/testbed\n") {
		t.Fatalf("as the image's user: %q", out)
	}
	args := map[string]any{"sandbox": sb}
	for k, v := range rawJSON(fix) {
		args[k] = v
	}
	mcpText(ctx, t, cs, "file_editor", args)
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "terminal", Arguments: map[string]any{"sandbox": sb, "command": "run_tests.sh >/tmp/eval.log 2>&1", "timeout": 300}})
	if err != nil || res.IsError || res.StructuredContent.(map[string]any)["exit_code"] != float64(0) {
		t.Fatalf("run_tests.sh over MCP: %v %+v", err, res)
	}
	mcpText(ctx, t, cs, "sandbox_close", map[string]any{"sandbox": sb})
}

// rawJSON is a JSON object as a map.
func rawJSON(s string) map[string]any {
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		panic(err)
	}
	return m
}
