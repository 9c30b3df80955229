package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/egress/inject"
	"github.com/sandboxd/sandboxd/server/daemon"
)

// A profile with an inject rule, served by a daemon as `serve --config
// --secrets-file` assembles it (decision 0051): the session made through
// the WebSocket API holds the placeholder under the secret's name and the
// CA bundle, and the secret's value is nowhere in the sandbox's
// environment, its container's inspect data, nor the daemon's log (debug
// level); the CA key is 0600 in the state dir. A profile naming a secret
// the daemon lacks refuses the start at its line. Reaching the host is
// e2e's TestInjectSecretOnTheWayOut.
func TestInjectProfileHoldsOnlyThePlaceholder(t *testing.T) {
	const secret = "sbx-api-e2e-REAL-value-77c1"
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.yaml")
	src := fmt.Sprintf(`profiles:
  inj:
    image: %s
    network: bridge
    allow_hosts: [api.inject.sandboxd.test]
    inject:
      - host: api.inject.sandboxd.test
        header: Authorization
        value: "Bearer ${API_TOKEN}"
`, testImage)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets := filepath.Join(dir, "secrets")
	if err := os.WriteFile(secrets, []byte("API_TOKEN="+secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// A secret the daemon lacks: refused at the rule's line.
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := daemon.New(ctx, daemonConfig(t, func(c *daemon.Config) { c.ConfigPath, c.SecretsFile = cfg, empty })); err == nil ||
		!strings.Contains(err.Error(), cfg+":9:9: profiles.inj.inject[0].value: the daemon has no secret API_TOKEN") {
		t.Fatalf("a missing secret: %v", err)
	}

	logs := &syncBuffer{}
	var state string
	d := newDaemon(t, func(c *daemon.Config) {
		c.ConfigPath, c.SecretsFile = cfg, secrets
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		state = c.StateDir
	})
	hs := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer scancel()
		_ = d.Shutdown(sctx)
		hs.CloseClientConnections()
		hs.Close()
	})
	st, err := os.Stat(filepath.Join(state, "inject", inject.KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the CA key: %v %v", st, err)
	}

	c, err := client.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/v1/ws", d.Token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.CreateSession(ctx, client.CreateOptions{Profile: "inj"})
	if err != nil {
		t.Fatal(err)
	}
	obs, err := s.Call(ctx, "terminal", map[string]any{"command": `echo "T=$API_TOKEN"; grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE"; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c '^API_TOKEN=sandboxd-placeholder-'`}, nil)
	if err != nil || obs.IsError {
		t.Fatalf("terminal: %v %+v", err, obs)
	}
	out := obs.Text()
	if !strings.Contains(out, "T="+inject.PlaceholderPrefix+"API_TOKEN-") || strings.Contains(out, secret) {
		t.Fatalf("the sandbox's view: %q", out)
	}
	if lines := strings.Split(out, "\n"); len(lines) < 3 || lines[1] != "1" {
		t.Fatalf("the bundle of an image without roots is the CA alone: %q", out)
	}

	ctrs, err := engine.ContainerList(ctx, container.ListOptions{Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+s.ID))})
	if err != nil || len(ctrs) != 1 {
		t.Fatalf("the session's container: %v %d", err, len(ctrs))
	}
	info, err := engine.ContainerInspect(ctx, ctrs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := json.Marshal(info)
	if bytes.Contains(raw, []byte(secret)) || !bytes.Contains(raw, []byte(inject.PlaceholderPrefix+"API_TOKEN-")) {
		t.Fatal("docker inspect holds the secret, or not the placeholder")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), secret) {
		t.Fatalf("the daemon logged the secret:\n%s", logs.String())
	}
}

// syncBuffer is a log buffer many goroutines write.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
