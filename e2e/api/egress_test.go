package api

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/daemon"
)

// Through the real daemon: a bridge session whose allow_hosts name a host
// asks for another one over a bare socket (bash's /dev/tcp: no proxy
// variables, the name resolved by the proxy's DNS, port 80 redirected to
// the proxy) and reads the 403 an agent understands; session.egress lists
// the denial (so does `sandboxd egress`) and /metrics counts it. Nothing leaves the machine: the
// denied name is refused before any lookup, the allowed one is never
// asked for.
func TestEgressDenialListedAndCounted(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
	require.NoError(t, err)
	defer c.Close()
	sess, err := c.CreateSession(ctx, client.CreateOptions{Network: "bridge", AllowHosts: []string{"allowed.sandboxd.test", "*.wild.sandboxd.test"}})
	require.NoError(t, err)
	defer sess.Close(ctx)

	obs, err := sess.Call(ctx, "terminal", map[string]any{"command": `exec 3<>/dev/tcp/denied.sandboxd.test/80 && ` +
		`printf 'GET /x HTTP/1.1\r\nHost: denied.sandboxd.test\r\nConnection: close\r\n\r\n' >&3 && timeout 60 cat <&3; env | grep ^HTTP_PROXY=`}, nil)
	require.NoError(t, err)
	out := obs.Text()
	assert.Contains(t, out, "HTTP/1.1 403 Forbidden")
	assert.Contains(t, out, "blocked by sandbox policy: denied.sandboxd.test is not in allow_hosts")
	assert.Contains(t, out, "HTTP_PROXY=http://")

	ds, err := sess.EgressDenials(ctx)
	require.NoError(t, err)
	require.Len(t, ds, 1)
	assert.Equal(t, "denied.sandboxd.test", ds[0].Host)
	assert.Equal(t, 80, ds[0].Port)
	assert.Equal(t, "http", ds[0].Via)
	assert.Equal(t, "denied.sandboxd.test is not in allow_hosts", ds[0].Reason)
	assert.Equal(t, 1, ds[0].Count)

	v, err := metricValue(ctx, s.base, s.token, `sandboxd_egress_denials_total{via="http"}`)
	require.NoError(t, err)
	assert.Equal(t, "1", strings.TrimSpace(v))

	// The CLI lists the same.
	cmd := exec.CommandContext(ctx, binary, "egress", "--server", s.ws, sess.ID)
	cmd.Env = append(os.Environ(), "SANDBOXD_SESSION_TOKEN="+sess.Token)
	cli, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", cli)
	assert.Contains(t, string(cli), "http     denied.sandboxd.test:80  x1  denied.sandboxd.test is not in allow_hosts")
}

// An MCP sidecar with network: bridge and names in its allow_hosts goes
// through the same kind of proxy (issue 26 §4): its command asks for a
// denied name over a bare socket (busybox nc, the name resolved by the
// proxy's DNS) and logs the 403 it reads, and the session's
// session.egress lists the sidecar's denial with the session's own.
func TestEgressSidecarByName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	ensureSidecarImages(ctx, t)
	config := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf(`profiles:
  egress:
    image: %[1]s
    network: bridge
    allow_hosts: [allowed.sandboxd.test]
    mcp_servers:
      - name: fetch
        image: %[2]s
        network: bridge
        allow_hosts: ["*.allowed.sandboxd.test"]
        command: ["/bin/sh", "-c", "printf 'GET /s HTTP/1.1\\r\\nHost: sidecar-denied.sandboxd.test\\r\\nConnection: close\\r\\n\\r\\n' | nc -w 20 sidecar-denied.sandboxd.test 80 >&2; env | grep ^HTTP_PROXY= >&2; exec /usr/local/bin/memory"]
`, testImage, memoryImage)
	require.NoError(t, os.WriteFile(config, []byte(src), 0o600))
	d := newDaemon(t, func(c *daemon.Config) { c.ConfigPath = config })
	hs := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer scancel()
		assert.NoError(t, d.Shutdown(sctx))
		hs.CloseClientConnections()
		hs.Close()
	})
	c, err := client.Dial(ctx, "ws"+strings.TrimPrefix(hs.URL, "http")+"/v1/ws", d.Token, client.Options{})
	require.NoError(t, err)
	defer c.Close()
	sess, err := c.CreateSession(ctx, client.CreateOptions{Profile: "egress"})
	require.NoError(t, err)
	defer sess.Close(ctx)
	obs, err := sess.Call(ctx, "fetch__read_graph", map[string]any{}, nil)
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())

	logs, err := exec.CommandContext(ctx, "docker", "logs", "sandboxd-"+sess.ID+"-mcp-fetch").CombinedOutput()
	require.NoError(t, err, "%s", logs)
	assert.Contains(t, string(logs), "blocked by sandbox policy: sidecar-denied.sandboxd.test is not in allow_hosts")
	assert.Contains(t, string(logs), "HTTP_PROXY=http://")

	ds, err := sess.EgressDenials(ctx)
	require.NoError(t, err)
	require.Len(t, ds, 1, "%v", ds)
	assert.Equal(t, "sidecar-denied.sandboxd.test", ds[0].Host)
}

// The real serve with --keep-sessions: after a restart the adopted
// session's egress proxy is back (started again from its network's
// labels), so its denied names still get the 403 and its allowed ones
// still go through the proxy, never around it.
func TestEgressProxyOverRestart(t *testing.T) {
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	first := startServe(t, state, "--keep-sessions")
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	require.NoError(t, err)
	c, err := client.Dial(ctx, first.url, token, client.Options{})
	require.NoError(t, err)
	s, err := c.CreateSession(ctx, client.CreateOptions{Network: "bridge", AllowHosts: []string{"allowed.sandboxd.test"}})
	require.NoError(t, err)
	ask := `exec 3<>/dev/tcp/denied.sandboxd.test/80 && printf 'GET / HTTP/1.1\r\nHost: denied.sandboxd.test\r\nConnection: close\r\n\r\n' >&3 && timeout 60 cat <&3`
	obs, err := s.Call(ctx, "terminal", map[string]any{"command": ask}, nil)
	require.NoError(t, err)
	require.Contains(t, obs.Text(), "blocked by sandbox policy: denied.sandboxd.test is not in allow_hosts")
	c.Close()
	first.stop(t)

	second := startServe(t, state)
	defer second.stop(t) // without --keep-sessions: removes the session
	c2, err := client.Dial(ctx, second.url, s.Token, client.Options{})
	require.NoError(t, err)
	defer c2.Close()
	s2, err := c2.Attach(ctx, s.ID, s.Token, 0)
	require.NoError(t, err, "attach after restart\n%s", second.logs())
	obs, err = s2.Call(ctx, "terminal", map[string]any{"command": ask}, nil)
	require.NoError(t, err)
	assert.Contains(t, obs.Text(), "blocked by sandbox policy: denied.sandboxd.test is not in allow_hosts", "the proxy is back\n%s", second.logs())
	ds, err := s2.EgressDenials(ctx)
	require.NoError(t, err)
	require.Len(t, ds, 1, "the new server's record")
	assert.Equal(t, "denied.sandboxd.test", ds[0].Host)
}
