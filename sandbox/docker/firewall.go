package docker

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/docker/docker/api/types/network"

	"github.com/sandboxd/sandboxd/sandbox"
)

// The host firewall for sessions on a private network (bridge and
// internal): see docs/decisions/0023-network-egress.md.
//
// A packet from a sandbox's bridge to any address of the host (its own
// gateway, another session's gateway, the host's LAN address) is INPUT on
// the host, which Docker leaves open; a packet to anywhere else is FORWARD,
// where Docker already isolates its bridges from each other. So sandboxd
// keeps two chains of its own in the filter table of iptables and
// ip6tables:
//
//   - ChainInput, jumped to first from INPUT: per session, replies to
//     connections the host opened pass, everything else from the session's
//     bridge is rejected;
//   - ChainForward, jumped to first from DOCKER-USER (FORWARD where Docker
//     made none): per bridge session, the link-local range (cloud metadata
//     at 169.254.169.254) is rejected, and with allow_hosts only the
//     allowed prefixes pass and the rest is rejected.
//
// The internal network of a session's HTTP sidecars gets the INPUT rules
// of an internal session (key sidecarNetworkKey), and a sidecar's egress
// network those of a bridge session (key sidecarEgressKey).
//
// Every rule carries the comment ruleTag(scope, session), so a session's
// rules are found and deleted with it, and a starting runtime re-installs
// the rules of its live networks and deletes those of networks that are
// gone (syncFirewall).
const (
	ChainInput   = "SANDBOXD-INPUT"
	ChainForward = "SANDBOXD-FORWARD"
	// ChainNAT, in the nat table of iptables and jumped to first from
	// PREROUTING, sends a proxied session's ports 80 and 443 and its DNS
	// to its egress proxy (firewall_egress.go).
	ChainNAT = "SANDBOXD-PREROUTING"
	// LabelEgress on a session's network lists the prefixes its allow_hosts
	// resolved to when it started (comma-separated; absent: unrestricted),
	// so that the rules can be rebuilt after a restart exactly as they were.
	LabelEgress = "sandboxd.egress"
	// bridgeNameOption names the Linux bridge of a Docker bridge network.
	bridgeNameOption = "com.docker.network.bridge.name"
	// tagPrefix starts the comment of every rule sandboxd installs.
	tagPrefix = "sandboxd:"
	// linkLocal4 is never reachable from a bridge session without
	// allow_hosts: cloud metadata services live there.
	linkLocal4 = "169.254.0.0/16"
)

// bridgeName is the Linux bridge of a session's private network: "sbx-"
// and 11 hex digits of a hash of the session id (an interface name has at
// most 15 bytes), so the firewall rules can name it before it exists.
func bridgeName(sessionID string) string {
	sum := sha256.Sum256([]byte(sessionID))
	return bridgePrefix + hex.EncodeToString(sum[:])[:11]
}

// bridgePrefix starts the name of every Linux bridge of sandboxd's.
const bridgePrefix = "sbx-"

// ruleTag is the comment on every rule of a session of a runtime scope.
func ruleTag(scope, sessionID string) string { return tagPrefix + scope + ":" + sessionID }

// parseTag splits a rule's comment; ok is false if it is not sandboxd's.
func parseTag(tag string) (scope, sessionID string, ok bool) {
	rest, ok := strings.CutPrefix(strings.Trim(tag, `"`), tagPrefix)
	if !ok {
		return "", "", false
	}
	scope, sessionID, ok = strings.Cut(rest, ":")
	return scope, sessionID, ok && sessionID != ""
}

// netRules are the firewall rules of one session's network.
type netRules struct {
	sessionID string
	iface     string
	// egress: nil for unrestricted egress (bridge), else the only
	// prefixes a bridge session may reach.
	egress []netip.Prefix
	// internal: an internal network; Docker gives it no egress, so only
	// the host is closed.
	internal bool
	// proxy: the session's egress proxy (its gateway and egress.Port)
	// when allow_hosts names hosts, else invalid. Its port is open on
	// the gateway, and the session's TCP 80 and 443 and UDP 53 are
	// redirected to it, but to the prefixes of egress (IPv4: the
	// session's network has no IPv6).
	proxy netip.AddrPort
}

// rules returns the rule specs (arguments after "-A") of r for one address
// family, in order.
func (r netRules) rules(scope string, v6 bool) [][]string {
	tag := []string{"-m", "comment", "--comment", ruleTag(scope, r.sessionID)}
	rule := func(chain string, args ...string) []string {
		return append(append([]string{chain, "-i", r.iface}, args...), tag...)
	}
	reject := func(chain string, args ...string) []string {
		return append(rule(chain, args...), "-j", "REJECT")
	}
	out := [][]string{
		append(rule(ChainInput, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED"), "-j", "RETURN"),
	}
	out = append(out, r.proxyInput(rule, v6)...)
	out = append(out,
		reject(ChainInput),
		// Within its own bridge (a session and its sidecars) as Docker
		// decides; never into another of sandboxd's bridges, nor, from an
		// internal one, anywhere: Docker's isolation chains say the same,
		// but are skipped while the engine re-files its jumps (setup).
		append(rule(ChainForward, "-o", r.iface), "-j", "RETURN"),
	)
	if r.internal {
		return append(out, reject(ChainForward))
	}
	out = append(out, reject(ChainForward, "-o", bridgePrefix+"+"))
	switch {
	case r.egress != nil:
		for _, p := range r.egress {
			if p.Addr().Is6() == v6 {
				out = append(out, append(rule(ChainForward, "-d", p.String()), "-j", "RETURN"))
			}
		}
		out = append(out, reject(ChainForward))
	case !v6:
		out = append(out, reject(ChainForward, "-d", linkLocal4))
	}
	return append(out, r.proxyNAT(rule, v6)...)
}

// firewall runs iptables and ip6tables. Nil when the host firewall is not
// available (see Runtime.HostFirewall).
type firewall struct {
	scope string
	cmds  []string // "iptables", and "ip6tables" unless the host has no IPv6
	mu    sync.Mutex
	run   func(ctx context.Context, cmd string, args ...string) (string, error)
}

// runIPTables runs one iptables command, waiting for the xtables lock.
func runIPTables(ctx context.Context, cmd string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	c := exec.CommandContext(ctx, cmd, append([]string{"-w", "-t", tableOf(args)}, args...)...)
	c.Stdout, c.Stderr = &out, &errb
	if err := c.Run(); err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg == "" {
			msg = err.Error()
		}
		return out.String(), fmt.Errorf("%s %s: %s", cmd, strings.Join(args, " "), msg)
	}
	return out.String(), nil
}

// tableOf is the table of an iptables command: nat for sandboxd's nat
// chain and the PREROUTING that jumps to it, else filter.
func tableOf(args []string) string {
	if len(args) > 1 && (args[1] == ChainNAT || args[1] == "PREROUTING") {
		return "nat"
	}
	return "filter"
}

// chainsOf are sandboxd's chains in cmd's tables: the nat chain in
// iptables only (a session's network has no IPv6 to redirect).
func chainsOf(cmd string) []string {
	if cmd == "iptables" {
		return []string{ChainInput, ChainForward, ChainNAT}
	}
	return []string{ChainInput, ChainForward}
}

// newFirewall checks that sandboxd can manage the host firewall of the
// engine's bridges and sets up its chains; the error says why it cannot.
func newFirewall(ctx context.Context, scope string, localEngine bool) (*firewall, error) {
	if !localEngine {
		return nil, errors.New("the engine is not on this host (DOCKER_HOST is not a unix socket), so this host's firewall does not guard its bridges")
	}
	if os.Geteuid() != 0 {
		return nil, errors.New("sandboxd does not run as root, so it cannot install firewall rules")
	}
	cmds := []string{"iptables"}
	if _, err := os.Stat("/proc/net/if_inet6"); err == nil {
		cmds = append(cmds, "ip6tables")
	}
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			return nil, fmt.Errorf("%s is not installed: %w", c, err)
		}
	}
	f := &firewall{scope: scope, cmds: cmds, run: runIPTables}
	if err := f.setup(ctx); err != nil {
		return nil, err
	}
	return f, nil
}

// setupMu serializes setup within the process (parallel runtimes, tests).
var setupMu sync.Mutex

// setup makes sandboxd's chains and the jumps to them (first in INPUT, first
// in DOCKER-USER, and first in FORWARD), if they are not there yet. Another
// process doing the same at once may win a race: a chain made meanwhile is
// fine, and a jump inserted twice is deleted again.
//
// The jump from FORWARD is not redundant with DOCKER-USER's: the engine
// re-files its own jump from FORWARD to DOCKER-USER whenever any network is
// made (libnetwork's EnsureJumpRule deletes it, then inserts it again), and
// a packet forwarded in between skips DOCKER-USER and everything in it
// (issue 23: a session with allow_hosts reached a denied address while
// other networks were being made). sandboxd's jump in FORWARD is never
// touched by the engine; jumpFirst puts it back on top once a session's
// network exists, above the ACCEPT rules the engine gave that network.
func (f *firewall) setup(ctx context.Context) error {
	setupMu.Lock()
	defer setupMu.Unlock()
	for _, c := range f.cmds {
		for _, chain := range chainsOf(c) {
			if _, err := f.run(ctx, c, "-S", chain); err != nil {
				if _, nerr := f.run(ctx, c, "-N", chain); nerr != nil {
					if _, err := f.run(ctx, c, "-S", chain); err != nil {
						return nerr
					}
				}
			}
		}
		jumps := [][2]string{{"INPUT", ChainInput}, {"DOCKER-USER", ChainForward}}
		if c == "iptables" {
			jumps = append(jumps, [2]string{"PREROUTING", ChainNAT})
		}
		for _, j := range jumps {
			if j[0] == "DOCKER-USER" {
				if _, err := f.run(ctx, c, "-S", j[0]); err != nil {
					continue // an engine without DOCKER-USER: FORWARD's jump below
				}
			}
			if err := f.jumpFirst(ctx, c, j[0], j[1], false); err != nil {
				return err
			}
		}
		if err := f.jumpFirst(ctx, c, "FORWARD", ChainForward, true); err != nil {
			return err
		}
	}
	return nil
}

// jumpTag marks sandboxd's jump from FORWARD, unique per insert, so that a
// stale copy is deleted by its exact spec: deleting by number would race
// the engine inserting rules above it, and by a shared spec would take
// the first copy, the new one.
var jumpSeq atomic.Int64

func jumpTag() string {
	return fmt.Sprintf("sandboxd-jump-%d-%d", os.Getpid(), jumpSeq.Add(1))
}

// jumpFirst makes a jump to chain `to` the first rule of `from` and the
// only jump to `to` there. Without top, a jump already somewhere in from
// is left where it is (INPUT and DOCKER-USER, where only sandboxd and the
// operator insert). A jump is inserted with a tag of its own (jumpTag), so
// the copies below the first are deleted by their exact spec; a copy that
// another process deleted first is gone already (that error is ignored).
func (f *firewall) jumpFirst(ctx context.Context, c, from, to string, top bool) error {
	isJump := func(r Rule) bool {
		n := len(r.Args)
		return n >= 3 && r.Args[n-2] == "-j" && r.Args[n-1] == to
	}
	read := func() ([]Rule, []Rule, error) {
		text, err := f.run(ctx, c, "-S", from)
		if err != nil {
			return nil, nil, err
		}
		rules := ParseRules(text)
		return rules, slices.DeleteFunc(slices.Clone(rules), func(r Rule) bool { return !isJump(r) }), nil
	}
	rules, jumps, err := read()
	if err != nil {
		return err
	}
	twin := slices.ContainsFunc(jumps[min(1, len(jumps)):], func(r Rule) bool { return slices.Equal(r.Args, jumps[0].Args) })
	if len(jumps) == 0 || (top && !isJump(rules[0])) || twin {
		if _, err := f.run(ctx, c, "-I", from, "1", "-m", "comment", "--comment", jumpTag(), "-j", to); err != nil {
			return err
		}
		if _, jumps, err = read(); err != nil {
			return err
		}
	}
	for _, r := range jumps[min(1, len(jumps)):] {
		if !slices.Equal(r.Args, jumps[0].Args) { // a delete by the first's spec would take the first
			_, _ = f.run(ctx, c, append([]string{"-D"}, r.Args...)...)
		}
	}
	return nil
}

// keepOnTop puts sandboxd's jump from FORWARD back on top, above the rules
// the engine inserted there since (a new network's ACCEPT rules go above
// it). Called once a session's network exists, before anything of the
// session runs.
func (f *firewall) keepOnTop(ctx context.Context) error {
	setupMu.Lock()
	defer setupMu.Unlock()
	for _, c := range f.cmds {
		if err := f.jumpFirst(ctx, c, "FORWARD", ChainForward, true); err != nil {
			return fmt.Errorf("keeping sandboxd's jump first in %s FORWARD: %w", c, err)
		}
	}
	return nil
}

// install appends the rules of a session's network.
func (f *firewall) install(ctx context.Context, r netRules) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.installLocked(ctx, r)
}

func (f *firewall) installLocked(ctx context.Context, r netRules) error {
	for _, c := range f.cmds {
		for _, rule := range r.rules(f.scope, c == "ip6tables") {
			if _, err := f.run(ctx, c, append([]string{"-A"}, rule...)...); err != nil {
				return fmt.Errorf("installing the firewall rules of session %s: %w", r.sessionID, err)
			}
		}
	}
	return nil
}

// listed is one sandboxd rule as iptables -S prints it.
type listed struct {
	cmd       string
	args      []string // after "-A"
	sessionID string
}

// list returns the rules of this firewall's scope in its chains.
func (f *firewall) list(ctx context.Context) ([]listed, error) {
	var out []listed
	for _, c := range f.cmds {
		for _, chain := range chainsOf(c) {
			text, err := f.run(ctx, c, "-S", chain)
			if err != nil {
				return nil, err
			}
			for _, rule := range ParseRules(text) {
				if scope, id, ok := parseTag(rule.Tag); ok && scope == f.scope {
					out = append(out, listed{cmd: c, args: rule.Args, sessionID: id})
				}
			}
		}
	}
	return out, nil
}

// remove deletes every rule of a session, its sidecars' egress networks'
// (sidecarEgressKey) included.
func (f *firewall) remove(ctx context.Context, sessionID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.removeLocked(ctx, func(id string) bool { return id == sessionID || strings.HasPrefix(id, sessionID+"/") })
}

// removeKey deletes the rules of one network, by its exact key.
func (f *firewall) removeKey(ctx context.Context, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.removeLocked(ctx, func(id string) bool { return id == key })
}

func (f *firewall) removeLocked(ctx context.Context, match func(sessionID string) bool) error {
	rules, err := f.list(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range rules {
		if match(r.sessionID) {
			if _, err := f.run(ctx, r.cmd, append([]string{"-D"}, r.args...)...); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// sync makes the firewall match the networks: the rules of each are
// re-installed unless all of them are in place (a firewall reload or a
// host reboot drops them), and rules of sessions without a network are
// deleted (the daemon stopped between the two). Before deleting, it asks
// recheck (when set) which keys have a network now: nets was listed before
// the rules were, and a runtime of the same scope starting beside this one
// (a daemon restarted while the old one still runs; parallel test servers)
// may have made a network and installed its rules in between; deleting
// those left a sidecar with allow_hosts unguarded in CI. A rule is
// installed after its network is made, so a network listed after the rules
// covers every rule listed. If recheck fails, nothing is deleted.
func (f *firewall) sync(ctx context.Context, nets []netRules, recheck func(context.Context) (map[string]bool, error)) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	have, err := f.list(ctx)
	if err != nil {
		return err
	}
	count := map[string]int{}
	for _, r := range have {
		count[r.sessionID]++
	}
	live := map[string]bool{}
	var errs []error
	for _, n := range nets {
		live[n.sessionID] = true
		want := 0
		ok := true
		for _, c := range f.cmds {
			for _, rule := range n.rules(f.scope, c == "ip6tables") {
				want++
				if ok {
					if _, err := f.run(ctx, c, append([]string{"-C"}, rule...)...); err != nil {
						ok = false
					}
				}
			}
		}
		if ok && count[n.sessionID] == want {
			continue
		}
		if err := f.removeLocked(ctx, func(id string) bool { return id == n.sessionID }); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := f.installLocked(ctx, n); err != nil {
			errs = append(errs, err)
		}
	}
	if recheck != nil {
		now, err := recheck(ctx)
		if err != nil {
			return errors.Join(append(errs, err)...)
		}
		for id := range now {
			live[id] = true
		}
	}
	// Only keys whose rules were listed above: rules installed since then
	// belong to a network made since (the recheck may have missed it).
	if err := f.removeLocked(ctx, func(id string) bool { return count[id] > 0 && !live[id] }); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Rule is one rule of `iptables -S CHAIN`: its arguments after -A (the
// chain first) and its comment.
type Rule struct {
	Args []string
	Tag  string
}

// ParseRules parses the output of `iptables -S CHAIN`, keeping the rules
// (not the -N or -P lines). The comments sandboxd writes have no spaces,
// so splitting on white space is exact for them.
func ParseRules(text string) []Rule {
	var out []Rule
	for line := range strings.SplitSeq(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || f[0] != "-A" {
			continue
		}
		for i := range f { // iptables quotes comments even without spaces
			if len(f[i]) >= 2 && f[i][0] == '"' && f[i][len(f[i])-1] == '"' {
				f[i] = f[i][1 : len(f[i])-1]
			}
		}
		r := Rule{Args: f[1:]}
		if i := slices.Index(f, "--comment"); i >= 0 && i+1 < len(f) {
			r.Tag = f[i+1]
		}
		out = append(out, r)
	}
	return out
}

// FirewallRule is one of sandboxd's rules on this host, of any scope.
type FirewallRule struct {
	Cmd   string   // iptables or ip6tables
	Args  []string // after -A: the chain first
	Scope string   // the LabelScope of the runtime that installed it
	// SessionID is the session the rule belongs to; Key is its whole key
	// (the session's id, or "<id>/<server>" and "<id>/_mcp" for its
	// sidecars' networks).
	SessionID, Key string
}

// FirewallRules lists sandboxd's firewall rules on this host, of every
// scope, for leftover checks; none when the chains do not exist or
// iptables cannot be run.
func FirewallRules(ctx context.Context) []FirewallRule {
	var out []FirewallRule
	for _, c := range []string{"iptables", "ip6tables"} {
		for _, chain := range chainsOf(c) {
			text, err := runIPTables(ctx, c, "-S", chain)
			if err != nil {
				continue
			}
			for _, r := range ParseRules(text) {
				if scope, key, ok := parseTag(r.Tag); ok {
					id, _, _ := strings.Cut(key, "/")
					out = append(out, FirewallRule{Cmd: c, Args: r.Args, Scope: scope, SessionID: id, Key: key})
				}
			}
		}
	}
	return out
}

// Delete removes the rule.
func (r FirewallRule) Delete(ctx context.Context) error {
	_, err := runIPTables(ctx, r.Cmd, append([]string{"-D"}, r.Args...)...)
	return err
}

func (r FirewallRule) String() string { return r.Cmd + " " + strings.Join(r.Args, " ") }

// formatEgress and parseEgress are the LabelEgress value.
func formatEgress(p []netip.Prefix) string {
	s := make([]string, len(p))
	for i, x := range p {
		s[i] = x.String()
	}
	return strings.Join(s, ",")
}

func parseEgress(s string) ([]netip.Prefix, error) {
	out := []netip.Prefix{}
	for x := range strings.SplitSeq(s, ",") {
		if x == "" {
			continue
		}
		p, err := netip.ParsePrefix(x)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// rulesOf rebuilds the rules of one of sandboxd's session networks, of a
// session's sidecar network or of a sidecar's egress network from what the
// engine reports of it; ok is false for a network that is none of them.
func rulesOf(n network.Summary) (netRules, bool, error) {
	id := n.Labels[sandbox.LabelSession]
	key := id
	switch srv := n.Labels[sandbox.LabelSidecar]; {
	case srv != "":
		if n.Name != sidecarEgressName(id, srv) {
			return netRules{}, false, nil
		}
		key = sidecarEgressKey(id, srv)
	case n.Name == sidecarNetworkName(id):
		key = sidecarNetworkKey(id)
	case n.Name != networkName(id):
		return netRules{}, false, nil
	}
	if id == "" || n.Driver != "bridge" {
		return netRules{}, false, nil
	}
	iface := n.Options[bridgeNameOption]
	if iface == "" { // made before sandboxd named its bridges
		iface = "br-" + n.ID[:12]
	}
	r := netRules{sessionID: key, iface: iface, internal: n.Internal}
	if v, ok := n.Labels[LabelEgress]; ok {
		p, err := parseEgress(v)
		if err != nil {
			return netRules{}, false, fmt.Errorf("network %s: label %s: %w", n.Name, LabelEgress, err)
		}
		r.egress = p
	}
	if n.Labels[LabelEgressNames] != "" {
		gw, ok := gatewayOf(n.IPAM.Config)
		if !ok {
			return netRules{}, false, fmt.Errorf("network %s: names in %s, but no IPv4 gateway for their proxy", n.Name, LabelEgressNames)
		}
		r.proxy = netip.AddrPortFrom(gw, 0) // the port is the runtime's (networkRules)
	}
	return r, true, nil
}

// syncFirewall brings the firewall in line with this runtime's networks
// (see firewall.sync).
func (r *Runtime) syncFirewall(ctx context.Context) error {
	want, nets, err := r.networkRules(ctx)
	if err != nil {
		return err
	}
	// The proxies first: a redirect to a port nobody listens on would
	// refuse what the proxy allows.
	r.restartProxies(ctx, nets)
	return r.fw.sync(ctx, want, func(ctx context.Context) (map[string]bool, error) {
		now, _, err := r.networkRules(ctx)
		if err != nil {
			return nil, err
		}
		keys := make(map[string]bool, len(now))
		for _, n := range now {
			keys[n.sessionID] = true
		}
		return keys, nil
	})
}

// networkRules lists the scope's networks and the rules each should have.
func (r *Runtime) networkRules(ctx context.Context) ([]netRules, []network.Summary, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	nets, err := r.cli.NetworkList(cctx, network.ListOptions{Filters: r.filter("")})
	if err != nil {
		return nil, nil, fmt.Errorf("listing networks: %w", err)
	}
	var want []netRules
	for _, n := range nets {
		nr, ok, err := rulesOf(n)
		if err != nil {
			return nil, nil, err
		}
		if ok {
			if nr.proxy.IsValid() && r.egress != nil {
				nr.proxy = netip.AddrPortFrom(nr.proxy.Addr(), uint16(r.egress.Port()))
			}
			want = append(want, nr)
		}
	}
	return want, nets, nil
}

// HostFirewall says whether sandboxd guards the host from sessions on
// private networks; if not, why, and whether such sessions start anyway
// (Options.InsecureBridge).
func (r *Runtime) HostFirewall() (ok bool, why string) {
	if r.fw != nil {
		return true, ""
	}
	return false, r.fwErr.Error()
}

// errNoFirewall is the refusal of a session the host firewall would guard.
func (r *Runtime) errNoFirewall(o sandbox.SessionOptions) error {
	if len(o.AllowHosts) > 0 {
		return &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
			"allow_hosts: this server cannot enforce an egress allowlist: %v", r.fwErr)}}
	}
	return r.errUnguarded(fmt.Sprintf("network: %q sessions", o.Network))
}

// errUnguarded is the refusal of what, something on a network the host
// firewall would guard ("network: \"bridge\" sessions").
func (r *Runtime) errUnguarded(what string) error {
	return &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
		"%s are refused on this server: it cannot keep them from the host's services (%v); "+
			"the operator can accept that with --insecure-bridge-host-access", what, r.fwErr)}}
}
