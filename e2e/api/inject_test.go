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
	"github.com/sandboxd/sandboxd/server/auth"
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
	dir := t.TempDir()
	cfg, secrets := injectFiles(t, dir, testImage)

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
	if !strings.Contains(out, "T="+inject.PlaceholderPrefix+"API_TOKEN-") || strings.Contains(out, injectSecret) {
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
	if bytes.Contains(raw, []byte(injectSecret)) || !bytes.Contains(raw, []byte(inject.PlaceholderPrefix+"API_TOKEN-")) {
		t.Fatal("docker inspect holds the secret, or not the placeholder")
	}
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), injectSecret) {
		t.Fatalf("the daemon logged the secret:\n%s", logs.String())
	}
}

const injectSecret = "sbx-api-e2e-REAL-value-77c1"

// injectFiles writes a config whose profile inj injects API_TOKEN into
// requests to api.inject.sandboxd.test (a name that resolves nowhere), and
// a --secrets-file holding it.
func injectFiles(t *testing.T, dir, image string) (cfg, secrets string) {
	t.Helper()
	cfg = filepath.Join(dir, "config.yaml")
	src := fmt.Sprintf(`profiles:
  inj:
    image: %s
    network: bridge
    allow_hosts: [api.inject.sandboxd.test]
    inject:
      - host: api.inject.sandboxd.test
        header: Authorization
        value: "Bearer ${API_TOKEN}"
`, image)
	if err := os.WriteFile(cfg, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	secrets = filepath.Join(dir, "secrets")
	if err := os.WriteFile(secrets, []byte("API_TOKEN="+injectSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, secrets
}

// The real serve with --keep-sessions: after a restart the adopted
// session's egress proxy hands TLS to its inject host to the injector
// again (rebuilt from the container's options label with the daemon's
// secrets). The host resolves nowhere, so what answers is the injector
// itself: the sandbox's curl trusts its certificate and gets its 502
// naming the host, before and after; without the injector the proxy would
// close the connection. Neither serve logs the value.
func TestInjectorOverRestart(t *testing.T) {
	state, dir := t.TempDir(), t.TempDir()
	cfg, secrets := injectFiles(t, dir, "sandboxd-default:latest")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	first := startServe(t, state, "--keep-sessions", "--config", cfg, "--secrets-file", secrets)
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(ctx, first.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.CreateSession(ctx, client.CreateOptions{Profile: "inj"})
	if err != nil {
		t.Fatal(err)
	}
	const ask = `curl -sS -w ' %{http_code}' https://api.inject.sandboxd.test/ -H "Authorization: Bearer $API_TOKEN"`
	const want = "sandboxd egress: api.inject.sandboxd.test:443 could not be reached"
	obs, err := s.Call(ctx, "terminal", map[string]any{"command": ask}, nil)
	if err != nil || !strings.Contains(obs.Text(), want) || !strings.Contains(obs.Text(), " 502") {
		t.Fatalf("before the restart: %v %q", err, obs.Text())
	}
	c.Close()
	first.stop(t)

	second := startServe(t, state, "--config", cfg, "--secrets-file", secrets)
	defer second.stop(t) // without --keep-sessions: removes the session
	c2, err := client.Dial(ctx, second.url, s.Token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	s2, err := c2.Attach(ctx, s.ID, s.Token, 0)
	if err != nil {
		t.Fatalf("attach after restart: %v\n%s", err, second.logs())
	}
	obs, err = s2.Call(ctx, "terminal", map[string]any{"command": ask}, nil)
	if err != nil || !strings.Contains(obs.Text(), want) || !strings.Contains(obs.Text(), " 502") {
		t.Fatalf("after the restart (the injector is not back): %v %q\n%s", err, obs.Text(), second.logs())
	}
	for _, l := range []string{first.logs(), second.logs()} {
		if strings.Contains(l, injectSecret) {
			t.Fatalf("serve logged the secret:\n%s", l)
		}
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
