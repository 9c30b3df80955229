package docker

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/network"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/egress"
)

// The egress proxy of a bridge session whose allow_hosts name hosts
// (docs/decisions/0050-egress-proxy.md). The proxy (package egress) listens
// on the session's gateway, at the port of the runtime's egress.Server,
// for TCP (the proxy) and UDP (its DNS). The session's rules:
//
//   - SANDBOXD-INPUT accepts that port on the gateway from the session's
//     bridge, before it rejects the rest of the host;
//   - SANDBOXD-PREROUTING (nat) lets the IPv4 entries of allow_hosts
//     through untouched, then redirects the bridge's TCP 80 and 443 and
//     UDP 53 to the proxy: a client that ignores HTTP_PROXY reaches it as
//     well, and DNS to any server gets the proxy's answer;
//   - SANDBOXD-FORWARD allows the IP entries only (any port), as without
//     names, so anything but HTTP and TLS follows the IP entries alone.
//
// The container gets HTTP_PROXY, HTTPS_PROXY and NO_PROXY (and their
// lower-case forms) and the gateway as its DNS server. The names are on
// the network's label LabelEgressNames, so a restarted runtime starts the
// proxy again with the same policy (syncFirewall).

// LabelEgressNames on a session's network lists the name and wildcard
// entries of its allow_hosts (comma-separated), absent when it has none.
const LabelEgressNames = "sandboxd.egress-names"

// proxyInput: the rule opening the proxy's port on the gateway (TCP and
// UDP), above the rule rejecting the rest of the host.
func (r netRules) proxyInput(rule func(string, ...string) []string, v6 bool) [][]string {
	if !r.proxy.IsValid() || v6 != r.proxy.Addr().Is6() {
		return nil
	}
	port := strconv.Itoa(int(r.proxy.Port()))
	var out [][]string
	for _, proto := range []string{"tcp", "udp"} {
		out = append(out, append(rule(ChainInput, "-d", r.proxy.Addr().String()+"/32", "-p", proto, "--dport", port), "-j", "ACCEPT"))
	}
	return out
}

// proxyNAT: the redirects to the proxy (IPv4 only), after the IP entries
// that pass untouched.
func (r netRules) proxyNAT(rule func(string, ...string) []string, v6 bool) [][]string {
	if !r.proxy.IsValid() || v6 {
		return nil
	}
	port := strconv.Itoa(int(r.proxy.Port()))
	var out [][]string
	for _, p := range r.egress {
		if p.Addr().Is4() {
			out = append(out, append(rule(ChainNAT, "-d", p.String()), "-j", "RETURN"))
		}
	}
	return append(out,
		append(rule(ChainNAT, "-p", "tcp", "-m", "multiport", "--dports", "80,443"), "-j", "REDIRECT", "--to-ports", port),
		append(rule(ChainNAT, "-p", "udp", "--dport", "53"), "-j", "REDIRECT", "--to-ports", port),
	)
}

// egressPlan is a parsed allow_hosts: the prefixes of its IP entries (for
// the FORWARD rules, sorted, never nil) and the policy of its proxy.
type egressPlan struct {
	prefixes []netip.Prefix
	names    []string // the name and wildcard entries, normalized
	policy   egress.Policy
}

func planEgress(hosts []string) (egressPlan, error) {
	p := egressPlan{prefixes: []netip.Prefix{}}
	var problems []string
	for _, h := range hosts {
		ah, err := sandbox.ParseAllowHost(h)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("allow_hosts: %v", err))
		case ah.Name == "":
			p.prefixes = append(p.prefixes, ah.Prefix)
		case ah.Wildcard:
			p.policy.Suffixes = append(p.policy.Suffixes, "."+ah.Name)
			p.names = append(p.names, ah.String())
		default:
			p.policy.Names = append(p.policy.Names, ah.Name)
			p.names = append(p.names, ah.String())
		}
	}
	if len(problems) > 0 {
		return egressPlan{}, &sandbox.OptionsError{Problems: problems}
	}
	slices.SortFunc(p.prefixes, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	p.prefixes = slices.Compact(p.prefixes)
	p.policy.Prefixes = p.prefixes
	return p, nil
}

// gatewayOf is the IPv4 gateway of a network's IPAM configuration.
func gatewayOf(cfg []network.IPAMConfig) (netip.Addr, bool) {
	for _, c := range cfg {
		if a, err := netip.ParseAddr(c.Gateway); err == nil && a.Is4() {
			return a, true
		}
	}
	return netip.Addr{}, false
}

// startProxy starts the egress proxy of network netID (key: a session or
// a sidecar's egress network) on its gateway and returns the proxy's
// address.
func (r *Runtime) startProxy(ctx context.Context, key, netID string, p egress.Policy) (netip.AddrPort, error) {
	if r.egress == nil {
		return netip.AddrPort{}, &sandbox.OptionsError{Problems: []string{"allow_hosts: host names need the egress proxy, which this runtime does not run"}}
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	n, err := r.cli.NetworkInspect(cctx, netID, network.InspectOptions{})
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("inspecting the network of %s for its egress proxy: %w", key, err)
	}
	gw, ok := gatewayOf(n.IPAM.Config)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("the network of %s has no IPv4 gateway for its egress proxy", key)
	}
	if err := r.egress.Start(key, gw, p); err != nil {
		return netip.AddrPort{}, err
	}
	return netip.AddrPortFrom(gw, uint16(r.egress.Port())), nil
}

// proxyEnv is what tells a sandbox's tools about its proxy.
func proxyEnv(proxy netip.AddrPort) []string {
	if !proxy.IsValid() {
		return nil
	}
	u := "http://" + proxy.String()
	var env []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"} {
		env = append(env, k+"="+u)
	}
	return append(env, "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1")
}

// withProxy sets a container's proxy variables (over any of the same name
// in env) and its DNS server.
func withProxy(env []string, proxy netip.AddrPort) []string {
	add := proxyEnv(proxy)
	if add == nil {
		return env
	}
	env = slices.DeleteFunc(slices.Clone(env), func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		return slices.ContainsFunc(add, func(a string) bool { return strings.HasPrefix(a, k+"=") })
	})
	return append(env, add...)
}

// restartProxies starts again, after a restart, the proxies of the
// networks that have names (want, from networkRules). A proxy that cannot
// listen (another runtime of the scope still holds its address) is logged,
// not fatal: its rules are in place either way.
func (r *Runtime) restartProxies(ctx context.Context, nets []network.Summary) {
	if r.egress == nil {
		return
	}
	for _, n := range nets {
		names := n.Labels[LabelEgressNames]
		nr, ok, err := rulesOf(n)
		if names == "" || !ok || err != nil || !nr.proxy.IsValid() {
			continue
		}
		if r.egress.Running(nr.sessionID) {
			continue
		}
		hosts := strings.Split(names, ",")
		if v := n.Labels[LabelEgress]; v != "" {
			hosts = append(hosts, strings.Split(v, ",")...)
		}
		plan, err := planEgress(hosts)
		if err != nil {
			r.log.Warn("egress proxy not restarted: its network's labels do not parse", "network", n.Name, "err", err)
			continue
		}
		plan.policy.Interceptor = r.interceptorOf(ctx, nr.sessionID)
		if err := r.egress.Start(nr.sessionID, nr.proxy.Addr(), plan.policy); err != nil {
			r.log.Warn("egress proxy not restarted", "network", n.Name, "err", err)
		}
	}
}

// interceptorOf is the Interceptor of an adopted session (key), from its
// container's options label; nil without Options.EgressInterceptor or for
// a sidecar's network.
func (r *Runtime) interceptorOf(ctx context.Context, key string) egress.Interceptor {
	if r.opts.EgressInterceptor == nil || strings.Contains(key, "/") {
		return nil
	}
	c, err := r.findContainer(ctx, key)
	if err != nil {
		return nil
	}
	var o sandbox.SessionOptions
	if err := json.Unmarshal([]byte(c.Labels[sandbox.LabelOptions]), &o); err != nil {
		return nil
	}
	return r.opts.EgressInterceptor(o)
}

// refuseAddr is the egress.Options.Refuse of the runtime's own server:
// besides egress.DefaultRefuse, the host's own addresses (as INPUT keeps
// the host closed to a session, so does its proxy) and the networks of
// the engine's bridges (other sandboxes and containers, which Docker's
// isolation keeps a session from).
func refuseAddr(a netip.Addr) bool {
	if egress.DefaultRefuse(a) {
		return true
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return true // fail closed
	}
	for _, ifc := range ifs {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		bridge := strings.HasPrefix(ifc.Name, bridgePrefix) || strings.HasPrefix(ifc.Name, "br-") || strings.HasPrefix(ifc.Name, "docker")
		for _, ad := range addrs {
			ipn, ok := ad.(*net.IPNet)
			if !ok {
				continue
			}
			pa, ok := netip.AddrFromSlice(ipn.IP)
			if !ok {
				continue
			}
			pa = pa.Unmap()
			if pa == a {
				return true
			}
			if ones, _ := ipn.Mask.Size(); bridge && netip.PrefixFrom(pa, ones).Masked().Contains(a) {
				return true
			}
		}
	}
	return false
}

// lookupHost is the default Options.LookupHost: the host's resolver.
func lookupHost(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// EgressDenials implements sandbox.EgressRuntime.
func (r *Runtime) EgressDenials(sessionID string) []egress.Denial {
	if r.egress == nil {
		return nil
	}
	return r.egress.Denials(sessionID)
}

// EgressDenialCounts implements sandbox.EgressRuntime.
func (r *Runtime) EgressDenialCounts() map[string]uint64 {
	if r.egress == nil {
		return nil
	}
	return r.egress.Counts()
}
