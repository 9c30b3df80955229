package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/internal/loglimit"
)

// Defaults of Options.
const (
	// DefaultPort is where a session's proxy listens on its gateway: TCP
	// for the proxy, UDP for its DNS answers. One number for every session
	// (each has a gateway address of its own), so the sandbox's
	// HTTP_PROXY and the firewall rules are rebuilt from the session alone.
	DefaultPort = 13128
	// DefaultMaxConns bounds one session's open connections through its
	// proxy; one more is closed at once.
	DefaultMaxConns = 256
	// DefaultHeaderTimeout bounds the wait for a request's header or a
	// ClientHello.
	DefaultHeaderTimeout = 30 * time.Second
	// DefaultMaxHeaderBytes bounds a request's header.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultDialTimeout bounds a connection to an upstream host.
	DefaultDialTimeout = 30 * time.Second
	// maxAddrs bounds the addresses of a name the proxy tries.
	maxAddrs = 16
)

// Options configure a Server; zero fields take the defaults.
type Options struct {
	Port int
	// Resolve looks a name up on the host at connection time; nil is the
	// host's resolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// Refuse names the addresses the proxy never dials, whatever a name
	// resolves to; nil is DefaultRefuse. The daemon adds the host's own
	// addresses and its sandboxes' networks.
	Refuse func(netip.Addr) bool
	// Dial opens an upstream connection to an address ("ip:port"); nil is
	// a net.Dialer with DialTimeout.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger gets one line per denied name per session (bounded).
	Logger *slog.Logger
	// OnDenial is called for every denial, with its Via (metrics).
	OnDenial func(via string)
	// Listen opens a session's listeners (tests); nil: net.Listen and
	// net.ListenPacket.
	Listen       func(network, addr string) (net.Listener, error)
	ListenPacket func(network, addr string) (net.PacketConn, error)

	MaxConns       int
	HeaderTimeout  time.Duration
	MaxHeaderBytes int
	DialTimeout    time.Duration
	// Now is the clock of the denial records; nil is time.Now.
	Now func() time.Time
}

// Server runs the egress proxies of a daemon's sessions, one per session
// (Start), each on its session's gateway address.
type Server struct {
	o        Options
	mu       sync.Mutex
	sessions map[string]*session
	counts   map[string]uint64 // denials by Via, every session's
}

// New returns a Server without sessions.
func New(o Options) *Server {
	if o.Port == 0 {
		o.Port = DefaultPort
	}
	if o.Resolve == nil {
		o.Resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if o.Refuse == nil {
		o.Refuse = DefaultRefuse
	}
	if o.Dial == nil {
		d := &net.Dialer{Timeout: o.DialTimeout}
		if d.Timeout <= 0 {
			d.Timeout = DefaultDialTimeout
		}
		o.Dial = d.DialContext
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Listen == nil {
		o.Listen = net.Listen
	}
	if o.ListenPacket == nil {
		o.ListenPacket = net.ListenPacket
	}
	if o.MaxConns <= 0 {
		o.MaxConns = DefaultMaxConns
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.MaxHeaderBytes <= 0 {
		o.MaxHeaderBytes = DefaultMaxHeaderBytes
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Server{o: o, sessions: map[string]*session{}, counts: map[string]uint64{ViaHTTP: 0, ViaConnect: 0, ViaTLS: 0, ViaLimit: 0}}
}

// Counts counts the denials of every session since the server started, by
// Denial.Via.
func (s *Server) Counts() map[string]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.counts)
}

// counted is OnDenial after the server's own count.
func (s *Server) counted(via string) {
	s.mu.Lock()
	s.counts[via]++
	s.mu.Unlock()
	if s.o.OnDenial != nil {
		s.o.OnDenial(via)
	}
}

// Port is the port of every session's proxy.
func (s *Server) Port() int { return s.o.Port }

// ProxyURL is the HTTP_PROXY of a sandbox whose gateway is gw.
func (s *Server) ProxyURL(gw netip.Addr) string {
	return "http://" + netip.AddrPortFrom(gw, uint16(s.o.Port)).String()
}

// Start runs the proxy of the session (or sidecar network) key on gw with
// policy p. A proxy already running for key is replaced.
func (s *Server) Start(key string, gw netip.Addr, p Policy) error {
	s.Stop(key)
	addr := netip.AddrPortFrom(gw, uint16(s.o.Port)).String()
	ln, err := s.o.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("egress proxy of %s: %w", key, err)
	}
	pc, err := s.o.ListenPacket("udp", addr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("egress proxy of %s (DNS): %w", key, err)
	}
	ss := s.serve(key, gw, p, ln, pc)
	s.mu.Lock()
	s.sessions[key] = ss
	s.mu.Unlock()
	return nil
}

// Running reports whether key has a proxy.
func (s *Server) Running(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[key] != nil
}

// Stop ends the proxy of key and every connection through it; a key
// without one is a no-op.
func (s *Server) Stop(key string) {
	s.mu.Lock()
	ss := s.sessions[key]
	delete(s.sessions, key)
	s.mu.Unlock()
	if ss != nil {
		ss.close()
	}
}

// StopSession stops the proxies of a session and of its sidecars'
// networks (keys "<id>/...").
func (s *Server) StopSession(sessionID string) {
	s.mu.Lock()
	var keys []string
	for k := range s.sessions {
		if k == sessionID || strings.HasPrefix(k, sessionID+"/") {
			keys = append(keys, k)
		}
	}
	s.mu.Unlock()
	for _, k := range keys {
		s.Stop(k)
	}
}

// Close stops every proxy.
func (s *Server) Close() {
	s.mu.Lock()
	all := s.sessions
	s.sessions = map[string]*session{}
	s.mu.Unlock()
	for _, ss := range all {
		ss.close()
	}
}

// Denials returns the recent denials of a session and of its sidecars'
// networks (keys "<id>/..."), oldest first.
func (s *Server) Denials(sessionID string) []Denial {
	s.mu.Lock()
	var out []Denial
	for k, ss := range s.sessions {
		if k == sessionID || strings.HasPrefix(k, sessionID+"/") {
			out = append(out, ss.denials.list()...)
		}
	}
	s.mu.Unlock()
	sortDenials(out)
	return out
}

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

// trackedConn is a sandbox's connection to the proxy: its Close frees its
// place in the session's bound.
type trackedConn struct {
	net.Conn
	ss   *session
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.ss.mu.Lock()
		delete(c.ss.conns, c)
		c.ss.mu.Unlock()
		<-c.ss.sem
	})
	return err
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

// splice copies both ways between the sandbox's connection (after the
// bytes already read from it, first) and up until both sides end, closing
// each write side as its reader ends.
func splice(c net.Conn, first []byte, up net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(c, up)
		closeWrite(c)
	}()
	if len(first) > 0 {
		_, _ = up.Write(first)
	}
	_, _ = io.Copy(up, c)
	closeWrite(up)
	wg.Wait()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// prefixConn reads r (the bytes already read, then the connection) before
// the connection itself.
type prefixConn struct {
	*trackedConn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connListener hands connections to the session's HTTP server.
type connListener struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) put(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }
