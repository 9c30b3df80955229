package e2e

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/sandbox/egress"
	"github.com/sandboxd/sandboxd/sandbox/egress/inject"
)

// Secret injection end to end (decision 0051) through the session's
// egress proxy: the sandbox (the default image) trusts the daemon's CA
// through the mounted bundle; curl (through HTTPS_PROXY and around it) and
// Python reach the inject host, which sees the real header; the same
// placeholder sent to another allowed host stays the placeholder; the
// sandbox's environment, /proc, the logs and docker inspect hold only the
// placeholder, and so does a plain-HTTP request to the inject host; a host
// whose certificate has expired is refused with a 502 naming why, and sees
// nothing.
func TestInjectSecretOnTheWayOut(t *testing.T) {
	t.Parallel()
	needImage(t, defaultImage)
	const (
		host    = "api.inject.sandboxd.test"
		other   = "other.inject.sandboxd.test"
		expired = "expired.inject.sandboxd.test"
		secret  = "sbx-e2e-REAL-secret-0f3c9a"
	)
	ns, addrs := injectNet(t)
	upCA := newUpstreamCA(t)
	now := time.Now()
	good := recordingUpstream(t, ns, addrs[0], upCA.leaf(t, now.Add(-time.Hour), now.Add(time.Hour), host, other))
	stale := recordingUpstream(t, ns, addrs[1], upCA.leaf(t, now.Add(-2*time.Hour), now.Add(-time.Hour), expired))

	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelDebug}))
	auth, err := inject.LoadAuthority(t.TempDir(), []string{host, expired}, nil)
	require.NoError(t, err)
	rules := []sandbox.InjectRule{
		{Host: host, Header: "Authorization", Value: "Bearer ${API_TOKEN}"},
		{Host: expired, Header: "Authorization", Value: "Bearer ${API_TOKEN}"},
	}
	interceptor := func(o sandbox.SessionOptions) egress.Interceptor {
		if len(o.Inject) == 0 {
			return nil
		}
		var rs []inject.Rule
		for _, r := range o.Inject {
			rs = append(rs, inject.Rule{Host: r.Host, Header: r.Header, Value: r.Value})
		}
		in, err := auth.Injector(inject.Options{Rules: rs, Secret: func(n string) (string, bool) { return secret, n == "API_TOKEN" },
			RootCAs: upCA.pool, Logger: log})
		if err != nil {
			log.Error("injector", "err", err)
			return nil
		}
		return in
	}
	res := &testResolver{addrs: map[string][]netip.Addr{}, asked: map[string]int{}}
	res.set(host, addrs[0])
	res.set(other, addrs[0])
	res.set(expired, addrs[1])
	rt := newRuntime(t, func(o *sdocker.Options) {
		o.Logger = log
		o.LookupHost = res.lookup
		o.EgressInterceptor = interceptor
		o.InjectTrust = &sdocker.InjectTrust{CertPEM: auth.CertPEM(), Dir: t.TempDir()}
	})
	needFirewall(t, rt)
	m := newManager(t, rt, sandbox.ManagerOptions{Logger: log})
	placeholder := auth.Placeholder("API_TOKEN")
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{
		Image: defaultImage, Network: sandbox.NetworkBridge, AllowHosts: []string{host, other, expired},
		Inject: rules, Env: map[string]string{"API_TOKEN": placeholder},
	})
	require.NoError(t, err)

	// The bundle holds the image's roots and the CA; NODE_EXTRA_CA_CERTS the CA alone.
	firstLine := func(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }
	n, err := strconv.Atoi(firstLine(sh(t, s, "grep -c 'BEGIN CERTIFICATE' $SSL_CERT_FILE")))
	require.NoError(t, err)
	assert.Greater(t, n, 100, "the image's roots and the CA")
	assert.Equal(t, "1", firstLine(sh(t, s, "grep -c 'BEGIN CERTIFICATE' $NODE_EXTRA_CA_CERTS")))

	// curl through HTTPS_PROXY (CONNECT), curl around it (the firewall's
	// redirect, routed by SNI), and Python (which omits the header).
	out := sh(t, s, `curl -sS -D - https://`+host+`/v1/a -H "Authorization: Bearer $API_TOKEN"`)
	assert.Contains(t, out, "HTTP/1.1 200")
	assert.Contains(t, out, "X-Echo: Bearer "+placeholder, "an echoed header comes back as the placeholder")
	out = sh(t, s, `curl -sS --noproxy '*' -w ' %{http_code}' https://`+host+`/v1/b -H "Authorization: Bearer $API_TOKEN"`)
	assert.Contains(t, out, " 200")
	out = sh(t, s, `python3 -c 'import urllib.request; print(urllib.request.urlopen("https://`+host+`/v1/py").status)'`)
	assert.Contains(t, out, "200")
	got := good.all()
	require.Len(t, got, 3)
	for _, r := range got {
		assert.Equal(t, host, r.host)
		assert.Equal(t, "Bearer "+secret, r.header.Get("Authorization"), "the host sees the real header")
	}

	// Another allowed host: the proxy splices it (its certificate is the
	// test CA's, not trusted in the sandbox: -k), the placeholder leaves as is.
	out = sh(t, s, `curl -sSk -w ' %{http_code}' https://`+other+`/ -H "Authorization: Bearer $API_TOKEN" -H "X-Key: $API_TOKEN"`)
	assert.Contains(t, out, " 200")
	got = good.all()
	require.Len(t, got, 4)
	assert.Equal(t, other, got[3].host)
	assert.Equal(t, "Bearer "+placeholder, got[3].header.Get("Authorization"))
	assert.Equal(t, placeholder, got[3].header.Get("X-Key"))

	// The inject host over plain HTTP: spliced by Host, never injected (a
	// secret travels only inside TLS).
	out = sh(t, s, `curl -sS -w ' %{http_code}' http://`+host+`/plain -H "Authorization: Bearer $API_TOKEN"`)
	assert.Contains(t, out, " 200")
	got = good.all()
	require.Len(t, got, 5)
	assert.Equal(t, "Bearer "+placeholder, got[4].header.Get("Authorization"))

	// Only the placeholder is in the sandbox, its processes and the engine.
	out = sh(t, s, `echo "$API_TOKEN"; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' | grep -c ^API_TOKEN=`)
	assert.Contains(t, out, placeholder)
	assert.NotContains(t, out, secret)
	ctr := containerOf(t, s.ID())
	raw, err := json.Marshal(ctr)
	require.NoError(t, err)
	assert.NotContains(t, string(raw), secret, "docker inspect")
	assert.Contains(t, string(raw), placeholder)
	assert.Contains(t, strings.Join(ctr.Config.Env, "\n"), "SSL_CERT_FILE="+sandbox.InjectBundleFile)

	// A host whose certificate has expired: refused, nothing sent.
	out = sh(t, s, `curl -sS -w ' %{http_code}' https://`+expired+`/v1/c -H "Authorization: Bearer $API_TOKEN"`)
	assert.Contains(t, out, "sandboxd egress: refused "+expired+": its TLS certificate does not verify")
	assert.Contains(t, out, " 502")
	assert.Empty(t, stale.all())

	assert.NotContains(t, logs.String(), secret, "the logs")
}

// injectNet makes a network namespace with one address behind a veth pair
// (like newTestNet, named apart so both run at once) and returns both.
func injectNet(t *testing.T) (ns string, addrs []string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root")
	}
	suffix := runID[:6]
	ns = "sbxi-" + suffix
	hostIf, nsIf := "sbxi"+suffix+"h", "sbxi"+suffix+"n"
	ip := func(args ...string) {
		t.Helper()
		out, err := exec.Command("ip", args...).CombinedOutput()
		require.NoError(t, err, "ip %s: %s", strings.Join(args, " "), out)
	}
	ip("netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	ip("link", "add", hostIf, "type", "veth", "peer", "name", nsIf)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostIf).Run() })
	ip("link", "set", nsIf, "netns", ns)
	subnet, err := testenv.FreeSubnet("198.18.215.0/29", "198.19.215.0/29", "100.127.215.0/29", "10.215.77.0/29")
	if err != nil {
		t.Skipf("for the test's namespace: %v", err)
	}
	a1 := subnet.Addr().Next()
	a2 := a1.Next()
	ip("addr", "add", netip.PrefixFrom(a1, 29).String(), "dev", hostIf)
	ip("link", "set", hostIf, "up")
	a3 := a2.Next()
	ip("-n", ns, "addr", "add", netip.PrefixFrom(a2, 29).String(), "dev", nsIf)
	ip("-n", ns, "addr", "add", netip.PrefixFrom(a3, 29).String(), "dev", nsIf)
	ip("-n", ns, "link", "set", nsIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")
	return ns, []string{a2.String(), a3.String()}
}

// upstreamCA is the CA of the test's "real hosts".
type upstreamCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newUpstreamCA(t *testing.T) *upstreamCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "e2e upstream CA"},
		NotBefore: time.Now().Add(-3 * time.Hour), NotAfter: time.Now().Add(3 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &upstreamCA{cert: cert, key: key, pool: pool}
}

func (c *upstreamCA) leaf(t *testing.T, nb, na time.Time, names ...string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: names[0]}, DNSNames: names,
		NotBefore: nb, NotAfter: na, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// recorded is a TLS server at addr:443 in the test's namespace that
// records each request's Host and headers and echoes its Authorization in
// X-Echo (never in the body).
type recorded struct {
	mu   sync.Mutex
	reqs []seenRequest
}

type seenRequest struct {
	host   string
	header http.Header
}

func (r *recorded) all() []seenRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seenRequest(nil), r.reqs...)
}

func recordingUpstream(t *testing.T, ns, addr string, cert tls.Certificate) *recorded {
	t.Helper()
	rec := &recorded{}
	ln, err := testenv.ListenInNetns(ns, "tcp4", net.JoinHostPort(addr, "443"))
	require.NoError(t, err)
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			rec.mu.Lock()
			rec.reqs = append(rec.reqs, seenRequest{host: r.Host, header: r.Header.Clone()})
			rec.mu.Unlock()
			w.Header().Set("X-Echo", r.Header.Get("Authorization"))
			_, _ = io.WriteString(w, "ok\n")
		}),
		ReadHeaderTimeout: time.Minute,
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}},
		ErrorLog:          log.New(io.Discard, "", 0), // refused handshakes are the point of one host
	}
	plainLn, err := testenv.ListenInNetns(ns, "tcp4", net.JoinHostPort(addr, "80"))
	require.NoError(t, err)
	plain := &http.Server{Handler: srv.Handler, ReadHeaderTimeout: time.Minute}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	go func() { _ = plain.Serve(plainLn) }()
	t.Cleanup(func() { _ = srv.Close(); _ = plain.Close() })
	return rec
}

// lockedBuffer collects log lines from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
