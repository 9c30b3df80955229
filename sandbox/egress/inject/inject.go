package inject

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Rule sets one header on the requests to one host.
type Rule struct {
	// Host is the exact name (lower-case, no port, no wildcard) whose
	// TLS connections are terminated.
	Host string
	// Header is the header set, replacing any the request has
	// (CheckHeader).
	Header string
	// Value is the header's value: a Template ("Bearer ${TOKEN}").
	Value string
}

// Bounds and timeouts of a terminated connection. The client is the
// sandbox: hostile.
const (
	// HandshakeTimeout bounds each TLS handshake, the client's and the
	// upstream's.
	HandshakeTimeout = 10 * time.Second
	// ReadHeaderTimeout bounds reading a request's headers.
	ReadHeaderTimeout = 30 * time.Second
	// IdleTimeout closes a kept-alive client connection with no request.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes = 64 << 10
	// MaxResponseHeaderBytes bounds the upstream's response headers.
	MaxResponseHeaderBytes = 256 << 10
	// ResponseHeaderTimeout bounds the wait for the upstream's answer: a
	// model API may think for minutes before its first byte.
	ResponseHeaderTimeout = 10 * time.Minute
	// minScrub is the shortest secret value scrubbed from response
	// headers: a shorter one would match ordinary text.
	minScrub = 8
)

// Options make a session's Injector.
type Options struct {
	// Rules are the session's inject rules (its profile's).
	Rules []Rule
	// Secret looks up a secret's value by name.
	Secret func(name string) (string, bool)
	// RootCAs verify the upstream hosts' certificates; nil: the host's
	// system roots.
	RootCAs *x509.CertPool
	// Logger gets one line per refused upstream or failed request (host
	// and error, never a header); nil: none.
	Logger *slog.Logger
}

// Injector terminates TLS for its session's inject hosts (the proxy's
// Interceptor). Safe for concurrent use: one ServeTLS per connection.
type Injector struct {
	auth  *Authority
	hosts map[string]*hostRules
	roots *x509.CertPool
	log   *slog.Logger
}

// hostRules are what requests to one host get.
type hostRules struct {
	set      [][2]string // header, value
	replace  []string    // strings.NewReplacer pairs: placeholder, value
	scrub    []string    // value, placeholder (responses)
	replacer *strings.Replacer
	scrubber *strings.Replacer
}

// Injector makes the injector of a session's rules. Every secret the rules
// name must exist and fit in a header, and every host must be one of the
// authority's: the error names what is missing, never a value.
func (a *Authority) Injector(o Options) (*Injector, error) {
	in := &Injector{auth: a, hosts: map[string]*hostRules{}, roots: o.RootCAs, log: o.Logger}
	if in.log == nil {
		in.log = slog.New(slog.DiscardHandler)
	}
	for i, r := range o.Rules {
		host := strings.ToLower(r.Host)
		if _, ok := slices.BinarySearch(a.hosts, host); !ok {
			return nil, fmt.Errorf("inject[%d]: %s is not among the CA's hosts (%s)", i, host, strings.Join(a.hosts, ", "))
		}
		if err := CheckHeader(r.Header); err != nil {
			return nil, fmt.Errorf("inject[%d].header: %w", i, err)
		}
		t, err := ParseTemplate(r.Value)
		if err != nil {
			return nil, fmt.Errorf("inject[%d].value: %w", i, err)
		}
		values := map[string]string{}
		for _, name := range t.Names() {
			v, ok := lookup(o.Secret, name)
			if !ok {
				return nil, fmt.Errorf("inject[%d].value: the daemon has no secret %s (serve --secrets-file, or SANDBOXD_SECRET_%s in its environment)", i, name, name)
			}
			if err := CheckSecretValue(name, v); err != nil {
				return nil, fmt.Errorf("inject[%d].value: %w", i, err)
			}
			values[name] = v
		}
		hr := in.hosts[host]
		if hr == nil {
			hr = &hostRules{}
			in.hosts[host] = hr
		}
		hr.set = append(hr.set, [2]string{http.CanonicalHeaderKey(r.Header), t.expand(values)})
		for _, name := range t.Names() {
			ph := a.Placeholder(name)
			if !slices.Contains(hr.replace, ph) {
				hr.replace = append(hr.replace, ph, values[name])
				if len(values[name]) >= minScrub {
					hr.scrub = append(hr.scrub, values[name], ph)
				}
			}
		}
	}
	for _, hr := range in.hosts {
		hr.replacer = strings.NewReplacer(hr.replace...)
		hr.scrubber = strings.NewReplacer(hr.scrub...)
	}
	return in, nil
}

func lookup(f func(string) (string, bool), name string) (string, bool) {
	if f == nil {
		return "", false
	}
	return f(name)
}

// Intercepts reports whether host has rules: its TLS connections are
// terminated here.
func (in *Injector) Intercepts(host string) bool {
	_, ok := in.hosts[strings.ToLower(host)]
	return ok
}

// ErrNotIntercepted is ServeTLS's error for a host without rules.
var ErrNotIntercepted = errors.New("inject: no rules for this host")

// ServeTLS owns conn until it ends: conn starts with the client's TLS
// ClientHello for host; the requests read from it go to host:port over
// connections that dial opens (the proxy's policy and resolution), each
// with the host's headers set. It returns when the client closes the
// connection, it idles out, or ctx ends.
func (in *Injector) ServeTLS(ctx context.Context, conn net.Conn, host string, port int,
	dial func(ctx context.Context, network, addr string) (net.Conn, error)) error {
	host = strings.ToLower(host)
	hr, ok := in.hosts[host]
	if !ok {
		conn.Close()
		return ErrNotIntercepted
	}
	tc := tls.Server(conn, &tls.Config{
		MinVersion: tls.VersionTLS12,
		NextProtos: []string{"http/1.1"}, // h2 is not offered: net/http's server speaks it only through its own listener's setup
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			// The name is the proxy's (the SNI it routed by), not re-read.
			return in.auth.leaf(host)
		},
	})
	defer func() { _ = tc.Close() }()
	hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
	err := tc.HandshakeContext(hctx)
	cancel()
	if err != nil {
		return fmt.Errorf("inject: TLS handshake with the sandbox for %s: %w", host, err)
	}
	tr := in.transport(host, dial)
	defer tr.CloseIdleConnections()
	// handlers: each request's handler holds a read lock; ServeTLS takes
	// the write lock at its end, so it waits for an upgraded connection's
	// copy and no handler starts after.
	var handlers sync.RWMutex
	ln := newOneConn(tc)
	srv := &http.Server{
		Handler:                      in.handler(host, port, hr, tr, &handlers),
		ReadHeaderTimeout:            ReadHeaderTimeout,
		IdleTimeout:                  IdleTimeout,
		MaxHeaderBytes:               MaxHeaderBytes,
		DisableGeneralOptionsHandler: true,
		ErrorLog:                     slog.NewLogLogger(in.log.Handler(), slog.LevelDebug),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateClosed || s == http.StateHijacked {
				ln.finish()
			}
		},
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	stop := context.AfterFunc(ctx, func() {
		_ = srv.Close()
		_ = tc.Close() // a hijacked (upgraded) connection too
	})
	defer stop()
	err = srv.Serve(ln)
	ln.wait()       // the connection's goroutine (a refusal lingers before its close)
	handlers.Lock() // an upgraded connection is copied until it ends
	if errors.Is(err, net.ErrClosed) || errors.Is(err, http.ErrServerClosed) {
		return ctx.Err()
	}
	return err
}

// transport sends a connection's requests to host: HTTP/1.1 over TLS that
// verifies host's certificate against the roots, connections opened by
// the proxy's dial.
func (in *Injector) transport(host string, dial func(ctx context.Context, network, addr string) (net.Conn, error)) *http.Transport {
	return &http.Transport{
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			uc := tls.Client(c, &tls.Config{ServerName: host, RootCAs: in.roots, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}})
			hctx, cancel := context.WithTimeout(ctx, HandshakeTimeout)
			defer cancel()
			if err := uc.HandshakeContext(hctx); err != nil {
				c.Close()
				return nil, err
			}
			return uc, nil
		},
		ForceAttemptHTTP2:      false,
		DisableCompression:     true, // the client's Accept-Encoding goes as it is, the answer comes back as it is
		MaxIdleConnsPerHost:    2,
		IdleConnTimeout:        IdleTimeout,
		ResponseHeaderTimeout:  ResponseHeaderTimeout,
		MaxResponseHeaderBytes: MaxResponseHeaderBytes,
	}
}

// handler proxies one host's requests.
func (in *Injector) handler(host string, port int, hr *hostRules, tr http.RoundTripper, handlers *sync.RWMutex) http.Handler {
	authority := host
	if port != 443 {
		authority = net.JoinHostPort(host, strconv.Itoa(port))
	}
	rp := &httputil.ReverseProxy{
		Transport: tr,
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host, pr.Out.Host = "https", authority, authority
			for _, vs := range pr.Out.Header {
				for i, v := range vs {
					vs[i] = hr.replacer.Replace(v)
				}
			}
			for _, s := range hr.set {
				pr.Out.Header.Set(s[0], s[1])
			}
		},
		ModifyResponse: func(r *http.Response) error {
			// A host that echoes a request's headers would show the value:
			// its response headers carry the placeholder instead.
			for _, vs := range r.Header {
				for i, v := range vs {
					vs[i] = hr.scrubber.Replace(v)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client went away
			}
			in.log.Warn("egress injection: the request failed", "host", host, "err", err)
			http.Error(w, upstreamError(host, port, err), http.StatusBadGateway)
		},
		ErrorLog: slog.NewLogLogger(in.log.Handler(), slog.LevelDebug),
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !handlers.TryRLock() {
			http.Error(w, "sandboxd egress: the connection is closing", http.StatusServiceUnavailable)
			return
		}
		defer handlers.RUnlock()
		if r.Method == http.MethodConnect {
			http.Error(w, "sandboxd egress: CONNECT inside a terminated TLS connection is not served", http.StatusMethodNotAllowed)
			return
		}
		if h, p := splitHost(r.Host); !strings.EqualFold(h, host) || (p != "" && p != strconv.Itoa(port)) {
			// The connection was routed by its TLS name; a request naming
			// another host would take this host's secrets elsewhere.
			http.Error(w, fmt.Sprintf("sandboxd egress: this connection is for %s; the request names %q", authority, r.Host), http.StatusMisdirectedRequest)
			return
		}
		rp.ServeHTTP(w, r)
	})
}

func splitHost(hostport string) (host, port string) {
	if h, p, err := net.SplitHostPort(hostport); err == nil {
		return h, p
	}
	return hostport, ""
}

// upstreamError is the 502 body: what failed, in words an agent reads.
func upstreamError(host string, port int, err error) string {
	var (
		verr *tls.CertificateVerificationError
		uerr x509.UnknownAuthorityError
		herr x509.HostnameError
		cerr x509.CertificateInvalidError
	)
	switch {
	case errors.As(err, &verr), errors.As(err, &uerr), errors.As(err, &herr), errors.As(err, &cerr):
		return fmt.Sprintf("sandboxd egress: refused %s: its TLS certificate does not verify (%v); nothing was sent", host, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("sandboxd egress: %s:%d did not answer in time", host, port)
	}
	return fmt.Sprintf("sandboxd egress: %s:%d could not be reached: %v", host, port, err)
}

// oneConn is a listener that yields one connection, then blocks until
// closed: net/http's server serves that connection. finish is called when
// the server is done with it (closed or hijacked).
type oneConn struct {
	conn     chan net.Conn
	done     chan struct{}
	once     sync.Once
	finished chan struct{}
	fonce    sync.Once
	accepted atomic.Bool
	addr     net.Addr
}

func newOneConn(c net.Conn) *oneConn {
	l := &oneConn{conn: make(chan net.Conn, 1), done: make(chan struct{}), finished: make(chan struct{}), addr: c.LocalAddr()}
	l.conn <- c
	return l
}

func (l *oneConn) Accept() (net.Conn, error) {
	select {
	case <-l.done:
		return nil, net.ErrClosed
	default:
	}
	select {
	case c := <-l.conn:
		l.accepted.Store(true)
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// finish records that the server is done with the connection.
func (l *oneConn) finish() {
	l.fonce.Do(func() { close(l.finished) })
	_ = l.Close()
}

// wait returns once the server is done with the connection, if it took it.
func (l *oneConn) wait() {
	if l.accepted.Load() {
		<-l.finished
	}
}

func (l *oneConn) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *oneConn) Addr() net.Addr { return l.addr }

var _ io.Closer = (*oneConn)(nil)
