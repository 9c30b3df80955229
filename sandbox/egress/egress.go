// Package egress is the per-session egress proxy of bridge sessions whose
// allow_hosts name hosts (docs/decisions/0050-egress-proxy.md): plain HTTP
// routed by its Host, TLS by the SNI of its ClientHello (peeked, not
// terminated), CONNECT and absolute-form requests for clients that honour
// HTTP(S)_PROXY, names resolved on the host at connection time and the
// connection spliced through. What comes from a sandbox is hostile input:
// every read is bounded in size and time.
package egress

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// Interceptor terminates TLS for the hosts that have injection rules (E2's inject.Injector). nil: none.
type Interceptor interface {
	// Intercepts reports whether TLS connections to host (a lower-case name, no port) are terminated.
	Intercepts(host string) bool
	// ServeTLS owns conn until the connection ends: conn starts with the client's TLS ClientHello for
	// host (bytes the proxy peeked are replayed by conn), dial opens the upstream connection to
	// host:port through the same policy and resolution as every other connection.
	ServeTLS(ctx context.Context, conn net.Conn, host string, port int,
		dial func(ctx context.Context, network, addr string) (net.Conn, error)) error
}

// Policy is what one session's sandbox may reach through its proxy.
type Policy struct {
	// Names are exact host names, lower-case, without a trailing dot.
	Names []string
	// Suffixes are the wildcard entries without their "*": ".example.com"
	// for "*.example.com", which matches a.example.com and a.b.example.com
	// but not example.com itself (see Allows).
	Suffixes []string
	// Prefixes are the IP and CIDR entries: an IP literal a client asks
	// for is allowed when a prefix holds it.
	Prefixes []netip.Prefix
	// Interceptor, when set, terminates TLS for the hosts it intercepts
	// (secret injection); nil: no connection is intercepted.
	Interceptor Interceptor
}

// Allows reports whether the sandbox may reach host, a name or an IP
// literal as a client gave it (any case, a trailing dot allowed, IPv6 in
// brackets or not, no port). A name is allowed when it is one of Names or
// ends in one of Suffixes with at least one label before it: "*.x.com"
// covers a.x.com and a.b.x.com, not x.com (list both for both). An IP
// literal is allowed when one of Prefixes holds it: a name never allows
// the addresses it resolves to, and an address never allows a name.
func (p *Policy) Allows(host string) bool {
	h, addr, ok := NormalizeHost(host)
	if !ok {
		return false
	}
	if addr.IsValid() {
		return p.AllowsAddr(addr)
	}
	if slices.Contains(p.Names, h) {
		return true
	}
	for _, s := range p.Suffixes {
		if len(h) > len(s) && strings.HasSuffix(h, s) {
			return true
		}
	}
	return false
}

// AllowsAddr reports whether one of Prefixes holds a.
func (p *Policy) AllowsAddr(a netip.Addr) bool {
	a = a.Unmap()
	for _, pf := range p.Prefixes {
		if pf.Contains(a) {
			return true
		}
	}
	return false
}

// HasNames reports whether the policy names hosts (and so needs a proxy).
func (p *Policy) HasNames() bool { return len(p.Names)+len(p.Suffixes) > 0 }

// maxName is the longest DNS name.
const maxName = 253

// NormalizeHost turns a host as a client wrote it (in a Host header, a
// CONNECT target, an SNI) into the form Policy matches: a lower-case name
// without its trailing dot, or an address (addr valid; host its text). ok
// is false for anything else: empty, too long, characters a DNS name
// cannot hold.
func NormalizeHost(host string) (norm string, addr netip.Addr, ok bool) {
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		a, err := netip.ParseAddr(host[1 : len(host)-1])
		if err != nil || a.Zone() != "" {
			return "", netip.Addr{}, false
		}
		return a.Unmap().String(), a.Unmap(), true
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return "", netip.Addr{}, false
		}
		return a.Unmap().String(), a.Unmap(), true
	}
	host = strings.TrimSuffix(host, ".")
	if host == "" || len(host) > maxName {
		return "", netip.Addr{}, false
	}
	for label := range strings.SplitSeq(host, ".") {
		if label == "" || len(label) > 63 {
			return "", netip.Addr{}, false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' {
				return "", netip.Addr{}, false
			}
		}
	}
	return strings.ToLower(host), netip.Addr{}, true
}
