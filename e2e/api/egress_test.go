package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/client"
)

// Through the real daemon: a bridge session whose allow_hosts name a host
// asks for another one over a bare socket (bash's /dev/tcp: no proxy
// variables, the name resolved by the proxy's DNS, port 80 redirected to
// the proxy) and reads the 403 an agent understands; session.egress lists
// the denial and /metrics counts it. Nothing leaves the machine: the
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
}
