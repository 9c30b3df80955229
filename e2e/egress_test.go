package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
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
)

// The egress tests reach only test hosts they make: web servers (HTTP on
// port 80, HTTPS on 443 with a certificate of a test CA) in a network
// namespace behind a veth pair, at three IPv4 addresses and one IPv6
// address that no interface or route of the machine uses, and a test
// resolver that maps the test's names to them. No traffic leaves the
// machine.

// egressNet is that namespace.
type egressNet struct {
	a, b, c, v6 string // addresses in the namespace
	caPEM       string
	raw         *listener // a raw TCP listener on every address
}

func newEgressNet(t *testing.T) *egressNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("making a network namespace needs root")
	}
	suffix := runID[:6]
	ns, hostIf, nsIf := "sbxeg-"+suffix, "sbxg"+suffix+"h", "sbxg"+suffix+"n"
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
	subnet, err := testenv.FreeSubnet("198.18.214.0/29", "198.19.214.0/29", "100.127.214.0/29", "10.214.77.0/29")
	if err != nil {
		t.Skipf("for the test's namespace: %v", err)
	}
	addr := func(n int) netip.Addr {
		a := subnet.Addr()
		for range n {
			a = a.Next()
		}
		return a
	}
	// fd00:5bd:: is a unique local prefix: routed nowhere.
	v6Host, v6NS := "fd00:5bd:"+suffix[:4]+"::1", "fd00:5bd:"+suffix[:4]+"::2"
	ip("addr", "add", netip.PrefixFrom(addr(1), 29).String(), "dev", hostIf)
	ip("-6", "addr", "add", v6Host+"/64", "dev", hostIf, "nodad")
	ip("link", "set", hostIf, "up")
	for _, n := range []int{2, 3, 4} {
		ip("-n", ns, "addr", "add", netip.PrefixFrom(addr(n), 29).String(), "dev", nsIf)
	}
	ip("-n", ns, "-6", "addr", "add", v6NS+"/64", "dev", nsIf, "nodad")
	ip("-n", ns, "link", "set", nsIf, "up")
	ip("-n", ns, "link", "set", "lo", "up")

	certPEM, keyPEM := testCert(t)
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	en := &egressNet{a: addr(2).String(), b: addr(3).String(), c: addr(4).String(), v6: netip.MustParseAddr(v6NS).String(), caPEM: string(certPEM)}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		local := r.Context().Value(http.LocalAddrContextKey).(net.Addr).String()
		host, _, _ := net.SplitHostPort(local)
		fmt.Fprintf(w, "served host=%s addr=%s tls=%v\n", r.Host, host, r.TLS != nil)
	})
	for _, a := range []string{"0.0.0.0", "[::]"} {
		network := "tcp4"
		if a == "[::]" {
			network = "tcp6"
		}
		ln80, err := testenv.ListenInNetns(ns, network, a+":80")
		require.NoError(t, err)
		ln443, err := testenv.ListenInNetns(ns, network, a+":443")
		require.NoError(t, err)
		plain := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute}
		secure := &http.Server{Handler: handler, ReadHeaderTimeout: time.Minute, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
		go func() { _ = plain.Serve(ln80) }()
		go func() { _ = secure.ServeTLS(ln443, "", "") }()
		t.Cleanup(func() { plain.Close(); secure.Close() })
	}
	rawLn, err := testenv.ListenInNetns(ns, "tcp4", "0.0.0.0:0")
	require.NoError(t, err)
	en.raw = newListener(t, rawLn)
	return en
}

// testCert is a self-signed certificate (its own CA) for the test's names.
func testCert(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandboxd egress test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"allowed.sandboxd.test", "*.wild.sandboxd.test", "v6.sandboxd.test"},
		IsCA:     true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// testResolver maps names to addresses the test sets, and counts every
// lookup by name.
type testResolver struct {
	mu    sync.Mutex
	addrs map[string][]netip.Addr
	asked map[string]int
}

func (r *testResolver) set(name string, addrs ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var as []netip.Addr
	for _, a := range addrs {
		as = append(as, netip.MustParseAddr(a))
	}
	r.addrs[name] = as
}

func (r *testResolver) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked[host]++
	if a, ok := r.addrs[host]; ok {
		return a, nil
	}
	if strings.HasSuffix(host, ".wild.sandboxd.test") {
		return r.addrs["*.wild.sandboxd.test"], nil
	}
	return nil, errors.New("no such host (test resolver)")
}

func (r *testResolver) lookups() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for k, v := range r.asked {
		out[k] = v
	}
	return out
}

const blocked403 = "blocked by sandbox policy: %s is not in allow_hosts"

// A bridge session whose allow_hosts name hosts goes through its egress
// proxy: allowed names over HTTP and HTTPS (through HTTP(S)_PROXY and
// without it) while their address changes, a wildcard but not its apex, an
// IPv6 test host, denied names answered 403 with the text an agent reads
// (curl through the proxy, curl --noproxy, bash's /dev/tcp), a TLS
// connection to a denied name closed, a raw TCP port by IP entry only,
// DNS answered by the proxy without the test resolver ever seeing a
// denied name, the denials listed; and after a restart the adopted
// session's proxy is back.
func TestEgressProxy(t *testing.T) {
	t.Parallel()
	needImage(t, defaultImage)
	en := newEgressNet(t)
	res := &testResolver{addrs: map[string][]netip.Addr{}, asked: map[string]int{}}
	res.set("allowed.sandboxd.test", en.a)
	res.set("*.wild.sandboxd.test", en.a)
	res.set("wild.sandboxd.test", en.a)
	res.set("v6.sandboxd.test", en.v6)
	rt := newRuntime(t, func(o *sdocker.Options) { o.LookupHost = res.lookup })
	needFirewall(t, rt)
	m := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: defaultImage, Network: sandbox.NetworkBridge,
		AllowHosts: []string{"allowed.sandboxd.test", "*.wild.sandboxd.test", "v6.sandboxd.test", en.b}})
	require.NoError(t, err)
	gw := gateway(t, s.ID())
	sh(t, s, "cat > /tmp/ca.pem <<'EOF'\n"+en.caPEM+"EOF")

	env := sh(t, s, "env | grep -i _proxy= | sort")
	assert.Contains(t, env, "HTTPS_PROXY=http://"+gw+":13128")
	assert.Contains(t, env, "http_proxy=http://"+gw+":13128")
	assert.Contains(t, env, "NO_PROXY=localhost,127.0.0.1,::1")

	curl := func(args string) string {
		t.Helper()
		return sh(t, s, "curl -sS --max-time 60 --cacert /tmp/ca.pem "+args+" 2>&1; echo \" exit=$?\"")
	}
	assert.Contains(t, curl("http://allowed.sandboxd.test/"), "served host=allowed.sandboxd.test addr="+en.a+" tls=false")
	assert.Contains(t, curl("https://allowed.sandboxd.test/"), "served host=allowed.sandboxd.test addr="+en.a+" tls=true")
	assert.Contains(t, curl("--noproxy '*' http://allowed.sandboxd.test/"), "addr="+en.a+" tls=false", "redirected from port 80")
	assert.Contains(t, curl("--noproxy '*' https://allowed.sandboxd.test/"), "addr="+en.a+" tls=true", "redirected from port 443, routed by SNI")

	// The name moves: the next connections follow.
	res.set("allowed.sandboxd.test", en.c)
	assert.Contains(t, curl("http://allowed.sandboxd.test/"), "addr="+en.c+" tls=false")
	assert.Contains(t, curl("https://allowed.sandboxd.test/"), "addr="+en.c+" tls=true")
	assert.Contains(t, curl("--noproxy '*' https://allowed.sandboxd.test/"), "addr="+en.c+" tls=true")

	// A wildcard, not its apex; an IPv6 test host (the sandbox itself has
	// no IPv6: the proxy reaches it from the host).
	assert.Contains(t, curl("https://x.wild.sandboxd.test/"), "served host=x.wild.sandboxd.test")
	assert.Contains(t, curl("http://wild.sandboxd.test/"), fmt.Sprintf(blocked403, "wild.sandboxd.test"))
	assert.Contains(t, curl("https://v6.sandboxd.test/"), "served host=v6.sandboxd.test addr="+en.v6+" tls=true")

	// Denied names: the text through the proxy, without it, and over a
	// bare socket; TLS without CONNECT is closed.
	assert.Contains(t, curl("http://denied.sandboxd.test/"), fmt.Sprintf(blocked403, "denied.sandboxd.test"))
	assert.Contains(t, curl("--noproxy '*' http://denied.sandboxd.test/"), fmt.Sprintf(blocked403, "denied.sandboxd.test"))
	assert.Contains(t, curl("-w '%{http_code}' -o /dev/null --noproxy '*' http://denied.sandboxd.test/"), "403")
	assert.Contains(t, curl("https://denied-connect.sandboxd.test/"), "403", "CONNECT refused with 403")
	tlsOut := curl("--noproxy '*' https://denied-tls.sandboxd.test/")
	assert.NotContains(t, tlsOut, "served", "a TLS connection to a denied name is closed")
	assert.NotContains(t, tlsOut, "exit=0")
	raw := sh(t, s, `exec 3<>/dev/tcp/denied-raw.sandboxd.test/80 && printf 'GET / HTTP/1.1\r\nHost: denied-raw.sandboxd.test\r\nConnection: close\r\n\r\n' >&3 && timeout 30 cat <&3`)
	assert.Contains(t, raw, "403 Forbidden")
	assert.Contains(t, raw, fmt.Sprintf(blocked403, "denied-raw.sandboxd.test"))

	// Other ports follow the IP entries alone.
	assert.Equal(t, "OPEN", probe(t, s, en.b, en.raw.port()), "an IP entry, any port")
	closedOrDump(t, s, en.a, en.raw.port())
	assert.Equal(t, "CLOSED", probe(t, s, "allowed.sandboxd.test", en.raw.port()), "a name covers HTTP and TLS only")
	assert.Zero(t, en.raw.count(en.a))

	// DNS: every name is the proxy's address, answered without a lookup
	// on the host, whichever server the sandbox asks.
	dns := sh(t, s, "getent ahostsv4 exfil-c2VjcmV0.denied.sandboxd.test | head -1; python3 -c \"import socket; print(socket.gethostbyname('other.exfil.test'))\"")
	assert.Contains(t, dns, gw+" ")
	assert.Contains(t, dns, gw+"\n")
	asked := res.lookups()
	for name := range asked {
		assert.NotContains(t, name, "exfil", "a lookup of a denied name reached the test resolver")
		assert.NotContains(t, name, "denied", "a denied name reached the test resolver")
	}
	assert.Positive(t, asked["allowed.sandboxd.test"])

	// The denials, recorded once per host and way.
	ds := rt.Egress().Denials(s.ID())
	byHost := map[string]egress.Denial{}
	for _, d := range ds {
		byHost[d.Host+"/"+d.Via] = d
	}
	assert.Equal(t, 3, byHost["denied.sandboxd.test/http"].Count, "%v", ds)
	assert.Contains(t, byHost, "wild.sandboxd.test/http")
	assert.Contains(t, byHost, "denied-connect.sandboxd.test/connect")
	assert.Contains(t, byHost, "denied-tls.sandboxd.test/tls")
	assert.Contains(t, byHost, "denied-raw.sandboxd.test/http")

	// A restarted daemon: this runtime's proxies end (as with its
	// process), a new runtime of the scope adopts the network and starts
	// the session's proxy again from its labels.
	rt.Egress().Close()
	assert.NotContains(t, curl("--max-time 5 http://allowed.sandboxd.test/"), "served", "no proxy, no egress")
	rt2 := newRuntime(t, func(o *sdocker.Options) { o.LookupHost = res.lookup })
	assert.True(t, rt2.Egress().Running(s.ID()))
	assert.Contains(t, curl("http://allowed.sandboxd.test/"), "addr="+en.c)
	assert.Contains(t, curl("http://denied.sandboxd.test/"), fmt.Sprintf(blocked403, "denied.sandboxd.test"))
	rt2.Egress().Close()

	require.NoError(t, s.Close(ctxT(t)))
	assert.Empty(t, rulesOf(s.ID()))
	assert.False(t, rt.Egress().Running(s.ID()))
}
