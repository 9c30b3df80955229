package inject

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"net/http"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// serveOverPipe runs ServeTLS on one end of a pipe in the bubble and
// returns the other end, a TLS client of the authority, and ServeTLS's
// result. Upstream dials fail at once.
func serveOverPipe(t *testing.T, ctx context.Context, handshake bool) (*tls.Conn, net.Conn, <-chan error) {
	a, err := NewAuthority([]string{apiHost}, nil)
	require.NoError(t, err)
	in, err := a.Injector(Options{Rules: []Rule{{Host: apiHost, Header: "Authorization", Value: "Bearer ${TOKEN}"}},
		Secret: secrets(map[string]string{"TOKEN": token})})
	require.NoError(t, err)
	srv, cli := net.Pipe()
	done := make(chan error, 1)
	go func() {
		done <- in.ServeTLS(ctx, srv, apiHost, 443, func(context.Context, string, string) (net.Conn, error) {
			return nil, errors.New("no route in this test")
		})
	}()
	pool := x509.NewCertPool()
	pool.AddCert(a.Cert())
	tc := tls.Client(cli, &tls.Config{ServerName: apiHost, RootCAs: pool})
	if handshake {
		require.NoError(t, tc.Handshake())
	}
	return tc, cli, done
}

func TestHandshakeTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		start := time.Now()
		_, cli, done := serveOverPipe(t, t.Context(), false)
		defer cli.Close()
		err := <-done // the client never says hello
		require.ErrorContains(t, err, "TLS handshake with the sandbox for api.test")
		assert.Equal(t, HandshakeTimeout, time.Since(start))
	})
}

func TestSilentClientTimesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc, _, done := serveOverPipe(t, t.Context(), true)
		defer tc.Close()
		start := time.Now()
		read := make(chan error, 1)
		go func() { _, err := io.Copy(io.Discard, tc); read <- err }()
		require.NoError(t, <-done) // a request's headers never come
		assert.Equal(t, ReadHeaderTimeout, time.Since(start))
		assert.NoError(t, <-read, "the connection was closed (close_notify)")
	})
}

func TestIdleConnectionCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tc, _, done := serveOverPipe(t, t.Context(), true)
		defer tc.Close()
		go func() {
			_, _ = io.WriteString(tc, "GET / HTTP/1.1\r\nHost: api.test\r\n\r\n")
		}()
		br := bufio.NewReader(tc)
		resp, err := http.ReadResponse(br, nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
		assert.Contains(t, string(body), "api.test:443 could not be reached: no route in this test")
		start := time.Now()
		go func() { _, _ = io.Copy(io.Discard, br) }()
		require.NoError(t, <-done) // kept alive, then idle
		assert.Equal(t, IdleTimeout, time.Since(start))
	})
}

func TestServeTLSEndsWithContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		tc, _, done := serveOverPipe(t, ctx, true)
		defer tc.Close()
		synctest.Wait()
		cancel()
		assert.ErrorIs(t, <-done, context.Canceled)
	})
}
