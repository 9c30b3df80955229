package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/loglimit"
)

// session is one session's proxy.
type session struct {
	srv    *Server
	key    string
	gw     netip.Addr
	pol    Policy
	ctx    context.Context
	cancel context.CancelFunc
	ln     net.Listener
	pc     net.PacketConn
	hln    *connListener // the HTTP connections, served by hs
	hs     *http.Server
	rp     *httputil.ReverseProxy
	tr     *http.Transport
	sem    chan struct{}
	wg     sync.WaitGroup

	mu    sync.Mutex
	conns map[*trackedConn]struct{}
	done  bool

	denials denialLog
}

// serve starts a session's proxy on ln (TCP) and pc (DNS).
func (s *Server) serve(key string, gw netip.Addr, p Policy, ln net.Listener, pc net.PacketConn) *session {
	ctx, cancel := context.WithCancel(context.Background())
	ss := &session{
		srv: s, key: key, gw: gw, pol: p, ctx: ctx, cancel: cancel, ln: ln, pc: pc,
		hln:   newConnListener(ln.Addr()),
		sem:   make(chan struct{}, s.o.MaxConns),
		conns: map[*trackedConn]struct{}{},
	}
	// Denials are logged once per name, through a rate limit of the
	// session's own: the names come from the sandbox.
	ss.denials.init(loglimit.NewLogger(s.o.Logger.With("session", key), loglimit.Options{}), s.o.Now, s.counted)
	// No upstream connection outlives its request: each is resolved and
	// checked when it opens, so a name that moves is followed at the next
	// request, and nothing of one request's upstream serves another's.
	ss.tr = &http.Transport{
		Proxy:              nil, // never the daemon's own proxy settings
		DialContext:        ss.dialAddr,
		DisableKeepAlives:  true,
		DisableCompression: true,
	}
	ss.rp = &httputil.ReverseProxy{
		Rewrite:      func(*httputil.ProxyRequest) {}, // the target is set by ServeHTTP
		Transport:    ss.tr,
		ErrorHandler: ss.proxyError,
		ErrorLog:     slog.NewLogLogger(slog.DiscardHandler, slog.LevelDebug),
	}
	ss.hs = &http.Server{
		Handler:           ss,
		ReadHeaderTimeout: s.o.HeaderTimeout,
		MaxHeaderBytes:    s.o.MaxHeaderBytes,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(slog.DiscardHandler, slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	ss.wg.Add(3)
	go func() { defer ss.wg.Done(); ss.accept() }()
	go func() { defer ss.wg.Done(); _ = ss.hs.Serve(ss.hln) }()
	go func() { defer ss.wg.Done(); serveDNS(pc, gw) }()
	return ss
}

func (ss *session) close() {
	ss.mu.Lock()
	ss.done = true
	conns := make([]*trackedConn, 0, len(ss.conns))
	for c := range ss.conns {
		conns = append(conns, c)
	}
	ss.mu.Unlock()
	ss.cancel()
	ss.ln.Close()
	_ = ss.pc.Close()
	_ = ss.hs.Close()
	_ = ss.hln.Close()
	for _, c := range conns {
		_ = c.Close()
	}
	ss.tr.CloseIdleConnections()
	ss.wg.Wait()
}

// accept takes the sandbox's connections: past the session's bound one is
// closed at once; the rest are sniffed (handle).
func (ss *session) accept() {
	for {
		c, err := ss.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ss.ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: the proxy must not
			// stop for good, but must not spin either.
			select {
			case <-ss.ctx.Done():
				return
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		select {
		case ss.sem <- struct{}{}:
		default:
			c.Close()
			ss.denials.limit(ss.srv.o.MaxConns)
			continue
		}
		tc := ss.track(c)
		if tc == nil {
			continue
		}
		ss.wg.Add(1)
		go func() { defer ss.wg.Done(); ss.handle(tc) }()
	}
}

// track registers c until it is closed; nil (c closed) once the session
// ends.
func (ss *session) track(c net.Conn) *trackedConn {
	tc := &trackedConn{Conn: c, ss: ss}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.done {
		c.Close()
		<-ss.sem
		return nil
	}
	ss.conns[tc] = struct{}{}
	return tc
}

// handle sniffs a connection's first byte: a TLS handshake record is a
// TLS connection redirected from port 443 (routed by its SNI), anything
// else is HTTP (a proxy request, or a plain request redirected from port
// 80), served by the session's HTTP server.
func (ss *session) handle(c *trackedConn) {
	_ = c.SetReadDeadline(time.Now().Add(ss.srv.o.HeaderTimeout))
	first := make([]byte, 1)
	if _, err := io.ReadFull(c.Conn, first); err != nil {
		_ = c.Close()
		return
	}
	if first[0] == 0x16 { // TLS handshake record
		ss.serveTLS(c, first)
		return
	}
	_ = c.SetReadDeadline(time.Time{}) // the HTTP server sets its own
	if !ss.hln.put(&prefixConn{trackedConn: c, r: io.MultiReader(bytes.NewReader(first), c.Conn)}) {
		_ = c.Close()
	}
}

// serveTLS routes a TLS connection by the SNI of its ClientHello: a denied
// or missing name is closed and recorded; an allowed one is intercepted
// (Policy.Interceptor) or spliced to the name's port 443.
func (ss *session) serveTLS(c *trackedConn, first []byte) {
	defer func() { _ = c.Close() }()
	sni, hello, err := ReadClientHello(io.MultiReader(bytes.NewReader(first), c.Conn))
	if err != nil {
		ss.deny(fmt.Sprintf("(%d bytes that are not a TLS ClientHello)", len(hello)), 443, ViaTLS, "not a TLS ClientHello")
		return
	}
	host, _, ok := NormalizeHost(sni)
	switch {
	case sni == "":
		ss.deny("(no SNI)", 443, ViaTLS, "the TLS ClientHello names no server (SNI); connect by name or through HTTPS_PROXY")
		return
	case !ok:
		ss.deny(sni, 443, ViaTLS, "the SNI is not a host name")
		return
	case !ss.pol.Allows(host):
		ss.deny(host, 443, ViaTLS, notAllowed(host))
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if ic := ss.pol.Interceptor; ic != nil && ic.Intercepts(host) {
		_ = ic.ServeTLS(ss.ctx, &prefixConn{trackedConn: c, r: io.MultiReader(bytes.NewReader(hello), c.Conn)}, host, 443, ss.dialAddr)
		return
	}
	up, err := ss.dial(ss.ctx, host, 443)
	if err != nil {
		ss.denyErr(host, 443, ViaTLS, err)
		return
	}
	defer up.Close()
	if _, err := up.Write(hello); err != nil {
		return
	}
	splice(c.Conn, nil, up)
}

// ServeHTTP serves a request on the proxy: CONNECT, an absolute-form
// request (a client honouring HTTP_PROXY) or an origin-form one (redirected
// from port 80) routed by its Host.
func (ss *session) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		ss.serveConnect(w, r)
		return
	}
	target := r.Host
	if r.URL.IsAbs() {
		if r.URL.Scheme != "http" {
			http.Error(w, fmt.Sprintf("sandboxd egress proxy: scheme %q is not proxied: use CONNECT (HTTPS_PROXY) for https", r.URL.Scheme), http.StatusBadRequest)
			return
		}
		target = r.URL.Host
	}
	host, port, ok := SplitTarget(target, 80)
	if !ok {
		http.Error(w, "sandboxd egress proxy: the request names no valid host", http.StatusBadRequest)
		return
	}
	if !ss.pol.Allows(host) {
		ss.deny(host, port, ViaHTTP, notAllowed(host))
		forbid(w, host)
		return
	}
	out := r.Clone(r.Context())
	out.URL.Scheme, out.URL.Host = "http", net.JoinHostPort(host, strconv.Itoa(port))
	out.RequestURI = ""
	ss.rp.ServeHTTP(w, out)
}

// serveConnect answers a CONNECT: 403 for a denied name, 502 when the host
// cannot be reached, else 200 and the tunnel (intercepted or spliced).
func (ss *session) serveConnect(w http.ResponseWriter, r *http.Request) {
	host, port, ok := SplitTarget(r.Host, 0)
	if !ok || port == 0 {
		http.Error(w, "sandboxd egress proxy: CONNECT needs host:port", http.StatusBadRequest)
		return
	}
	if !ss.pol.Allows(host) {
		ss.deny(host, port, ViaConnect, notAllowed(host))
		forbid(w, host)
		return
	}
	ic := ss.pol.Interceptor
	intercept := ic != nil && ic.Intercepts(host)
	var up net.Conn
	if !intercept {
		var err error
		if up, err = ss.dial(r.Context(), host, port); err != nil {
			ss.denyErr(host, port, ViaConnect, err)
			var de *DeniedError
			if errors.As(err, &de) {
				http.Error(w, "blocked by sandbox policy: "+de.Reason, http.StatusForbidden)
				return
			}
			http.Error(w, "sandboxd egress proxy: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer up.Close()
	}
	rc := http.NewResponseController(w)
	c, brw, err := rc.Hijack()
	if err != nil {
		return
	}
	pc, _ := c.(*prefixConn)
	if pc == nil {
		c.Close()
		return
	}
	defer func() { _ = pc.Close() }()
	_ = pc.SetDeadline(time.Time{})
	if _, err := io.WriteString(pc.Conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	var buffered []byte
	if n := brw.Reader.Buffered(); n > 0 {
		buffered, _ = brw.Peek(n)
		buffered = bytes.Clone(buffered)
	}
	if intercept {
		_ = ic.ServeTLS(ss.ctx, &prefixConn{trackedConn: pc.trackedConn, r: io.MultiReader(bytes.NewReader(buffered), pc.r)}, host, port, ss.dialAddr)
		return
	}
	// The prefix reader may still hold the sniffed byte only before the
	// request line; by now it is consumed, so the raw connection follows
	// the bytes the HTTP server buffered.
	splice(pc.Conn, buffered, up)
}

// forbid writes the denial the agent reads.
func forbid(w http.ResponseWriter, host string) {
	w.Header().Set("Connection", "close")
	http.Error(w, "blocked by sandbox policy: "+host+" is not in allow_hosts", http.StatusForbidden)
}

func notAllowed(host string) string { return host + " is not in allow_hosts" }

// proxyError answers a forwarded request that failed.
func (ss *session) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	var de *DeniedError
	if errors.As(err, &de) {
		host, port, _ := SplitTarget(r.URL.Host, 80)
		ss.deny(host, port, ViaHTTP, de.Reason)
		http.Error(w, "blocked by sandbox policy: "+de.Reason, http.StatusForbidden)
		return
	}
	if r.Context().Err() != nil {
		return
	}
	http.Error(w, "sandboxd egress proxy: "+err.Error(), http.StatusBadGateway)
}

// DeniedError is a connection the policy refused past the name check: the
// name resolves only to addresses the proxy never dials.
type DeniedError struct{ Host, Reason string }

func (e *DeniedError) Error() string { return "blocked by sandbox policy: " + e.Reason }

// dialAddr is dial for "host:port" (the Transport's and an Interceptor's).
func (ss *session) dialAddr(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, ok := SplitTarget(addr, 0)
	if !ok || port == 0 {
		return nil, fmt.Errorf("egress: %q is not host:port", addr)
	}
	if network != "tcp" && network != "tcp4" && network != "tcp6" {
		return nil, fmt.Errorf("egress: network %q is not proxied", network)
	}
	if !ss.pol.Allows(host) {
		return nil, &DeniedError{Host: host, Reason: notAllowed(host)}
	}
	return ss.dial(ctx, host, port)
}

// dial connects to an allowed host (normalized): an address as it is, a
// name resolved now, each address checked against the addresses never
// dialed, the first that answers.
func (ss *session) dial(ctx context.Context, host string, port int) (net.Conn, error) {
	o := &ss.srv.o
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		rctx, cancel := context.WithTimeout(ctx, o.DialTimeout)
		got, err := o.Resolve(rctx, host)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("resolving %s: %w", host, err)
		}
		addrs = got
	}
	var usable []netip.Addr
	for _, a := range addrs {
		if a = a.Unmap(); a.IsValid() && !o.Refuse(a) && len(usable) < maxAddrs {
			usable = append(usable, a)
		}
	}
	if len(usable) == 0 {
		if len(addrs) == 0 {
			return nil, fmt.Errorf("%s has no address", host)
		}
		return nil, &DeniedError{Host: host, Reason: host + " resolves only to addresses a sandbox may not reach (the host, loopback, link-local or another sandbox's network)"}
	}
	var errs []error
	for _, a := range usable {
		c, err := o.Dial(ctx, "tcp", netip.AddrPortFrom(a, uint16(port)).String())
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("connecting to %s: %w", host, errors.Join(errs...))
}

// DefaultRefuse refuses the addresses no sandbox reaches through its
// proxy: loopback, unspecified, link-local (cloud metadata services) and
// multicast.
func DefaultRefuse(a netip.Addr) bool {
	return !a.IsValid() || a.IsLoopback() || a.IsUnspecified() || a.IsLinkLocalUnicast() ||
		a.IsLinkLocalMulticast() || a.IsInterfaceLocalMulticast() || a.IsMulticast()
}
