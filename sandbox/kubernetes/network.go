package kubernetes

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"github.com/sandboxd/sandboxd/sandbox"
)

// privateV4 and privateV6 are the ranges a bridge session's egress never
// reaches (the cluster's Pods and Services, the nodes, cloud metadata at
// 169.254.169.254, loopback), as a bridge session on Docker never reaches
// the host; allow_hosts may still name an address in them.
var (
	privateV4 = []string{"10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16"}
	privateV6 = []string{"::1/128", "fc00::/7", "fe80::/10"}
)

// The cluster DNS a bridge session may ask (the usual labels of CoreDNS).
const (
	dnsNamespace = "kube-system"
	dnsAppLabel  = "kube-dns"
)

// buildPolicy is the session's NetworkPolicy: no ingress at all, and
// egress by its network: none, nothing; bridge, the internet (everything
// but the private ranges) and the cluster's DNS; bridge with allow_hosts,
// those prefixes only (no DNS: their names are pinned in /etc/hosts).
// It carries the runtime's labels and the session's id, so List and
// Remove find it with the Pod.
func (r *Runtime) buildPolicy(spec sandbox.Spec, egress []netip.Prefix) *networkingv1.NetworkPolicy {
	o := spec.Options
	labels := maps.Clone(r.labels)
	labels[sandbox.LabelSession] = spec.SessionID
	np := &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: PodName(spec.SessionID), Namespace: r.cfg.Namespace, Labels: labels},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{
				sandbox.LabelSession: spec.SessionID, LabelScope: r.scope,
			}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{}, // none: deny all
			Egress:      []networkingv1.NetworkPolicyEgressRule{},
		},
	}
	if o.Network != sandbox.NetworkBridge {
		return np
	}
	if len(o.AllowHosts) > 0 {
		peers := make([]networkingv1.NetworkPolicyPeer, len(egress))
		for i, p := range egress {
			peers[i] = networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: p.String()}}
		}
		if len(peers) > 0 {
			np.Spec.Egress = append(np.Spec.Egress, networkingv1.NetworkPolicyEgressRule{To: peers})
		}
		return np
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	np.Spec.Egress = append(np.Spec.Egress,
		networkingv1.NetworkPolicyEgressRule{To: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: slices.Clone(privateV4)}},
			{IPBlock: &networkingv1.IPBlock{CIDR: "::/0", Except: slices.Clone(privateV6)}},
		}},
		networkingv1.NetworkPolicyEgressRule{
			To: []networkingv1.NetworkPolicyPeer{{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": dnsNamespace}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"k8s-app": dnsAppLabel}},
			}},
			Ports: []networkingv1.NetworkPolicyPort{
				{Protocol: ptr.To(udp), Port: ptr.To(intstr.FromInt32(53))},
				{Protocol: ptr.To(tcp), Port: ptr.To(intstr.FromInt32(53))},
			},
		})
	return np
}

// resolveEgress turns allow_hosts into prefixes, resolving names on the
// daemon's host (IPv4) when the session starts, and the /etc/hosts pins of
// the names; a later DNS change is not followed, as on Docker.
func (r *Runtime) resolveEgress(ctx context.Context, hosts []string) ([]netip.Prefix, []corev1.HostAlias, error) {
	var (
		out     []netip.Prefix
		aliases []corev1.HostAlias
	)
	byIP := map[string][]string{}
	for _, h := range hosts {
		ah, err := sandbox.ParseAllowHost(h)
		if err != nil {
			return nil, nil, &sandbox.OptionsError{Problems: []string{"allow_hosts: " + err.Error()}}
		}
		if ah.Name == "" {
			out = append(out, ah.Prefix)
			continue
		}
		addrs, err := r.cfg.LookupHost(ctx, ah.Name)
		if err != nil {
			return nil, nil, fmt.Errorf("allow_hosts: resolving %s: %w", ah.Name, err)
		}
		if len(addrs) == 0 {
			return nil, nil, fmt.Errorf("allow_hosts: %s has no IPv4 address", ah.Name)
		}
		for _, a := range addrs {
			a = a.Unmap()
			out = append(out, netip.PrefixFrom(a, a.BitLen()))
			byIP[a.String()] = append(byIP[a.String()], ah.Name)
		}
	}
	for _, ip := range slices.Sorted(maps.Keys(byIP)) {
		names := slices.Compact(slices.Sorted(slices.Values(byIP[ip])))
		aliases = append(aliases, corev1.HostAlias{IP: ip, Hostnames: names})
	}
	slices.SortFunc(out, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(out), aliases, nil
}
