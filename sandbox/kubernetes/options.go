package kubernetes

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/sandboxd/sandboxd/sandbox"
)

// unsupported is the error of a feature this runtime does not offer.
func unsupported(feature, detail string) *sandbox.UnsupportedError {
	return &sandbox.UnsupportedError{Runtime: Name, Feature: feature, Detail: detail}
}

// CheckOptions refuses what this runtime cannot honour, with a
// *sandbox.UnsupportedError naming it (the first one found), or an
// *sandbox.OptionsError for a session label Kubernetes cannot carry. The
// manager calls it before anything of a session is made; Start calls it
// again.
func (r *Runtime) CheckOptions(o sandbox.SessionOptions) error {
	switch {
	case len(o.MCPServers) > 0:
		return unsupported("mcp_servers (MCP sidecars)", "a session's MCP servers run only on the Docker runtime so far")
	case o.Limits.DiskQuota > 0:
		return unsupported("limits.disk_quota",
			"a Pod's volumes are bounded by eviction (the kubelet measures them and evicts the Pod past its limit), not by ENOSPC on a write; "+
				"limits.disk (memory-backed, a hard limit) or the runtime's disk limit (eviction) bound them instead")
	case len(o.Inject) > 0:
		return unsupported("inject (secrets injected on the way out)", "it needs the egress proxy, which runs only on the Docker runtime so far")
	case sandbox.HasHostNames(o.AllowHosts):
		return unsupported("allow_hosts by host name", "names are enforced by the daemon's egress proxy, which does not run on a cluster yet; list IP addresses or CIDR prefixes (NetworkPolicy ipBlock rules)")
	case len(o.EditablePaths) > 0:
		return unsupported("editable_paths", "seeding a volume with the image's content of a folder is not built yet")
	case o.User == sandbox.UserImage:
		return unsupported("user: image", "a Pod runs as a numeric non-root user the daemon names (Pod Security restricted)")
	case o.ShellInit == sandbox.ShellInitImage:
		return unsupported("shell_init: image", "it needs the image's configuration (USER, HOME), which the daemon does not read on a cluster")
	case o.Entrypoint == sandbox.EntrypointImage:
		return unsupported("entrypoint: image", "it needs the image's ENTRYPOINT and CMD, which the daemon does not read on a cluster")
	}
	switch o.Network {
	case "", sandbox.NetworkNone, sandbox.NetworkBridge:
		if !r.cfg.NetworkPolicyEnforced {
			return unsupported("network: "+networkText(o),
				"a session's network is a NetworkPolicy, and the operator has not declared that this cluster's network plugin enforces NetworkPolicies "+
					"(--kube-network-policy-enforced); without that a Pod would reach the whole cluster network, so sessions are refused")
		}
	case sandbox.NetworkInternal:
		return unsupported("network: internal", "a cluster has no host network to reach a sandbox from; use none or bridge")
	default:
		return unsupported("network: "+o.Network, "operator networks by name exist only on the Docker runtime")
	}
	for k, v := range o.Labels {
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			return &sandbox.OptionsError{Problems: []string{fmt.Sprintf("labels: %q is not a Kubernetes label key (%s)", k, msgs[0])}}
		}
		_ = v // a value that does not fit a label becomes an annotation
	}
	if h, ok := o.Env["HOME"]; ok && !path.IsAbs(h) {
		return &sandbox.OptionsError{Problems: []string{fmt.Sprintf("env: HOME %q is not an absolute path", h)}}
	}
	return nil
}

func networkText(o sandbox.SessionOptions) string {
	switch {
	case o.Network == "" || o.Network == sandbox.NetworkNone:
		return sandbox.NetworkNone
	case len(o.AllowHosts) > 0:
		return o.Network + " with allow_hosts"
	}
	return o.Network
}

// CheckRuntime checks that the cluster has the RuntimeClass name (a
// session's Runtime, e.g. gvisor or kata): a missing one, or one the
// daemon may not read, is an *sandbox.OptionsError, never a silent run
// under the default runtime. "" (the cluster's default) is always there.
func (r *Runtime) CheckRuntime(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	if _, ok := r.runtimeClasses.Load(name); ok {
		return nil
	}
	if msgs := validation.IsDNS1123Subdomain(name); len(msgs) > 0 {
		return &sandbox.OptionsError{Problems: []string{fmt.Sprintf("runtime: %q cannot name a RuntimeClass: %s", name, msgs[0])}}
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	_, err := r.cli.NodeV1().RuntimeClasses().Get(cctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		r.runtimeClasses.Store(name, true)
		return nil
	case apierrors.IsNotFound(err):
		return &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
			"runtime: the cluster has no RuntimeClass %q; refusing rather than running the session under another runtime", name)}}
	}
	return &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
		"runtime: cannot tell whether the cluster has the RuntimeClass %q (%v); refusing rather than running the session under another runtime", name, err)}}
}

func lookupIPv4(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip4", host)
}
