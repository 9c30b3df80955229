package api

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/auth"
)

// A warm pool that follows demand (`pool: {min: 1, max: 4, idle: 10s}` on
// the default profile): the default MCP endpoint /mcp and `sandboxd run`
// without a profile are handed its sandbox; a burst of creates larger than
// the pool all succeed and grow it; once the claims stop it shrinks back to
// min, and nothing is left but its one sandbox.
func TestElasticPoolServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and a burst of sandboxes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	state := t.TempDir()
	scope := auth.NewToken()[:12]
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf("profiles:\n  default:\n    image: %s\n    env: {X: from-default}\n    cwd: /tmp\n    pool: {min: 1, max: 4, idle: 10s}\n", testImage)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	serve := startServe(t, state, "--config", cfg, "--label", labelTest+"="+scope)
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	base := "http" + strings.TrimSuffix(strings.TrimPrefix(serve.url, "ws"), "/v1/ws")

	// Legacy MCP on /mcp: the default profile's pooled sandbox.
	warm := pooledContainers(ctx, t, base, token, scope)
	mc, err := mcpConnectPath(ctx, base, "/mcp", token, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	if got := parseSeen(t, mcpText(ctx, t, mc, "terminal", map[string]any{"command": inSandbox})); got.x != "from-default" || got.cwd != "/tmp" || !warm[got.container] {
		t.Fatalf("MCP on /mcp: %+v, want one of the pooled containers %v\n%s", got, warm, serve.logs())
	}
	if err := mc.Close(); err != nil {
		t.Errorf("closing the MCP session: %v", err)
	}

	// `sandboxd run` without a profile: the refilled pool's sandbox.
	warm = pooledContainers(ctx, t, base, token, scope)
	out, err := exec.CommandContext(ctx, binary, "run", "--server", serve.url, "--state-dir", state, "--", inSandbox).CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v: %q", err, out)
	}
	if got := parseSeen(t, string(out)); got.x != "from-default" || got.cwd != "/tmp" || !warm[got.container] {
		t.Fatalf("sandboxd run: %+v, want one of the pooled containers %v", got, warm)
	}

	// A burst of 8 creates, larger than the pool's max: every one answers.
	// From its start, /metrics is watched for the pool growing (on a loaded
	// machine the burst may outlast the growth).
	grew := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		for watchCtx.Err() == nil {
			if v, err := metricValue(watchCtx, base, token, "sandboxd_pool_size"); err == nil && v != "0" && v != "1" {
				close(grew)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	c, err := client.Dial(ctx, serve.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := range 8 {
		wg.Go(func() {
			s, err := c.CreateSession(ctx, client.CreateOptions{})
			if err != nil {
				errs <- fmt.Errorf("create %d: %w", i, err)
				return
			}
			defer s.Close(ctx)
			obs, err := s.Call(ctx, "terminal", map[string]any{"command": "echo burst-ok"}, nil)
			if err != nil || obs.IsError || !strings.Contains(obs.Text(), "burst-ok") {
				errs <- fmt.Errorf("session %d: %v %+v", i, err, obs)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	// The claims grew the pool above its min; it shrinks back once they
	// leave the 10 s window and the surplus has been idle for 10 s.
	select {
	case <-grew:
	case <-ctx.Done():
		t.Fatalf("the pool did not grow above its min: %v\n%s", ctx.Err(), serve.logs())
	}
	for poolReady(ctx, t, base, token) != "1" {
		select {
		case <-ctx.Done():
			t.Fatalf("the pool did not shrink back to its min: %v (ready %s)\n%s", ctx.Err(), poolReady(context.Background(), t, base, token), serve.logs())
		case <-time.After(100 * time.Millisecond):
		}
	}
	if v, err := metricValue(ctx, base, token, "sandboxd_pool_target"); err != nil || v != "1" {
		t.Errorf("sandboxd_pool_target %q (%v), want the min 1", v, err)
	}

	// Nothing leaked: the scope's only container is the pool's one.
	f := filters.NewArgs(filters.Arg("label", labelTest+"="+scope))
	for {
		ctrs, err := engine.ContainerList(ctx, container.ListOptions{All: true, Filters: f})
		if err != nil {
			t.Fatal(err)
		}
		if len(ctrs) == 1 && strings.HasPrefix(ctrs[0].Names[0], "/sandboxd-pool-") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("containers left besides the pool's one: %d", len(ctrs))
		case <-time.After(100 * time.Millisecond):
		}
	}
	serve.stop(t)
}

// pooledContainers waits for the server's warm pool to hold a ready sandbox
// and returns the ids of its containers (a pool that follows demand may be
// starting more).
func pooledContainers(ctx context.Context, t *testing.T, base, token, scope string) map[string]bool {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", labelTest+"="+scope), filters.Arg("status", "running"))
	for poolReady(ctx, t, base, token) == "0" {
		select {
		case <-ctx.Done():
			t.Fatalf("the warm pool was not refilled: %v", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	ctrs, err := engine.ContainerList(ctx, container.ListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	pooled := map[string]bool{}
	for _, c := range ctrs {
		if len(c.Names) == 1 && strings.HasPrefix(c.Names[0], "/sandboxd-pool-") {
			pooled[c.ID] = true
		}
	}
	return pooled
}

// metricValue is the value of an unlabelled metric in the server's /metrics.
func metricValue(ctx context.Context, base, token, name string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in /metrics", name)
}
