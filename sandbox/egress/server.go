package egress

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"
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
