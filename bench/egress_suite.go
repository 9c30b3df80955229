package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"time"

	"github.com/sandboxd/sandboxd/sandbox/egress"
)

func init() {
	register(suite{
		name: "egress",
		about: "the egress proxy (allow_hosts by name, decision 0050) on loopback: a small HTTPS request on a new connection and a 100 MB " +
			"HTTPS download, through the proxy (SNI splice, and CONNECT) against the same upstream directly (no Docker)",
		run: runEgressSuite,
	})
}

// egressDownload is the size of the download scenario.
const egressDownload = 100 << 20

func runEgressSuite(ctx context.Context, e *env) ([]row, error) {
	chunk := make([]byte, 1<<20)
	up := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Header().Set("Content-Length", fmt.Sprint(egressDownload))
			for range egressDownload / len(chunk) {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			return
		}
		_, _ = io.WriteString(w, "ok")
	}))
	defer up.Close()
	upAddr := up.Listener.Addr().String()
	roots := up.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs
	tlsCfg := &tls.Config{RootCAs: roots, ServerName: "example.com"} // httptest's certificate names example.com

	var proxyAddr string
	srv := egress.New(egress.Options{
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		},
		Refuse: func(netip.Addr) bool { return false }, // the upstream is on loopback here
		Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, upAddr) // every upstream port is the test server
		},
		Listen: func(network, _ string) (net.Listener, error) {
			ln, err := net.Listen(network, "127.0.0.1:0")
			if err == nil {
				proxyAddr = ln.Addr().String()
			}
			return ln, err
		},
		ListenPacket: func(network, _ string) (net.PacketConn, error) { return net.ListenPacket(network, "127.0.0.1:0") },
	})
	defer srv.Close()
	if err := srv.Start("bench", netip.MustParseAddr("127.0.0.1"), egress.Policy{Names: []string{"example.com"}}); err != nil {
		return nil, err
	}

	// Each request on a new connection, as a sandbox's tools mostly make
	// them: direct, redirected (TLS routed by SNI, as for a client that
	// ignores HTTPS_PROXY), and through CONNECT (HTTPS_PROXY).
	client := func(dialTo string, proxy bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: tlsCfg, DisableKeepAlives: true, ForceAttemptHTTP2: false}
		if proxy {
			u, _ := url.Parse("http://" + proxyAddr)
			tr.Proxy = http.ProxyURL(u)
		} else {
			tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
				return (&net.Dialer{}).DialContext(ctx, network, dialTo)
			}
		}
		return &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	}
	direct, sni, connect := client(upAddr, false), client(proxyAddr, false), client("", true)
	get := func(c *http.Client, path string) func() error {
		return func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://example.com"+path, nil)
			if err != nil {
				return err
			}
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			n, err := io.Copy(io.Discard, resp.Body)
			if err == nil && resp.StatusCode != http.StatusOK {
				err = fmt.Errorf("%s: %s", path, resp.Status)
			}
			if err == nil && path == "/big" && n != egressDownload {
				err = fmt.Errorf("%s: %d bytes", path, n)
			}
			return err
		}
	}
	addedBelow := func(d time.Duration) (string, func(row) bool) {
		return fmt.Sprintf("p50 added < %v", d), func(r row) bool { return r.s.p50-r.base.p50 < d }
	}
	var rows []row
	small, err := measure(e.n(400), 20, get(direct, "/"))
	if err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	rows = append(rows, row{scenario: "egress: small HTTPS GET, new connection, direct (baseline)", s: small})
	for _, v := range []struct {
		name string
		c    *http.Client
	}{{"redirected, routed by SNI", sni}, {"through CONNECT (HTTPS_PROXY)", connect}} {
		s, err := measure(e.n(400), 20, get(v.c, "/"))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", v.name, err)
		}
		t, met := addedBelow(time.Millisecond)
		rows = append(rows, row{scenario: "egress: small HTTPS GET, new connection, " + v.name, s: s,
			baseline: "the same GET direct", base: small, target: t, met: met})
		e.logf("  small GET %-32s p50 %s (direct %s)", v.name, ms(s.p50), ms(small.p50))
	}
	big, err := measure(e.n(5), 1, get(direct, "/big"))
	if err != nil {
		return nil, fmt.Errorf("direct download: %w", err)
	}
	mbps := func(s sample) float64 { return float64(egressDownload) / (1 << 20) / s.p50.Seconds() }
	rows = append(rows, row{scenario: fmt.Sprintf("egress: 100 MB HTTPS download, direct (baseline, %.0f MB/s)", mbps(big)), s: big})
	for _, v := range []struct {
		name string
		c    *http.Client
	}{{"redirected, routed by SNI", sni}, {"through CONNECT", connect}} {
		s, err := measure(e.n(5), 1, get(v.c, "/big"))
		if err != nil {
			return nil, fmt.Errorf("%s download: %w", v.name, err)
		}
		rows = append(rows, row{scenario: fmt.Sprintf("egress: 100 MB HTTPS download, %s (%.0f MB/s, %.0f %% of direct)", v.name, mbps(s), 100*mbps(s)/mbps(big)),
			s: s, baseline: "the same download direct", base: big, target: "≥ 80 % of direct throughput (≤ 1.25x time)",
			met: func(r row) bool { return r.ratio() <= 1.25 }})
		e.logf("  download %-32s %.0f MB/s (direct %.0f MB/s)", v.name, mbps(s), mbps(big))
	}
	return rows, nil
}
