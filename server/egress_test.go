package server_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox/egress"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

// session.egress lists a session's denials as the runtime recorded them
// (none for a session without an egress proxy), only to a caller that may
// reach the session; /metrics counts the denials by way.
func TestSessionEgress(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ts := servertest.Start(t, nil)
	c, err := client.Dial(ctx, ts.URL, ts.Token, client.Options{})
	require.NoError(t, err)
	defer c.Close()
	s, err := c.CreateSession(ctx, client.CreateOptions{})
	require.NoError(t, err)

	ds, err := s.EgressDenials(ctx)
	require.NoError(t, err)
	assert.Empty(t, ds)

	at := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	fakeOf(t, ts, s.ID).SetEgress([]egress.Denial{{Time: at, Host: "evil.example", Port: 443, Via: egress.ViaConnect, Reason: "evil.example is not in allow_hosts", Count: 2}})
	ds, err = s.EgressDenials(ctx)
	require.NoError(t, err)
	assert.Equal(t, []wsproto.EgressDenial{{Time: at, Host: "evil.example", Port: 443, Via: "connect", Reason: "evil.example is not in allow_hosts", Count: 2}}, ds)

	ts.Backend.SetEgressCounts(map[string]uint64{"connect": 2, "tls": 1})
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.Base+"/metrics", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+ts.Token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	assert.Contains(t, string(body), `sandboxd_egress_denials_total{via="connect"} 2`)
	assert.Contains(t, string(body), `sandboxd_egress_denials_total{via="tls"} 1`)
}
