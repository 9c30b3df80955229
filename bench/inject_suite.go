package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/sandbox/egress/inject"
)

func init() {
	register(suite{
		name: "inject",
		about: "secret injection (0051): a small HTTPS GET through the session's Injector (TLS terminated, the header set, " +
			"re-encrypted and verified) against the same GET direct, loopback, same run (no Docker)",
		run: runInjectSuite,
	})
}

const injectHost = "api.bench.test"

func runInjectSuite(ctx context.Context, e *env) ([]row, error) {
	upCert, roots, err := benchUpstreamCert(injectHost)
	if err != nil {
		return nil, err
	}
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer bench-secret-value" && r.Header.Get("X-Direct") == "" {
			http.Error(w, "no injected header", http.StatusUnauthorized)
			return
		}
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	up.TLS = &tls.Config{Certificates: []tls.Certificate{upCert}}
	up.Config.ErrorLog = log.New(io.Discard, "", 0)
	up.StartTLS()
	defer up.Close()

	auth, err := inject.NewAuthority([]string{injectHost}, nil)
	if err != nil {
		return nil, err
	}
	in, err := auth.Injector(inject.Options{
		Rules:   []inject.Rule{{Host: injectHost, Header: "Authorization", Value: "Bearer ${TOKEN}"}},
		Secret:  func(string) (string, bool) { return "bench-secret-value", true },
		RootCAs: roots,
	})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); ln.Close(); wg.Wait() }()
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				_ = in.ServeTLS(pctx, c, injectHost, 443, func(ctx context.Context, network, _ string) (net.Conn, error) {
					var d net.Dialer
					return d.DialContext(ctx, network, up.Listener.Addr().String())
				})
			})
		}
	})
	sandboxRoots := x509.NewCertPool()
	sandboxRoots.AddCert(auth.Cert())

	client := func(addr string, pool *x509.CertPool, keepAlive bool) *http.Client {
		return &http.Client{Timeout: time.Minute, Transport: &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, addr)
			},
			TLSClientConfig:   &tls.Config{RootCAs: pool, ServerName: injectHost},
			DisableKeepAlives: !keepAlive,
		}}
	}
	get := func(c *http.Client, direct bool) func() error {
		return func() error {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+injectHost+"/v1/small", nil)
			if err != nil {
				return err
			}
			if direct {
				req.Header.Set("X-Direct", "1")
			}
			resp, err := c.Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return err
			}
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("status %d", resp.StatusCode)
			}
			return nil
		}
	}
	var rows []row
	for _, keep := range []bool{true, false} {
		direct := client(up.Listener.Addr().String(), roots, keep)
		injected := client(ln.Addr().String(), sandboxRoots, keep)
		n := e.n(2000)
		if !keep {
			n = e.n(300)
		}
		base, s, err := measurePair(n, 20, get(direct, true), get(injected, false))
		direct.CloseIdleConnections()
		injected.CloseIdleConnections()
		if err != nil {
			return nil, err
		}
		what := "kept-alive connection"
		if !keep {
			what = "a new connection per request"
		}
		baseName := "HTTPS GET direct, " + what
		scenario := "HTTPS GET through the injector, " + what
		e.logf("  %-60s p50 %s  p99 %s", baseName, ms(base.p50), ms(base.p99))
		e.logf("  %-60s p50 %s  p99 %s", scenario, ms(s.p50), ms(s.p99))
		r := row{scenario: scenario, s: s, baseline: baseName, base: base}
		if keep {
			r.target, r.met = addedBelow(time.Millisecond)
		}
		rows = append(rows, row{scenario: baseName, s: base}, r)
	}
	return rows, nil
}

// benchUpstreamCert is the real host's certificate from a CA of its own,
// and that CA as a pool (the daemon's "system roots" here).
func benchUpstreamCert(host string) (tls.Certificate, *x509.CertPool, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caT := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bench upstream CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caT, caT, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leafT := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: host}, DNSNames: []string{host},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, leafT, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, pool, nil
}
