package inject

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	apiHost   = "api.test"
	otherHost = "other.test"
	token     = "s3cr3t-token-value"
)

// setup: an authority for api.test and other.test, an upstream for
// api.test, and the session's injector with one rule.
func setup(t *testing.T, rules []Rule, vals map[string]string) (a *Authority, in *Injector, up *seen, c *http.Client) {
	t.Helper()
	ca := newTestCA(t)
	addr, up := upstream(t, ca.leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), apiHost))
	a, err := NewAuthority([]string{apiHost, otherHost}, nil)
	require.NoError(t, err)
	in, err = a.Injector(Options{Rules: rules, Secret: secrets(vals), RootCAs: ca.pool})
	require.NoError(t, err)
	return a, in, up, client(t, a, proxyFor(t, in, apiHost, addr))
}

// response is what a client got: status, headers and body.
type response struct {
	StatusCode int
	Header     http.Header
}

func get(t *testing.T, c *http.Client, url string, hdr map[string]string) (response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	require.NoError(t, err)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header}, string(b)
}

func TestHeaderSetAndPlaceholderReplaced(t *testing.T) {
	a, in, up, c := setup(t, []Rule{{Host: apiHost, Header: "authorization", Value: "Bearer ${TOKEN}"}}, map[string]string{"TOKEN": token})
	ph := a.Placeholder("TOKEN")
	assert.True(t, in.Intercepts("API.test"))
	assert.False(t, in.Intercepts(otherHost))

	// The sandbox sends the placeholder (or nothing) in the header, and
	// the placeholder in another header: the host sees the value in both.
	resp, body := get(t, c, "https://api.test/v1/x?q=1", map[string]string{
		"Authorization": "Bearer " + ph, "X-Api-Key": "key=" + ph,
	})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	got := up.all()
	require.Len(t, got, 1)
	assert.Equal(t, "Bearer "+token, got[0].Header.Get("Authorization"))
	assert.Equal(t, "key="+token, got[0].Header.Get("X-Api-Key"))
	assert.Equal(t, apiHost, got[0].Host)
	assert.Empty(t, got[0].Header.Values("X-Forwarded-For"), "nothing of the proxy is added")
	// An echo of the header comes back with the placeholder.
	assert.Equal(t, "Bearer "+ph, resp.Header.Get("X-Echo"))
	assert.NotContains(t, fmt.Sprint(resp.Header), token)

	// Keep-alive: the next request on the connection is injected too,
	// whatever it sent.
	resp, body = get(t, c, "https://api.test/v1/y", map[string]string{"Authorization": "Bearer made-up"})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	got = up.all()
	require.Len(t, got, 2)
	assert.Equal(t, "Bearer "+token, got[1].Header.Get("Authorization"))
}

func TestPlaceholderOfAnotherHostStays(t *testing.T) {
	// TOKEN is api.test's; OTHER is other.test's. A request to api.test
	// carrying OTHER's placeholder sends the placeholder.
	a, _, up, c := setup(t, []Rule{
		{Host: apiHost, Header: "Authorization", Value: "Bearer ${TOKEN}"},
		{Host: otherHost, Header: "Authorization", Value: "Bearer ${OTHER}"},
	}, map[string]string{"TOKEN": token, "OTHER": "other-secret-value"})
	other := a.Placeholder("OTHER")
	resp, body := get(t, c, "https://api.test/", map[string]string{"X-Leak": other})
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	got := up.all()
	require.Len(t, got, 1)
	assert.Equal(t, other, got[0].Header.Get("X-Leak"))
	assert.NotContains(t, fmt.Sprint(got[0].Header), "other-secret-value")
}

func TestRequestForAnotherHostIsRefused(t *testing.T) {
	_, _, up, c := setup(t, []Rule{{Host: apiHost, Header: "Authorization", Value: "Bearer ${TOKEN}"}}, map[string]string{"TOKEN": token})
	req, err := http.NewRequest(http.MethodGet, "https://api.test/", nil)
	require.NoError(t, err)
	req.Host = "evil.test"
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	assert.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
	assert.Contains(t, string(b), `the request names "evil.test"`)
	assert.Empty(t, up.all())
}

func TestBadUpstreamCertificateRefused(t *testing.T) {
	now := time.Now()
	good := newTestCA(t)
	for name, cert := range map[string]func() tls.Certificate{
		"expired":      func() tls.Certificate { return good.leaf(t, now.Add(-2*time.Hour), now.Add(-time.Hour), apiHost) },
		"wrong name":   func() tls.Certificate { return good.leaf(t, now.Add(-time.Hour), now.Add(time.Hour), "elsewhere.test") },
		"unknown root": func() tls.Certificate { return newTestCA(t).leaf(t, now.Add(-time.Hour), now.Add(time.Hour), apiHost) },
	} {
		t.Run(name, func(t *testing.T) {
			addr, up := upstream(t, cert())
			a, err := NewAuthority([]string{apiHost}, nil)
			require.NoError(t, err)
			in, err := a.Injector(Options{Rules: []Rule{{Host: apiHost, Header: "Authorization", Value: "Bearer ${TOKEN}"}},
				Secret: secrets(map[string]string{"TOKEN": token}), RootCAs: good.pool})
			require.NoError(t, err)
			resp, body := get(t, client(t, a, proxyFor(t, in, apiHost, addr)), "https://api.test/", nil)
			assert.Equal(t, http.StatusBadGateway, resp.StatusCode)
			assert.Contains(t, body, "sandboxd egress: refused api.test: its TLS certificate does not verify")
			assert.NotContains(t, body, token)
			assert.Empty(t, up.all(), "nothing reached the host")
		})
	}
}

func TestAbsoluteFormForAnotherHostIsRefused(t *testing.T) {
	// "GET https://evil.test/ HTTP/1.1" inside api.test's TLS: the
	// request names evil.test, whatever its Host header says.
	a, _, up, c := setup(t, []Rule{{Host: apiHost, Header: "Authorization", Value: "Bearer ${TOKEN}"}}, map[string]string{"TOKEN": token})
	conn, err := c.Transport.(*http.Transport).DialContext(t.Context(), "tcp", "api.test:443")
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CertPEM())
	tc := tls.Client(conn, &tls.Config{ServerName: apiHost, RootCAs: pool})
	defer tc.Close()
	_, err = io.WriteString(tc, "GET https://evil.test/x HTTP/1.1\r\nHost: api.test\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusMisdirectedRequest, resp.StatusCode)
	assert.Empty(t, up.all())
}

func TestSmugglingIsReframed(t *testing.T) {
	// A request with both Transfer-Encoding and Content-Length, its body
	// hiding a second request: the host sees one request, framed by the
	// chunked encoding (RFC 9112 6.1), never the hidden one.
	a, _, up, c := setup(t, []Rule{{Host: apiHost, Header: "Authorization", Value: "Bearer ${TOKEN}"}}, map[string]string{"TOKEN": token})
	proxy := c.Transport.(*http.Transport)
	conn, err := proxy.DialContext(t.Context(), "tcp", "api.test:443")
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CertPEM())
	tc := tls.Client(conn, &tls.Config{ServerName: apiHost, RootCAs: pool})
	defer tc.Close()
	hidden := "GET /hidden HTTP/1.1\r\nHost: api.test\r\n\r\n"
	chunk := fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(hidden), hidden)
	_, err = fmt.Fprintf(tc, "POST /a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n%s", chunk)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	got := up.all()
	require.Len(t, got, 1)
	assert.Equal(t, hidden, got[0].Body)
}

func TestOversizedHeadersRefused(t *testing.T) {
	_, _, up, c := setup(t, []Rule{{Host: apiHost, Header: "Authorization", Value: "Bearer ${TOKEN}"}}, map[string]string{"TOKEN": token})
	resp, _ := get(t, c, "https://api.test/", map[string]string{"X-Big": strings.Repeat("a", MaxHeaderBytes+8<<10)})
	assert.Equal(t, http.StatusRequestHeaderFieldsTooLarge, resp.StatusCode)
	assert.Empty(t, up.all())
}

func TestInjectorChecks(t *testing.T) {
	a, err := NewAuthority([]string{apiHost}, nil)
	require.NoError(t, err)
	for name, tc := range map[string]struct {
		rule Rule
		vals map[string]string
		want string
	}{
		"missing secret": {Rule{Host: apiHost, Header: "Authorization", Value: "Bearer ${NOPE}"}, nil, "the daemon has no secret NOPE"},
		"newline value": {Rule{Host: apiHost, Header: "Authorization", Value: "${T}"}, map[string]string{"T": "abc\r\nX-Evil: 1"},
			"secret T holds characters a header value cannot"},
		"empty value":      {Rule{Host: apiHost, Header: "Authorization", Value: "${T}"}, map[string]string{"T": ""}, "secret T is empty"},
		"host not in CA":   {Rule{Host: otherHost, Header: "Authorization", Value: "x"}, nil, "other.test is not among the CA's hosts"},
		"framing header":   {Rule{Host: apiHost, Header: "content-length", Value: "1"}, nil, "Content-Length frames or routes the request"},
		"bad header name":  {Rule{Host: apiHost, Header: "a b", Value: "1"}, nil, `"a b" is not a header name`},
		"unclosed ref":     {Rule{Host: apiHost, Header: "X", Value: "Bearer ${T"}, nil, "a ${ without its closing }"},
		"bad ref name":     {Rule{Host: apiHost, Header: "X", Value: "${1T}"}, nil, "${1T} does not name a secret"},
		"control in value": {Rule{Host: apiHost, Header: "X", Value: "a\nb"}, nil, "not a valid header value"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := a.Injector(Options{Rules: []Rule{tc.rule}, Secret: secrets(tc.vals)})
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			for _, v := range tc.vals {
				if v != "" {
					assert.NotContains(t, err.Error(), v, "an error never holds a value")
				}
			}
		})
	}
}

func TestTemplate(t *testing.T) {
	for in, want := range map[string][]string{
		"Bearer ${TOKEN}":      {"TOKEN"},
		"${A}:${B}:${A}":       {"A", "B"},
		"no references, $5 ok": nil,
		"":                     nil,
	} {
		tm, err := ParseTemplate(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, tm.Names(), in)
	}
	tm, err := ParseTemplate("x ${A}-${B} $y")
	require.NoError(t, err)
	assert.Equal(t, "x 1-2 $y", tm.expand(map[string]string{"A": "1", "B": "2"}))
	_, err = ParseTemplate(strings.Repeat("a", MaxTemplate+1))
	assert.Error(t, err)
}

func TestUpgradedConnectionIsCopied(t *testing.T) {
	// An Upgrade (a WebSocket) passes through with the header injected;
	// ServeTLS owns the copy until it ends (goleak checks at the end).
	ca := newTestCA(t)
	got := make(chan http.Header, 1)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Clone()
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
		_ = brw.Flush()
		line, _ := brw.ReadString('\n')
		_, _ = brw.WriteString("echo " + line)
		_ = brw.Flush()
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), apiHost)}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	a, err := NewAuthority([]string{apiHost}, nil)
	require.NoError(t, err)
	in, err := a.Injector(Options{Rules: []Rule{{Host: apiHost, Header: "Authorization", Value: "Bearer ${TOKEN}"}},
		Secret: secrets(map[string]string{"TOKEN": token}), RootCAs: ca.pool})
	require.NoError(t, err)
	c := client(t, a, proxyFor(t, in, apiHost, srv.Listener.Addr().String()))
	conn, err := c.Transport.(*http.Transport).DialContext(t.Context(), "tcp", "api.test:443")
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(a.CertPEM())
	tc := tls.Client(conn, &tls.Config{ServerName: apiHost, RootCAs: pool})
	defer tc.Close()
	_, err = io.WriteString(tc, "GET /ws HTTP/1.1\r\nHost: api.test\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n")
	require.NoError(t, err)
	br := bufio.NewReader(tc)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSwitchingProtocols, resp.StatusCode)
	_, err = io.WriteString(tc, "hello\n")
	require.NoError(t, err)
	line, err := br.ReadString('\n')
	require.NoError(t, err)
	assert.Equal(t, "echo hello\n", line)
	assert.Equal(t, "Bearer "+token, (<-got).Get("Authorization"))
}
