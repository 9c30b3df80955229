package docker

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestBridgeName(t *testing.T) {
	n := bridgeName("3f2a9c1e-0000-4000-8000-000000000000")
	assert.Len(t, n, 15, "the longest interface name Linux takes")
	assert.True(t, strings.HasPrefix(n, "sbx-"))
	assert.Equal(t, n, bridgeName("3f2a9c1e-0000-4000-8000-000000000000"), "deterministic")
	assert.NotEqual(t, n, bridgeName("3f2a9c1e-0000-4000-8000-000000000001"))
}

func joined(rules [][]string) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		out[i] = strings.Join(r, " ")
	}
	return out
}

func TestRules(t *testing.T) {
	const tag = "-m comment --comment sandboxd:sc:s1"
	input := []string{
		"SANDBOXD-INPUT -i sbx-1 -m conntrack --ctstate RELATED,ESTABLISHED " + tag + " -j RETURN",
		"SANDBOXD-INPUT -i sbx-1 " + tag + " -j REJECT",
		"SANDBOXD-FORWARD -i sbx-1 -o sbx-1 " + tag + " -j RETURN",
	}
	cross := "SANDBOXD-FORWARD -i sbx-1 -o sbx-+ " + tag + " -j REJECT"
	bridge := netRules{sessionID: "s1", iface: "sbx-1"}
	assert.Equal(t, append(slices.Clone(input), cross, "SANDBOXD-FORWARD -i sbx-1 -d 169.254.0.0/16 "+tag+" -j REJECT"),
		joined(bridge.rules("sc", false)), "bridge: the host, other sessions' bridges and link-local (metadata) closed")
	assert.Equal(t, append(slices.Clone(input), cross), joined(bridge.rules("sc", true)), "IPv6: the host and other bridges closed")

	internal := netRules{sessionID: "s1", iface: "sbx-1", internal: true}
	for _, v6 := range []bool{false, true} {
		assert.Equal(t, append(slices.Clone(input), "SANDBOXD-FORWARD -i sbx-1 "+tag+" -j REJECT"), joined(internal.rules("sc", v6)),
			"internal: nothing leaves the bridge (Docker says so too, but its chains have gaps)")
	}

	proxied := netRules{sessionID: "s1", iface: "sbx-1", egress: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")},
		proxy: netip.MustParseAddrPort("172.20.0.1:13128")}
	assert.Equal(t, []string{
		input[0],
		"SANDBOXD-INPUT -i sbx-1 -d 172.20.0.1/32 -p tcp --dport 13128 " + tag + " -j ACCEPT",
		"SANDBOXD-INPUT -i sbx-1 -d 172.20.0.1/32 -p udp --dport 13128 " + tag + " -j ACCEPT",
		input[1], input[2], cross,
		"SANDBOXD-FORWARD -i sbx-1 -d 192.0.2.7/32 " + tag + " -j RETURN",
		"SANDBOXD-FORWARD -i sbx-1 " + tag + " -j REJECT",
		"SANDBOXD-PREROUTING -i sbx-1 -d 192.0.2.7/32 " + tag + " -j RETURN",
		"SANDBOXD-PREROUTING -i sbx-1 -p tcp -m multiport --dports 80,443 " + tag + " -j REDIRECT --to-ports 13128",
		"SANDBOXD-PREROUTING -i sbx-1 -p udp --dport 53 " + tag + " -j REDIRECT --to-ports 13128",
	}, joined(proxied.rules("sc", false)),
		"names: the proxy's port open on the gateway, 80, 443 and DNS redirected to it but for the IP entries, which alone pass FORWARD")
	assert.Equal(t, append(slices.Clone(input), cross, "SANDBOXD-FORWARD -i sbx-1 "+tag+" -j REJECT"), joined(proxied.rules("sc", true)),
		"IPv6: no proxy (the network has no IPv6), everything but the v6 entries rejected")

	allow := netRules{sessionID: "s1", iface: "sbx-1", egress: []netip.Prefix{
		netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}}
	assert.Equal(t, append(slices.Clone(input), cross,
		"SANDBOXD-FORWARD -i sbx-1 -d 192.0.2.7/32 "+tag+" -j RETURN",
		"SANDBOXD-FORWARD -i sbx-1 -d 10.0.0.0/8 "+tag+" -j RETURN",
		"SANDBOXD-FORWARD -i sbx-1 "+tag+" -j REJECT"), joined(allow.rules("sc", false)),
		"an allowed prefix never opens another session's bridge: that reject comes first")
	assert.Equal(t, append(slices.Clone(input), cross,
		"SANDBOXD-FORWARD -i sbx-1 -d 2001:db8::/32 "+tag+" -j RETURN",
		"SANDBOXD-FORWARD -i sbx-1 "+tag+" -j REJECT"), joined(allow.rules("sc", true)))

	none := netRules{sessionID: "s1", iface: "sbx-1", egress: []netip.Prefix{}}
	assert.Equal(t, "SANDBOXD-FORWARD -i sbx-1 "+tag+" -j REJECT", joined(none.rules("sc", false))[4],
		"an empty resolved list still restricts")
}

func TestParseRules(t *testing.T) {
	out := `-N SANDBOXD-INPUT
-A SANDBOXD-INPUT -i sbx-1 -m conntrack --ctstate RELATED,ESTABLISHED -m comment --comment sandboxd:sc:s1 -j RETURN
-A SANDBOXD-INPUT -i sbx-1 -m comment --comment "sandboxd:sc:s1" -j REJECT --reject-with icmp-port-unreachable
-A SANDBOXD-INPUT -i eth9 -j ACCEPT
`
	rules := ParseRules(out)
	require.Len(t, rules, 3)
	assert.Equal(t, "sandboxd:sc:s1", rules[1].Tag)
	assert.Contains(t, rules[1].Args, "sandboxd:sc:s1", "unquoted, as -D wants it")
	assert.Equal(t, "SANDBOXD-INPUT", rules[1].Args[0])
	assert.Empty(t, rules[2].Tag)
	scope, id, ok := parseTag(rules[0].Tag)
	assert.True(t, ok)
	assert.Equal(t, "sc", scope)
	assert.Equal(t, "s1", id)
	_, _, ok = parseTag("someone else's")
	assert.False(t, ok)
}

func TestEgressLabelRoundTrip(t *testing.T) {
	p := []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32"), netip.MustParsePrefix("10.0.0.0/8")}
	got, err := parseEgress(formatEgress(p))
	require.NoError(t, err)
	assert.Equal(t, p, got)
	got, err = parseEgress("")
	require.NoError(t, err)
	assert.NotNil(t, got, "an empty allowlist restricts everything, unlike no label")
	assert.Empty(t, got)
	_, err = parseEgress("nope")
	assert.Error(t, err)
}

func TestRulesOf(t *testing.T) {
	n := network.Summary{ID: "0123456789abcdef", Name: "sandboxd-s1", Driver: "bridge",
		Labels:  map[string]string{sandbox.LabelSession: "s1", LabelEgress: "192.0.2.7/32"},
		Options: map[string]string{bridgeNameOption: "sbx-x"}}
	r, ok, err := rulesOf(n)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, netRules{sessionID: "s1", iface: "sbx-x", egress: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}}, r)

	n.Labels[LabelEgressNames] = "pypi.org,*.pythonhosted.org"
	_, _, err = rulesOf(n)
	require.ErrorContains(t, err, "no IPv4 gateway for their proxy")
	n.IPAM.Config = []network.IPAMConfig{{Subnet: "172.20.0.0/16", Gateway: "172.20.0.1"}}
	r, ok, err = rulesOf(n)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, netip.MustParseAddrPort("172.20.0.1:0"), r.proxy, "names: a proxy on the gateway (the port is the runtime's)")
	delete(n.Labels, LabelEgressNames)

	n.Options = nil
	delete(n.Labels, LabelEgress)
	r, _, _ = rulesOf(n)
	assert.Equal(t, "br-0123456789ab", r.iface, "a network made before sandboxd named its bridges")
	assert.Nil(t, r.egress)

	n.Name = "operators-net"
	_, ok, _ = rulesOf(n)
	assert.False(t, ok, "a network sandboxd did not make for the session")

	// A sidecar's egress network: its rules are keyed by the session and
	// the server.
	eg := network.Summary{ID: "0123456789abcdef", Name: sidecarEgressName("s1", "fetch"), Driver: "bridge",
		Labels:  map[string]string{sandbox.LabelSession: "s1", sandbox.LabelSidecar: "fetch", LabelEgress: "192.0.2.7/32"},
		Options: map[string]string{bridgeNameOption: bridgeName(sidecarEgressKey("s1", "fetch"))}}
	r, ok, err = rulesOf(eg)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, netRules{sessionID: "s1/fetch", iface: bridgeName("s1/fetch"), egress: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}}, r)
	assert.NotEqual(t, bridgeName("s1"), r.iface, "not the session's bridge")
	eg.Name = sidecarNetworkName("s1")
	_, ok, _ = rulesOf(eg)
	assert.False(t, ok, "a sidecar label on another network")

	// The session's sidecar network (internal, labelled as the session's
	// resources): the INPUT rules of an internal network, keyed apart from
	// the session's network and every egress network, and removed with
	// the session (firewall.remove matches "s1/").
	sc := network.Summary{ID: "0123456789abcdef", Name: sidecarNetworkName("s1"), Driver: "bridge", Internal: true,
		Labels:  map[string]string{sandbox.LabelSession: "s1"},
		Options: map[string]string{bridgeNameOption: bridgeName(sidecarNetworkKey("s1"))}}
	r, ok, err = rulesOf(sc)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, netRules{sessionID: "s1/_mcp", iface: bridgeName("s1/_mcp"), internal: true}, r)
	assert.NotEqual(t, sidecarEgressKey("s1", "mcp"), r.sessionID)
	sc.Options = nil
	r, _, _ = rulesOf(sc)
	assert.Equal(t, "br-0123456789ab", r.iface, "a sidecar network made before it had rules gets them at the next start")
}

// fakeTables is an in-memory iptables for one family: chains of rule
// strings.
type fakeTables struct {
	chains map[string][]string
	calls  []string
}

func (f *fakeTables) run(_ context.Context, cmd string, args ...string) (string, error) {
	f.calls = append(f.calls, cmd+" "+strings.Join(args, " "))
	if cmd != "iptables" {
		return "", errors.New("only iptables here")
	}
	op, chain, rest := args[0], "", []string{}
	if len(args) > 1 {
		chain, rest = args[1], args[2:]
	}
	rule := strings.Join(rest, " ")
	rules, exists := f.chains[chain]
	switch op {
	case "-S":
		if !exists {
			return "", errors.New("no chain")
		}
		out := "-N " + chain + "\n"
		for _, r := range rules {
			out += "-A " + chain + " " + r + "\n"
		}
		return out, nil
	case "-N":
		f.chains[chain] = nil
	case "-A":
		f.chains[chain] = append(rules, rule)
	case "-I":
		f.chains[chain] = append([]string{strings.Join(rest[1:], " ")}, rules...)
	case "-C":
		if !slices.Contains(rules, rule) {
			return "", errors.New("no such rule")
		}
	case "-D":
		i := slices.Index(rules, rule)
		if n, err := strconv.Atoi(rule); err == nil {
			i = n - 1
		}
		if i < 0 {
			return "", errors.New("no such rule")
		}
		f.chains[chain] = slices.Delete(rules, i, i+1)
	}
	return "", nil
}

func TestFirewallLifecycle(t *testing.T) {
	ctx := context.Background()
	ft := &fakeTables{chains: map[string][]string{"INPUT": {"-j ACCEPT"}, "DOCKER-USER": {"-j RETURN"}, "FORWARD": {"-j DOCKER-USER"}, "PREROUTING": {"-m addrtype --dst-type LOCAL -j DOCKER"}}}
	fw := &firewall{scope: "sc", cmds: []string{"iptables"}, run: ft.run}
	require.NoError(t, fw.setup(ctx))
	require.NoError(t, fw.setup(ctx), "idempotent")
	ft.chains["INPUT"] = append(ft.chains["INPUT"], "-j SANDBOXD-INPUT") // another process raced us
	require.NoError(t, fw.setup(ctx))
	jumps := func(chain string) []string {
		var out []string
		for _, r := range ft.chains[chain] {
			_, j, _ := strings.Cut(r, "-j ")
			out = append(out, j)
		}
		return out
	}
	assert.Equal(t, []string{"SANDBOXD-INPUT", "ACCEPT"}, jumps("INPUT"), "the jump comes first, once")
	assert.Equal(t, []string{"SANDBOXD-FORWARD", "RETURN"}, jumps("DOCKER-USER"))
	assert.Equal(t, []string{"SANDBOXD-FORWARD", "DOCKER-USER"}, jumps("FORWARD"), "FORWARD jumps to sandboxd's chain itself")
	assert.Equal(t, []string{"SANDBOXD-PREROUTING", "DOCKER"}, jumps("PREROUTING"), "nat PREROUTING jumps to sandboxd's nat chain first")

	// The engine re-files its jump to DOCKER-USER and inserts a new
	// network's rules above sandboxd's; once a session's network is made,
	// sandboxd's jump goes back on top, one copy, by the copy's own spec
	// (never by number: the engine may insert meanwhile).
	ft.chains["FORWARD"] = append([]string{"-j DOCKER-USER", "-i br-new ! -o br-new -j ACCEPT"}, ft.chains["FORWARD"][:1]...)
	require.NoError(t, fw.keepOnTop(ctx))
	assert.Equal(t, []string{"SANDBOXD-FORWARD", "DOCKER-USER", "ACCEPT"}, jumps("FORWARD"))
	n := len(ft.calls)
	require.NoError(t, fw.keepOnTop(ctx))
	assert.Len(t, ft.calls[n:], 1, "on top already: one read, no change")
	for _, c := range ft.calls {
		assert.NotRegexp(t, `-D (INPUT|FORWARD|DOCKER-USER) \d+$`, c, "no delete by number")
	}

	a := netRules{sessionID: "a", iface: "sbx-a"}
	b := netRules{sessionID: "b", iface: "sbx-b", egress: []netip.Prefix{netip.MustParsePrefix("192.0.2.7/32")}}
	require.NoError(t, fw.install(ctx, a))
	require.NoError(t, fw.install(ctx, b))
	other := "-i sbx-z -m comment --comment sandboxd:otherscope:z -j REJECT"
	ft.chains[ChainInput] = append(ft.chains[ChainInput], other)
	assert.Len(t, ft.chains[ChainInput], 5)
	assert.Len(t, ft.chains[ChainForward], 7)

	require.NoError(t, fw.remove(ctx, "a"))
	assert.Len(t, ft.chains[ChainInput], 3)
	assert.Len(t, ft.chains[ChainForward], 4)
	for _, r := range append(ft.chains[ChainInput], ft.chains[ChainForward]...) {
		assert.NotContains(t, r, "sandboxd:sc:a ")
	}

	// A restart: b's network is still there but one of its rules was
	// flushed, a's rules are back without a network; another scope's rules
	// are never touched.
	require.NoError(t, fw.install(ctx, a))
	ft.chains[ChainForward] = ft.chains[ChainForward][1:]
	require.NoError(t, fw.sync(ctx, []netRules{b}, nil))
	var want []string
	for _, r := range b.rules("sc", false) {
		want = append(want, strings.Join(r[1:], " "))
	}
	assert.ElementsMatch(t, want[:2], slices.DeleteFunc(slices.Clone(ft.chains[ChainInput]), func(s string) bool { return s == other }))
	assert.Equal(t, want[2:], ft.chains[ChainForward])
	assert.Contains(t, ft.chains[ChainInput], other)

	n = len(ft.calls)
	require.NoError(t, fw.sync(ctx, []netRules{b}, nil))
	for _, c := range ft.calls[n:] {
		assert.NotRegexp(t, ` -[AD] `, c, "nothing changes when the rules are in place")
	}

	// A proxied session's nat rules are listed, synced and removed with
	// the rest.
	px := netRules{sessionID: "px", iface: "sbx-px", egress: []netip.Prefix{}, proxy: netip.MustParseAddrPort("172.20.0.1:13128")}
	require.NoError(t, fw.install(ctx, px))
	assert.Len(t, ft.chains[ChainNAT], 2)
	ft.chains[ChainNAT] = ft.chains[ChainNAT][1:] // a flush lost one
	require.NoError(t, fw.sync(ctx, []netRules{b, px}, nil))
	assert.Len(t, ft.chains[ChainNAT], 2, "put back at a restart")
	require.NoError(t, fw.remove(ctx, "px"))
	assert.Empty(t, ft.chains[ChainNAT])

	// A session's sidecar egress rules go with the session, and alone by
	// their key; another session whose id the first's prefixes keeps its.
	side := netRules{sessionID: sidecarEgressKey("b", "fetch"), iface: bridgeName(sidecarEgressKey("b", "fetch"))}
	bb := netRules{sessionID: "bb", iface: "sbx-bb"}
	require.NoError(t, fw.install(ctx, side))
	require.NoError(t, fw.install(ctx, bb))
	require.NoError(t, fw.sync(ctx, []netRules{b, side, bb}, nil), "a sidecar's egress network keeps its rules at a restart")
	assert.Contains(t, strings.Join(ft.chains[ChainInput], "\n"), "sandboxd:sc:b/fetch ")
	require.NoError(t, fw.removeKey(ctx, sidecarEgressKey("b", "fetch")))
	assert.NotContains(t, strings.Join(ft.chains[ChainInput], "\n"), "sandboxd:sc:b/fetch ")
	assert.Contains(t, strings.Join(ft.chains[ChainInput], "\n"), "sandboxd:sc:b ")
	require.NoError(t, fw.install(ctx, side))
	require.NoError(t, fw.remove(ctx, "b"))
	all := strings.Join(append(slices.Clone(ft.chains[ChainInput]), ft.chains[ChainForward]...), "\n")
	assert.NotContains(t, all, "sandboxd:sc:b ")
	assert.NotContains(t, all, "sandboxd:sc:b/fetch ")

	// A network made, and its rules installed, after the sync listed the
	// networks (another runtime of the scope starting meanwhile) keeps its
	// rules: the sync asks again before deleting; and deletes nothing when
	// it cannot ask.
	late := netRules{sessionID: "late", iface: "sbx-late", egress: []netip.Prefix{netip.MustParsePrefix("192.0.2.9/32")}}
	require.NoError(t, fw.install(ctx, late))
	require.NoError(t, fw.sync(ctx, nil, func(context.Context) (map[string]bool, error) { return map[string]bool{"late": true}, nil }))
	assert.Contains(t, strings.Join(ft.chains[ChainForward], "\n"), "sandboxd:sc:late ", "the late network's rules are kept")
	require.Error(t, fw.sync(ctx, nil, func(context.Context) (map[string]bool, error) { return nil, errors.New("engine gone") }))
	assert.Contains(t, strings.Join(ft.chains[ChainForward], "\n"), "sandboxd:sc:late ", "nothing deleted when the recheck failed")
	require.NoError(t, fw.sync(ctx, nil, func(context.Context) (map[string]bool, error) { return map[string]bool{}, nil }))
	assert.NotContains(t, strings.Join(ft.chains[ChainForward], "\n"), "sandboxd:sc:late ", "without a network its rules go")
	assert.Contains(t, all, "sandboxd:sc:bb ")
}

// Without the host firewall, private networks fail closed: refused with
// what to do, unless the operator accepted the risk; allow_hosts always.
func TestNoFirewallRefuses(t *testing.T) {
	r := testRuntime(false)
	r.fwErr = errors.New("sandboxd does not run as root, so it cannot install firewall rules")
	for _, o := range []sandbox.SessionOptions{{Network: sandbox.NetworkBridge}, {Network: sandbox.NetworkInternal}} {
		_, _, err := r.createNetwork(context.Background(), "s", o, nil)
		require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
		assert.Contains(t, err.Error(), `"`+o.Network+`" sessions are refused on this server`)
		assert.Contains(t, err.Error(), "does not run as root")
		assert.Contains(t, err.Error(), "--insecure-bridge-host-access")
	}
	r.opts.InsecureBridge = true
	_, _, err := r.createNetwork(context.Background(), "s", sandbox.SessionOptions{Network: sandbox.NetworkBridge, AllowHosts: []string{"pypi.org"}}, nil)
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	assert.Contains(t, err.Error(), "allow_hosts: this server cannot enforce an egress allowlist")
	name, _, err := r.createNetwork(context.Background(), "s", sandbox.SessionOptions{Network: sandbox.NetworkNone}, nil)
	require.NoError(t, err)
	assert.Equal(t, "none", name, "network none needs no firewall")
	ok, why := r.HostFirewall()
	assert.False(t, ok)
	assert.Contains(t, why, "root")

	// An HTTP sidecar's network is guarded as an internal session's.
	r.opts.InsecureBridge = false
	err = r.ensureSidecarNetwork(context.Background(), "s", nil)
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	assert.Contains(t, err.Error(), "mcp_servers: HTTP and SSE sidecars are refused on this server")
	assert.Contains(t, err.Error(), "--insecure-bridge-host-access")
}

func TestPlanEgress(t *testing.T) {
	p, err := planEgress([]string{"Pkgs.test", "192.0.2.8", "10.0.0.0/8", "*.cdn.test", "192.0.2.8/32"})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.0/8,192.0.2.8/32", formatEgress(p.prefixes), "sorted, duplicates once, names never resolved")
	assert.Equal(t, []string{"pkgs.test", "*.cdn.test"}, p.names)
	assert.Equal(t, []string{"pkgs.test"}, p.policy.Names)
	assert.Equal(t, []string{".cdn.test"}, p.policy.Suffixes)
	assert.True(t, p.policy.Allows("a.cdn.test"))
	assert.False(t, p.policy.Allows("cdn.test"))
	assert.True(t, p.policy.Allows("10.1.2.3"))

	p, err = planEgress([]string{"192.0.2.8"})
	require.NoError(t, err)
	assert.False(t, p.policy.HasNames(), "IP entries alone need no proxy")
	_, err = planEgress([]string{"not a host"})
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
}

func TestWithProxy(t *testing.T) {
	proxy := netip.MustParseAddrPort("172.20.0.1:13128")
	env := withProxy([]string{"A=1", "HTTP_PROXY=http://elsewhere:1", "no_proxy=*"}, proxy)
	assert.Equal(t, []string{"A=1",
		"HTTP_PROXY=http://172.20.0.1:13128", "HTTPS_PROXY=http://172.20.0.1:13128",
		"http_proxy=http://172.20.0.1:13128", "https_proxy=http://172.20.0.1:13128",
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1"}, env,
		"the proxy's variables win over the session's own")
	assert.Equal(t, []string{"A=1"}, withProxy([]string{"A=1"}, netip.AddrPort{}))
}

func TestRefuseAddr(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "::1", "169.254.169.254", "0.0.0.0", "224.0.0.1", "fe80::1"} {
		assert.True(t, refuseAddr(netip.MustParseAddr(a)), a)
	}
	addrs, err := net.InterfaceAddrs()
	require.NoError(t, err)
	for _, ad := range addrs {
		if ipn, ok := ad.(*net.IPNet); ok {
			a, _ := netip.AddrFromSlice(ipn.IP)
			assert.True(t, refuseAddr(a.Unmap()), "the host's own %s", a)
		}
	}
	assert.False(t, refuseAddr(netip.MustParseAddr("192.0.2.1")), "TEST-NET-1 is on no interface here")
}
