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
