package e2e

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"errors"
	"io"
	"log"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/sandbox/egress/inject"
)

// Secret injection end to end (decision 0051), the proxy's routing aside:
// a TLS listener of the test at the allowed host's address hands each
// connection to the session's Injector, as the egress proxy does for a
// host with rules. The sandbox (the default image) trusts the daemon's CA
// through the mounted bundle: curl and Python reach the host; the host
// sees the real header; the sandbox's environment, /proc, the logs and
// docker inspect hold only the placeholder; a host whose certificate does
// not verify is refused with a 502 naming why.
func TestInjectSecretOnTheWayOut(t *testing.T) {
	t.Parallel()
	const (
		host   = "api.inject.sandboxd.test"
		secret = "sbx-e2e-REAL-secret-0f3c9a"
	)
	ns, addr := injectNet(t)

	upCA := newUpstreamCA(t)
	good := recordingUpstream(t, upCA.leaf(t, time.Now().Add(-time.Hour), time.Now().Add(time.Hour), host))
	expired := recordingUpstream(t, upCA.leaf(t, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour), host))
	var target atomic.Value
	target.Store(good.addr)

	logs := &lockedBuffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, os.Stderr), &slog.HandlerOptions{Level: slog.LevelDebug}))
	auth, err := inject.LoadAuthority(t.TempDir(), []string{host}, nil)
	require.NoError(t, err)
	rules := []sandbox.InjectRule{{Host: host, Header: "Authorization", Value: "Bearer ${API_TOKEN}"}}
	in, err := auth.Injector(inject.Options{
		Rules:   []inject.Rule{{Host: host, Header: "Authorization", Value: "Bearer ${API_TOKEN}"}},
		Secret:  func(n string) (string, bool) { return secret, n == "API_TOKEN" },
		RootCAs: upCA.pool, Logger: log,
	})
	require.NoError(t, err)
	serveIntercepted(t, ns, addr, in, host, func() string { return target.Load().(string) })

	rt := newRuntime(t, func(o *sdocker.Options) {
		o.Logger = log
		o.LookupHost = func(_ context.Context, h string) ([]netip.Addr, error) {
			if h == host {
				return []netip.Addr{netip.MustParseAddr(addr)}, nil
			}
			return nil, errors.New("no such host (test resolver)")
		}
		o.InjectTrust = &sdocker.InjectTrust{CertPEM: auth.CertPEM(), Dir: t.TempDir()}
	})
	needFirewall(t, rt)
	m := newManager(t, rt, sandbox.ManagerOptions{Logger: log})
	placeholder := auth.Placeholder("API_TOKEN")
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{
		Image: sandbox.DefaultImage, Network: sandbox.NetworkBridge, AllowHosts: []string{host},
		Inject: rules, Env: map[string]string{"API_TOKEN": placeholder},
	})
	require.NoError(t, err)

	// The bundle holds the image's roots and the CA.
	firstLine := func(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }
	n, err := strconv.Atoi(firstLine(sh(t, s, "grep -c 'BEGIN CERTIFICATE' $SSL_CERT_FILE")))
	require.NoError(t, err)
	assert.Greater(t, n, 100, "the image's roots and the CA")
	assert.Equal(t, "1", firstLine(sh(t, s, "grep -c 'BEGIN CERTIFICATE' $NODE_EXTRA_CA_CERTS")), "the CA alone")

	// curl: the header as the sandbox sends it, and one the sandbox omits.
	out := sh(t, s, `curl -sS -D - https://`+host+`/v1/a -H "Authorization: Bearer $API_TOKEN"`)
	assert.Contains(t, out, "HTTP/1.1 200")
	assert.Contains(t, out, "X-Echo: Bearer "+placeholder, "an echoed header comes back as the placeholder")
	out = sh(t, s, `python3 -c 'import urllib.request; print(urllib.request.urlopen("https://`+host+`/v1/py").status)'`)
	assert.Contains(t, out, "200")
	got := good.all()
	require.Len(t, got, 2)
	for _, r := range got {
		assert.Equal(t, "Bearer "+secret, r.Get("Authorization"), "the host sees the real header")
	}

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
	target.Store(expired.addr)
	out = sh(t, s, `curl -sS -w ' %{http_code}' https://`+host+`/v1/b -H "Authorization: Bearer $API_TOKEN"`)
	assert.Contains(t, out, "sandboxd egress: refused "+host+": its TLS certificate does not verify")
	assert.Contains(t, out, " 502")
	assert.Empty(t, expired.all())

	assert.NotContains(t, logs.String(), secret, "the logs")
}

// injectNet makes a network namespace with one address behind a veth pair
// (like newTestNet, named apart so both run at once) and returns both.
func injectNet(t *testing.T) (ns, addr string) {
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
	ip("-n", ns, "addr", "add", netip.PrefixFrom(a2, 29).String(), "dev", nsIf)
	ip("-n", ns, "link", "set", nsIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")
	return ns, a2.String()
}

// serveIntercepted listens on addr:443 in the test's namespace and hands
// each connection to in for host, as the egress proxy does; upstream is
// where the "real host" is now.
func serveIntercepted(t *testing.T, ns, addr string, in *inject.Injector, host string, upstream func() string) {
	t.Helper()
	ln, err := testenv.ListenInNetns(ns, "tcp4", net.JoinHostPort(addr, "443"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		ln.Close()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				_ = in.ServeTLS(ctx, c, host, 443, func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, upstream())
				})
			})
		}
	})
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

func (c *upstreamCA) leaf(t *testing.T, nb, na time.Time, name string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: nb, NotAfter: na, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// recorded is a loopback TLS server that records each request's headers
// and echoes its Authorization in X-Echo (never in the body).
type recorded struct {
	addr string
	mu   sync.Mutex
	reqs []http.Header
}

func (r *recorded) all() []http.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]http.Header(nil), r.reqs...)
}

func recordingUpstream(t *testing.T, cert tls.Certificate) *recorded {
	t.Helper()
	rec := &recorded{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.reqs = append(rec.reqs, r.Header.Clone())
		rec.mu.Unlock()
		w.Header().Set("X-Echo", r.Header.Get("Authorization"))
		_, _ = io.WriteString(w, "ok\n")
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	rec.addr = srv.Listener.Addr().String()
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
