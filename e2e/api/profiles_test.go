package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/auth"
)

// profilesConfig is a config of two profiles that differ in env and cwd;
// alpha keeps a warm pool of one.
func profilesConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf(`# two kinds of session
profiles:
  alpha:
    image: %[1]s
    env: {X: from-alpha}
    cwd: /tmp
    pool: 1
  beta:
    image: %[1]s
    env:
      X: from-beta
    cwd: /workspace
`, testImage)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// inSandbox is what the tests read inside a sandbox: $X, the working
// directory, and the id of the container (from its own mounts).
const inSandbox = `echo "X=$X"; pwd; grep -o 'containers/[0-9a-f]\{64\}' /proc/self/mountinfo | head -1 | cut -d/ -f2`

type seen struct{ x, cwd, container string }

func parseSeen(t *testing.T, out string) seen {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 3 || !strings.HasPrefix(lines[0], "X=") || len(strings.TrimSpace(lines[2])) != 64 {
		t.Fatalf("unexpected output of %q: %q", inSandbox, out)
	}
	return seen{strings.TrimPrefix(lines[0], "X="), strings.TrimSpace(lines[1]), strings.TrimSpace(lines[2])}
}

// pooledContainer waits for the server's warm pool to hold exactly one
// ready sandbox (its /metrics say so: a started container may not answer
// yet) and returns its container's id.
func pooledContainer(ctx context.Context, t *testing.T, base, token, scope string) string {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", labelTest+"="+scope), filters.Arg("status", "running"))
	for {
		if poolReady(ctx, t, base, token) == "1" {
			ctrs, err := engine.ContainerList(ctx, container.ListOptions{Filters: f})
			if err != nil {
				t.Fatal(err)
			}
			var pooled []string
			for _, c := range ctrs {
				if len(c.Names) == 1 && strings.HasPrefix(c.Names[0], "/sandboxd-pool-") {
					pooled = append(pooled, c.ID)
				}
			}
			if len(pooled) != 1 {
				t.Fatalf("%d pooled containers, want the pool's 1", len(pooled))
			}
			return pooled[0]
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the warm pool was not refilled: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// poolReady is the value of sandboxd_pool_size in the server's /metrics.
func poolReady(ctx context.Context, t *testing.T, base, token string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "sandboxd_pool_size "); ok {
			return v
		}
	}
	t.Fatalf("no sandboxd_pool_size in /metrics:\n%s", body)
	return ""
}

func mcpConnectPath(ctx context.Context, base, path, token, version string) (*mcp.ClientSession, error) {
	var opts *mcp.ClientSessionOptions
	if version != "" {
		opts = &mcp.ClientSessionOptions{ProtocolVersion: version}
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-profiles", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   base + path,
		HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}},
		MaxRetries: -1,
	}, opts)
}

func mcpText(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) string {
	t.Helper()
	res, text := callResult(ctx, t, cs, name, args)
	if res.IsError {
		t.Fatalf("%s: %s", name, text)
	}
	return text
}

// `sandboxd serve --config` with two profiles: /mcp/NAME serves profile
// NAME to legacy and stateless MCP clients, session.create takes a profile
// over WebSocket (and `sandboxd run --profile`), each session shows its
// profile's env and cwd, and sessions of the pooled profile, through every
// API, are handed the pool's sandbox. An unknown profile is refused by both
// APIs, naming the defined ones.
func TestProfilesServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	state := t.TempDir()
	scope := auth.NewToken()[:12]
	serve := startServe(t, state, "--config", profilesConfig(t), "--label", labelTest+"="+scope, "--log-level", "debug")
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	base := "http" + strings.TrimSuffix(strings.TrimPrefix(serve.url, "ws"), "/v1/ws")

	// Legacy MCP (one sandbox per MCP session) on /mcp/alpha: the pooled one.
	warm := pooledContainer(ctx, t, base, token, scope)
	alpha, err := mcpConnectPath(ctx, base, "/mcp/alpha", token, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	got := parseSeen(t, mcpText(ctx, t, alpha, "terminal", map[string]any{"command": inSandbox}))
	if got != (seen{"from-alpha", "/tmp", warm}) {
		t.Fatalf("legacy MCP on /mcp/alpha: %+v, want alpha's env and cwd in the pooled container %s\n%s", got, warm, serve.logs())
	}
	// ... and on /mcp/beta, beta's (no pool: cold).
	beta, err := mcpConnectPath(ctx, base, "/mcp/beta", token, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	if got := parseSeen(t, mcpText(ctx, t, beta, "terminal", map[string]any{"command": inSandbox})); got.x != "from-beta" || got.cwd != "/workspace" {
		t.Fatalf("legacy MCP on /mcp/beta: %+v", got)
	}

	// Stateless MCP (2026-07-28) on /mcp/alpha: sandbox_open is handed the
	// refilled pool's sandbox.
	warm = pooledContainer(ctx, t, base, token, scope)
	modern, err := mcpConnectPath(ctx, base, "/mcp/alpha", token, "")
	if err != nil {
		t.Fatal(err)
	}
	if v := modern.InitializeResult().ProtocolVersion; v != "2026-07-28" {
		t.Fatalf("negotiated %s", v)
	}
	open, err := modern.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_open", Arguments: map[string]any{}})
	if err != nil || open.IsError {
		t.Fatalf("sandbox_open: %v %+v", err, open)
	}
	handle, _ := open.StructuredContent.(map[string]any)["sandbox"].(string)
	got = parseSeen(t, mcpText(ctx, t, modern, "terminal", map[string]any{"sandbox": handle, "command": inSandbox}))
	if got != (seen{"from-alpha", "/tmp", warm}) {
		t.Fatalf("stateless MCP on /mcp/alpha: %+v, want alpha's env and cwd in the pooled container %s", got, warm)
	}
	mcpText(ctx, t, modern, "sandbox_close", map[string]any{"sandbox": handle})

	// WebSocket session.create with a profile, and with a field over it.
	warm = pooledContainer(ctx, t, base, token, scope)
	c, err := client.Dial(ctx, serve.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	wsSeen := func(opts client.CreateOptions) seen {
		t.Helper()
		s, err := c.CreateSession(ctx, opts)
		if err != nil {
			t.Fatalf("create %+v: %v", opts, err)
		}
		defer s.Close(ctx)
		obs, err := s.Call(ctx, "terminal", map[string]any{"command": inSandbox}, nil)
		if err != nil || obs.IsError {
			t.Fatalf("terminal: %v %+v", err, obs)
		}
		return parseSeen(t, obs.Text())
	}
	if got := wsSeen(client.CreateOptions{Profile: "alpha"}); got != (seen{"from-alpha", "/tmp", warm}) {
		t.Fatalf("session.create profile alpha: %+v, want the pooled container %s", got, warm)
	}
	if got := wsSeen(client.CreateOptions{Profile: "beta", Env: map[string]string{"X": "mine"}, Cwd: "/tmp"}); got.x != "mine" || got.cwd != "/tmp" {
		t.Fatalf("session.create profile beta with env and cwd over it: %+v", got)
	}

	// The CLI.
	out, err := exec.CommandContext(ctx, binary, "run", "--server", serve.url, "--state-dir", state, "--profile", "beta", "--", `echo "X=$X"; pwd`).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "X=from-beta\n/workspace") {
		t.Fatalf("run --profile beta: %v: %q", err, out)
	}

	shell := exec.CommandContext(ctx, binary, "shell", "--server", serve.url, "--state-dir", state, "--profile", "alpha")
	shell.Stdin = strings.NewReader("echo \"X=$X\"; pwd\n")
	out, err = shell.Output()
	if err != nil || !strings.Contains(string(out), "X=from-alpha\n/tmp") {
		t.Fatalf("shell --profile alpha: %v: %q", err, out)
	}

	// An unknown profile: refused by both APIs, with the defined ones.
	const unknown = `unknown profile "nope" (defined: alpha, beta)`
	if _, err := c.CreateSession(ctx, client.CreateOptions{Profile: "nope"}); err == nil || !strings.Contains(err.Error(), unknown) {
		t.Fatalf("session.create with an unknown profile: %v", err)
	}
	for _, version := range []string{"2025-11-25", ""} {
		_, err := mcpConnectPath(ctx, base, "/mcp/nope", token, version)
		if err == nil || !strings.Contains(err.Error(), unknown) || !strings.Contains(err.Error(), "/mcp, /mcp/alpha, /mcp/beta") {
			t.Fatalf("MCP (%q) at /mcp/nope: %v", version, err)
		}
	}
	out, err = exec.CommandContext(ctx, binary, "run", "--server", serve.url, "--state-dir", state, "--profile", "nope", "--", "true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), unknown) {
		t.Fatalf("run --profile nope: %v: %q", err, out)
	}

	if err := alpha.Close(); err != nil {
		t.Errorf("closing the MCP session: %v", err)
	}
	if err := beta.Close(); err != nil {
		t.Errorf("closing the MCP session: %v", err)
	}
	_ = modern.Close()
	serve.stop(t)
	waitNoContainers(t, "after serve with profiles stopped")
}

// A bad config refuses the start with file:line, option and reason: one
// that does not parse before anything touches Docker, one whose profile
// Validate refuses after the flags' defaults are known.
func TestProfilesServeRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, src, want string }{
		{"size", "profiles:\n  fuzz:\n    limits:\n      memory: 2 GB\n",
			`config.yaml:4:15: profiles.fuzz.limits.memory: "2 GB" is not a size (e.g. 2GiB)`},
		{"validate", "profiles:\n  ok: {}\n  fuzz:\n    image: " + testImage + "\n    limits:\n      memory: 32MiB\n",
			`config.yaml:6:7: profiles.fuzz.limits.memory: 32 MiB is below the minimum of 64 MiB`},
		{"unknown key", "profiles:\n  fuzz:\n    mcp_servers:\n      - name: m\n        imagee: x\n",
			`config.yaml:5:9: profiles.fuzz.mcp_servers[0].imagee: unknown key (known here: allow_hosts, args, command, env, image, limits, name, network, path, port, secrets, start, transport, user, workspace)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.name, "config.yaml")
			if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, []byte(c.src), 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, binary, "serve", "--listen", "127.0.0.1:0", "--state-dir", t.TempDir(),
				"--image", testImage, "--label", labelRun+"="+runID, "--label", labelTest+"="+testScope(t), "--disk-dir", diskDir, "--config", path)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != 1 {
				t.Fatalf("serve with a bad config: %v, want exit 1\n%s", err, stderr.String())
			}
			if want := "sandboxd serve: " + path[:len(path)-len("config.yaml")] + c.want; !strings.Contains(stderr.String(), want) {
				t.Fatalf("stderr lacks %q:\n%s", want, stderr.String())
			}
			if strings.Contains(stderr.String(), "serving") {
				t.Fatalf("serve started:\n%s", stderr.String())
			}
		})
	}
}
