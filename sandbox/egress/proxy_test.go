package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// harness is a proxy on loopback in front of two test upstreams: plain
// HTTP (as port 80) and TLS (as port 443, its certificate for
// example.com), every allowed name resolving to loopback.
type harness struct {
	srv      *Server
	addr     string // the proxy's TCP address
	tlsCfg   *tls.Config
	lookups  atomic.Int64
	denials  sync.Map // via → *atomic.Int64
	logs     *syncBuf
	upstream struct{ host atomic.Value }
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func newHarness(t *testing.T, p Policy) *harness {
	h := &harness{logs: &syncBuf{}}
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.upstream.host.Store(r.Host)
		fmt.Fprintf(w, "plain %s %s", r.Host, r.URL.Path)
	}))
	t.Cleanup(plain.Close)
	secure := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "secure %s", r.Host)
	}))
	t.Cleanup(secure.Close)
	pool := secure.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	h.tlsCfg = &tls.Config{RootCAs: pool, ServerName: "example.com"}
	ports := map[string]string{"80": plain.Listener.Addr().String(), "443": secure.Listener.Addr().String()}
	var ln net.Listener
	h.srv = New(Options{
		Resolve: func(_ context.Context, host string) ([]netip.Addr, error) {
			h.lookups.Add(1)
			if host == "refused.test" {
				return []netip.Addr{netip.MustParseAddr("169.254.169.254")}, nil
			}
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		Refuse: func(a netip.Addr) bool { return a.IsLinkLocalUnicast() },
		Dial: func(ctx context.Context, network, addr string) (net.Conn, error) {
			_, port, _ := net.SplitHostPort(addr)
			if to, ok := ports[port]; ok {
				addr = to
			}
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		},
		Listen: func(network, _ string) (net.Listener, error) {
			var err error
			ln, err = net.Listen(network, "127.0.0.1:0")
			return ln, err
		},
		ListenPacket: func(network, _ string) (net.PacketConn, error) { return net.ListenPacket(network, "127.0.0.1:0") },
		Logger:       slog.New(slog.NewTextHandler(h.logs, nil)),
		OnDenial: func(via string) {
			n, _ := h.denials.LoadOrStore(via, new(atomic.Int64))
			n.(*atomic.Int64).Add(1)
		},
	})
	require.NoError(t, h.srv.Start("s1", netip.MustParseAddr("127.0.0.1"), p))
	t.Cleanup(h.srv.Close)
	h.addr = ln.Addr().String()
	return h
}

func (h *harness) denied(via string) int64 {
	n, ok := h.denials.Load(via)
	if !ok {
		return 0
	}
	return n.(*atomic.Int64).Load()
}

func (h *harness) proxyClient() *http.Client {
	u, _ := url.Parse("http://" + h.addr)
	return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(u), TLSClientConfig: h.tlsCfg}}
}

func get(t *testing.T, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

var testPolicy = Policy{Names: []string{"allowed.test", "example.com", "refused.test"}, Suffixes: []string{".wild.test"}}

func TestProxyHTTPAndConnect(t *testing.T) {
	h := newHarness(t, testPolicy)
	c := h.proxyClient()
	code, body := get(t, c, "http://allowed.test/a")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "plain allowed.test /a", body)
	code, body = get(t, c, "http://x.wild.test/b")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "plain x.wild.test /b", body)

	code, body = get(t, c, "http://wild.test/")
	assert.Equal(t, http.StatusForbidden, code, "the wildcard does not cover the apex")
	assert.Equal(t, "blocked by sandbox policy: wild.test is not in allow_hosts\n", body)
	code, body = get(t, c, "http://Denied.Test/")
	assert.Equal(t, http.StatusForbidden, code)
	assert.Equal(t, "blocked by sandbox policy: denied.test is not in allow_hosts\n", body)

	code, body = get(t, c, "https://example.com/s")
	assert.Equal(t, http.StatusOK, code)
	assert.Equal(t, "secure example.com", body)

	// An absolute-form request is routed by its URL, and the upstream sees
	// that host, never a Host header that names another (RFC 9112 §3.2.2).
	raw, err := net.Dial("tcp", h.addr)
	require.NoError(t, err)
	fmt.Fprint(raw, "GET http://allowed.test/f HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n")
	resp0, err := http.ReadResponse(bufio.NewReader(raw), nil)
	require.NoError(t, err)
	b0, _ := io.ReadAll(resp0.Body)
	resp0.Body.Close()
	raw.Close()
	assert.Equal(t, "plain allowed.test /f", string(b0))

	// CONNECT to a denied name: the 403 and its text.
	conn, err := net.Dial("tcp", h.addr)
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprint(conn, "CONNECT denied.test:443 HTTP/1.1\r\nHost: denied.test:443\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Equal(t, "blocked by sandbox policy: denied.test is not in allow_hosts\n", string(b))

	// A name whose addresses are out of bounds.
	conn2, err := net.Dial("tcp", h.addr)
	require.NoError(t, err)
	defer conn2.Close()
	fmt.Fprint(conn2, "CONNECT refused.test:443 HTTP/1.1\r\nHost: refused.test:443\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(conn2), nil)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Contains(t, string(b), "refused.test resolves only to addresses a sandbox may not reach")

	assert.Equal(t, int64(2), h.denied(ViaHTTP))
	assert.Equal(t, int64(2), h.denied(ViaConnect))
	ds := h.srv.Denials("s1")
	require.Len(t, ds, 4)
	assert.Equal(t, Denial{Time: ds[0].Time, Host: "wild.test", Port: 80, Via: ViaHTTP, Reason: "wild.test is not in allow_hosts", Count: 1}, ds[0])
	assert.Equal(t, "refused.test", ds[3].Host)
	assert.Empty(t, h.srv.Denials("s2"))
}

// Names are resolved at each request's upstream connection, never once:
// an address that changes is followed, on a kept-alive client connection
// too.
func TestProxyResolvesPerConnection(t *testing.T) {
	h := newHarness(t, testPolicy)
	c := h.proxyClient()
	for i := range 3 {
		code, _ := get(t, c, "http://allowed.test/")
		require.Equal(t, http.StatusOK, code)
		assert.Equal(t, int64(i+1), h.lookups.Load())
	}
}

// Clients that ignore the proxy variables arrive redirected: plain HTTP
// routed by its Host, TLS by its SNI; a denied SNI is closed and recorded,
// once in the log however often it is tried.
func TestProxyTransparent(t *testing.T) {
	h := newHarness(t, testPolicy)
	conn, err := net.Dial("tcp", h.addr)
	require.NoError(t, err)
	fmt.Fprint(conn, "GET /t HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	conn.Close()
	assert.Equal(t, "plain allowed.test /t", string(b))

	conn, err = net.Dial("tcp", h.addr)
	require.NoError(t, err)
	fmt.Fprint(conn, "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	conn.Close()
	assert.Equal(t, http.StatusForbidden, resp.StatusCode)
	assert.Equal(t, "blocked by sandbox policy: other.test is not in allow_hosts\n", string(b))

	tc, err := tls.Dial("tcp", h.addr, h.tlsCfg)
	require.NoError(t, err)
	fmt.Fprint(tc, "GET / HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n")
	resp, err = http.ReadResponse(bufio.NewReader(tc), nil)
	require.NoError(t, err)
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	tc.Close()
	assert.Equal(t, "secure example.com", string(b))

	for range 3 {
		cfg := h.tlsCfg.Clone()
		cfg.ServerName = "denied.test"
		_, err = tls.Dial("tcp", h.addr, cfg)
		require.Error(t, err, "a denied SNI is closed")
	}
	cfg := h.tlsCfg.Clone()
	cfg.ServerName, cfg.InsecureSkipVerify = "", true
	_, err = tls.Dial("tcp", h.addr, cfg)
	require.Error(t, err, "no SNI: closed")

	ds := h.srv.Denials("s1")
	require.Len(t, ds, 3)
	assert.Equal(t, "other.test", ds[0].Host)
	assert.Equal(t, Denial{Time: ds[1].Time, Host: "denied.test", Port: 443, Via: ViaTLS, Reason: "denied.test is not in allow_hosts", Count: 3}, ds[1])
	assert.Equal(t, "(no SNI)", ds[2].Host)
	assert.Equal(t, int64(4), h.denied(ViaTLS))
	assert.Equal(t, 1, strings.Count(h.logs.String(), "host=denied.test"), "logged once per name: %s", h.logs)
}

// fakeInterceptor answers the TLS connections of its host itself.
type fakeInterceptor struct {
	host string
	seen chan string
}

func (f *fakeInterceptor) Intercepts(host string) bool { return host == f.host }

func (f *fakeInterceptor) ServeTLS(_ context.Context, conn net.Conn, host string, port int, dial func(ctx context.Context, network, addr string) (net.Conn, error)) error {
	defer conn.Close()
	name, _, err := ReadClientHello(conn)
	_, derr := dial(context.Background(), "tcp", "denied.test:443")
	f.seen <- fmt.Sprintf("%s %d %s %v %v", host, port, name, err, derr)
	return nil
}

func TestProxyInterceptor(t *testing.T) {
	fi := &fakeInterceptor{host: "example.com", seen: make(chan string, 2)}
	p := testPolicy
	p.Interceptor = fi
	h := newHarness(t, p)
	_, err := tls.Dial("tcp", h.addr, h.tlsCfg)
	require.Error(t, err)
	assert.Equal(t, "example.com 443 example.com <nil> blocked by sandbox policy: denied.test is not in allow_hosts", <-fi.seen,
		"the interceptor reads the replayed hello, and its dial goes through the policy")

	conn, err := net.Dial("tcp", h.addr)
	require.NoError(t, err)
	defer conn.Close()
	fmt.Fprint(conn, "CONNECT example.com:8443 HTTP/1.1\r\nHost: example.com:8443\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	_ = tls.Client(&readerConn{Conn: conn, r: br}, h.tlsCfg).Handshake()
	assert.Equal(t, "example.com 8443 example.com <nil> blocked by sandbox policy: denied.test is not in allow_hosts", <-fi.seen)
}

type readerConn struct {
	net.Conn
	r io.Reader
}

func (c *readerConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// pipeListener is a listener of in-memory connections (for synctest).
type pipeListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}
func (l *pipeListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *pipeListener) Addr() net.Addr { return &net.TCPAddr{} }
func (l *pipeListener) dial() net.Conn {
	a, b := net.Pipe()
	l.ch <- b
	return a
}

type nopPacketConn struct {
	net.PacketConn
	done chan struct{}
	once sync.Once
}

func (p *nopPacketConn) ReadFrom([]byte) (int, net.Addr, error) {
	<-p.done
	return 0, nil, net.ErrClosed
}
func (p *nopPacketConn) Close() error { p.once.Do(func() { close(p.done) }); return nil }

func newPipeServer(o Options) (*Server, *pipeListener) {
	pl := &pipeListener{ch: make(chan net.Conn), done: make(chan struct{})}
	o.Listen = func(string, string) (net.Listener, error) { return pl, nil }
	o.ListenPacket = func(string, string) (net.PacketConn, error) { return &nopPacketConn{done: make(chan struct{})}, nil }
	return New(o), pl
}

// A sandbox that opens a connection and says nothing is cut off after the
// header timeout, whether it is HTTP or TLS.
func TestProxyHeaderTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, pl := newPipeServer(Options{HeaderTimeout: 5 * time.Second})
		require.NoError(t, srv.Start("s", netip.MustParseAddr("10.0.0.1"), testPolicy))
		defer srv.Close()
		silent := pl.dial()
		tlsHalf := pl.dial()
		go func() { _, _ = tlsHalf.Write([]byte{0x16, 3, 1}) }()
		httpHalf := pl.dial()
		go func() { _, _ = io.WriteString(httpHalf, "GET / HTTP/1.1\r\nHost: allowed.test\r\n") }()
		ended := make(chan string, 3)
		for name, c := range map[string]net.Conn{"silent": silent, "tls": tlsHalf, "http": httpHalf} {
			go func() { _, _ = io.Copy(io.Discard, c); ended <- name }()
		}
		synctest.Wait()
		assert.Empty(t, ended, "nothing ends before the timeout")
		time.Sleep(5*time.Second + time.Millisecond)
		synctest.Wait()
		assert.Len(t, ended, 3, "all three are closed at the header timeout")
		for _, c := range []net.Conn{silent, tlsHalf, httpHalf} {
			c.Close()
		}
	})
}

// A session's connections are bounded: one past the bound is closed at
// once and recorded; a closed one frees its place.
func TestProxyConnectionLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, pl := newPipeServer(Options{MaxConns: 2})
		require.NoError(t, srv.Start("s", netip.MustParseAddr("10.0.0.1"), testPolicy))
		defer srv.Close()
		a, b := pl.dial(), pl.dial()
		synctest.Wait()
		c := pl.dial()
		_, err := c.Read(make([]byte, 1))
		require.ErrorIs(t, err, io.EOF, "the third is closed")
		ds := srv.Denials("s")
		require.Len(t, ds, 1)
		assert.Equal(t, ViaLimit, ds[0].Via)
		a.Close()
		synctest.Wait()
		d := pl.dial()
		synctest.Wait()
		assert.Len(t, srv.Denials("s"), 1, "a closed connection freed its place")
		for _, x := range []net.Conn{b, c, d} {
			x.Close()
		}
	})
}

// The ring keeps the most recent denials, one entry per host, and the log
// names at most maxLoggedNames.
func TestDenialLogBounds(t *testing.T) {
	var logs syncBuf
	var d denialLog
	now := time.Unix(0, 0)
	d.init(slog.New(slog.NewTextHandler(&logs, nil)), func() time.Time { now = now.Add(time.Second); return now }, nil)
	for i := range maxLoggedNames + 10 {
		d.add(fmt.Sprintf("h%d.test", i), 443, ViaTLS, "r")
	}
	d.add("h0.test", 443, ViaTLS, "r")
	got := d.list()
	require.Len(t, got, maxDenials)
	assert.Equal(t, "h0.test", got[len(got)-1].Host)
	assert.Equal(t, 1, got[len(got)-1].Count, "h0 had left the ring")
	d.add("h0.test", 443, ViaTLS, "r")
	assert.Equal(t, 2, d.list()[maxDenials-1].Count)
	assert.Equal(t, maxLoggedNames, strings.Count(logs.String(), "egress: denied"))
	assert.Equal(t, 1, strings.Count(logs.String(), "more names denied than are logged"))
	d.add(strings.Repeat("x", 1000), 1, ViaHTTP, "r")
	assert.LessOrEqual(t, len(d.list()[maxDenials-1].Host), maxName+4)
}
