package docker

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

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
	ft := &fakeTables{chains: map[string][]string{"INPUT": {"-j ACCEPT"}, "DOCKER-USER": {"-j RETURN"}, "FORWARD": {"-j DOCKER-USER"}}}
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

func TestResolveEgress(t *testing.T) {
	r := testRuntime(false)
	r.opts.CallTimeout = time.Second
	r.opts.LookupHost = func(_ context.Context, host string) ([]netip.Addr, error) {
		switch host {
		case "pkgs.test":
			return []netip.Addr{netip.MustParseAddr("192.0.2.9"), netip.MustParseAddr("2001:db8::9"), netip.MustParseAddr("192.0.2.8")}, nil
		case "v6only.test":
			return []netip.Addr{netip.MustParseAddr("2001:db8::1")}, nil
		}
		return nil, errors.New("no such host")
	}
	p, pins, err := r.resolveEgress(context.Background(), []string{"pkgs.test", "192.0.2.8", "10.0.0.0/8"})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.0/8,192.0.2.8/32,192.0.2.9/32", formatEgress(p), "sorted, duplicates once, IPv4 of names")
	assert.Equal(t, []string{"pkgs.test:192.0.2.9", "pkgs.test:192.0.2.8"}, pins)
	_, _, err = r.resolveEgress(context.Background(), []string{"gone.test", "v6only.test"})
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	assert.Contains(t, err.Error(), `"gone.test" does not resolve on the host: no such host`)
	assert.Contains(t, err.Error(), `"v6only.test" has no IPv4 address`)
}
