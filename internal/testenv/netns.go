package testenv

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"

	"golang.org/x/sys/unix"
)

// FreeSubnet returns the first of candidates that overlaps no address and
// no route of this machine (whose own network may be any private or
// documentation range), or an error naming what the machine uses. Suites
// that run at once pass different candidates.
func FreeSubnet(candidates ...string) (netip.Prefix, error) {
	var used []netip.Prefix
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return netip.Prefix{}, err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok {
			if p, err := netip.ParsePrefix(n.String()); err == nil {
				used = append(used, p.Masked())
			}
		}
	}
	out, err := exec.Command("ip", "-4", "route", "show", "table", "all").Output()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("ip route: %w", err)
	}
	for line := range strings.Lines(string(out)) {
		f := strings.Fields(line)
		if len(f) > 0 && (f[0] == "local" || f[0] == "broadcast" || f[0] == "unicast") {
			f = f[1:]
		}
		if len(f) == 0 {
			continue
		}
		if p, err := netip.ParsePrefix(f[0]); err == nil && p.Bits() > 0 {
			used = append(used, p.Masked())
		} else if a, err := netip.ParseAddr(f[0]); err == nil {
			used = append(used, netip.PrefixFrom(a, 32))
		}
	}
	for _, c := range candidates {
		p, err := netip.ParsePrefix(c)
		if err != nil {
			return netip.Prefix{}, err
		}
		if !slices.ContainsFunc(used, p.Overlaps) {
			return p, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free subnet among %v (the machine uses %v)", candidates, used)
}

// ListenInNetns opens a listener in the named network namespace
// (/run/netns/NS): the socket belongs to the namespace of the thread that
// made it.
func ListenInNetns(ns, network, addr string) (net.Listener, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		return nil, err
	}
	ln, lerr := net.Listen(network, addr)
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// This thread stays in the wrong namespace: never unlock it, so
		// it dies with the goroutine instead of serving others.
		runtime.Goexit()
	}
	return ln, lerr
}
