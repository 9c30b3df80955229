package daemon

import (
	"flag"
	"time"
)

// BackendKubernetes runs every session as a Pod on a Kubernetes cluster
// (sandbox/kubernetes, docs/kubernetes.md). Only a binary built with
// -tags kubernetes has it (client-go doubles the binary: decision 0043).
const BackendKubernetes = "kubernetes"

// Values of --kube-agent-volume (sandbox/kubernetes.AgentVolume*).
const (
	kubeAgentVolumeImage = "image"
	kubeAgentVolumeInit  = "init"
)

// defaultKubeDiskLimit is --kube-disk-limit's default
// (sandbox/defaultKubeDiskLimit).
const defaultKubeDiskLimit = 10 << 30

// Kube is the configuration of the Kubernetes backend (--backend
// kubernetes): its flags, then the seams tests set.
type Kube struct {
	Kubeconfig            string        // --kubeconfig; "" is the in-cluster config
	Namespace             string        // --namespace; "" is the in-cluster namespace
	AgentImage            string        // --agent-image
	AgentVolume           string        // --kube-agent-volume
	NetworkPolicyEnforced bool          // --kube-network-policy-enforced
	HostUsers             bool          // --kube-host-users
	SeccompProfile        string        // --kube-seccomp-profile
	DiskLimit             Size          // --kube-disk-limit
	MaxLifetime           time.Duration // --kube-max-lifetime

	// Clients are the seams of tests (a fake clientset, a test API
	// server); empty in a build without the backend (no -tags kubernetes).
	Clients KubeClients
}

// registerKubeFlags defines the flags of the Kubernetes backend.
func (c *Config) registerKubeFlags(fs *flag.FlagSet) {
	k := &c.Kube
	fs.StringVar(&c.Backend, "backend", c.Backend, "where sessions run: docker (a container per session on this host's engine) or "+
		"kubernetes (a Pod per session on a cluster, reached through pods/exec; docs/kubernetes.md)")
	fs.StringVar(&k.Kubeconfig, "kubeconfig", k.Kubeconfig, "with --backend kubernetes: the kubeconfig file of the cluster (its current context); "+
		"empty: the in-cluster configuration of the Pod this server runs in")
	fs.StringVar(&k.Namespace, "namespace", k.Namespace, "with --backend kubernetes: the namespace of the sessions' Pods and NetworkPolicies; "+
		"empty: this server's own namespace when it runs in the cluster")
	fs.StringVar(&k.AgentImage, "agent-image", k.AgentImage, "with --backend kubernetes (required): the OCI reference of the agent image the nodes pull, "+
		"holding this version's static sandboxd binary at /sandboxd (docs/kubernetes.md says how to build and push it)")
	fs.StringVar(&k.AgentVolume, "kube-agent-volume", k.AgentVolume, "with --backend kubernetes: how the agent binary reaches a Pod: image "+
		"(an image volume, read-only: Kubernetes 1.35+ with containerd 2.1+ or CRI-O) or init (an init container copies it into an emptyDir)")
	fs.BoolVar(&k.NetworkPolicyEnforced, "kube-network-policy-enforced", k.NetworkPolicyEnforced, "with --backend kubernetes: declare that the cluster's network "+
		"plugin enforces NetworkPolicies; every session's network (none, bridge, allow_hosts) is one, so without this declaration sessions are refused")
	fs.BoolVar(&k.HostUsers, "kube-host-users", k.HostUsers, "with --backend kubernetes: run Pods in the node's user namespace (hostUsers: true), "+
		"for clusters without user namespace support; default: a user namespace per Pod")
	fs.StringVar(&k.SeccompProfile, "kube-seccomp-profile", k.SeccompProfile, "with --backend kubernetes: a seccomp profile installed on every node, "+
		"relative to the kubelet's seccomp folder (type Localhost); empty: the container runtime's default (RuntimeDefault)")
	fs.Var(&k.DiskLimit, "kube-disk-limit", "with --backend kubernetes: each Pod's ephemeral-storage limit and the size limit of its /workspace and home "+
		"(unless --disk-mb); past it the kubelet evicts the Pod and the session fails naming the disk limit (eviction, not ENOSPC)")
	fs.DurationVar(&k.MaxLifetime, "kube-max-lifetime", k.MaxLifetime, "with --backend kubernetes: every Pod's activeDeadlineSeconds, so the cluster ends "+
		"a sandbox that old whatever becomes of this server (a pooled one counts from its start); 0: none")
}

// kubeDefaults are the Kubernetes backend's flag defaults.
func kubeDefaults() Kube {
	return Kube{AgentVolume: kubeAgentVolumeImage, DiskLimit: defaultKubeDiskLimit}
}

// validateKube checks the flags of the backend chosen against the other
// backend's: a flag that means nothing to it is an error, not ignored.
func (c *Config) validateKube() error {
	k := c.Kube
	if c.Backend != BackendKubernetes {
		d := kubeDefaults()
		for flagName, set := range map[string]bool{
			"--kubeconfig": k.Kubeconfig != "", "--namespace": k.Namespace != "", "--agent-image": k.AgentImage != "",
			"--kube-agent-volume": k.AgentVolume != d.AgentVolume && k.AgentVolume != "", "--kube-network-policy-enforced": k.NetworkPolicyEnforced,
			"--kube-host-users": k.HostUsers, "--kube-seccomp-profile": k.SeccompProfile != "",
			"--kube-disk-limit": k.DiskLimit != d.DiskLimit && k.DiskLimit != 0, "--kube-max-lifetime": k.MaxLifetime != 0,
		} {
			if set {
				return usageErrorf("%s applies to --backend kubernetes only", flagName)
			}
		}
		return nil
	}
	switch {
	case !kubeBuilt:
		return usageErrorf("--backend kubernetes: this sandboxd was built without it (build with -tags kubernetes: make build-kubernetes)")
	case k.AgentImage == "":
		return usageErrorf("--backend kubernetes needs --agent-image: the OCI reference of the agent image the nodes pull (docs/kubernetes.md)")
	case k.AgentVolume != "" && k.AgentVolume != kubeAgentVolumeImage && k.AgentVolume != kubeAgentVolumeInit:
		return usageErrorf("--kube-agent-volume %q: want %s or %s", k.AgentVolume, kubeAgentVolumeImage, kubeAgentVolumeInit)
	case k.DiskLimit < 0:
		return usageErrorf("--kube-disk-limit %v: want a size", k.DiskLimit)
	case k.MaxLifetime < 0:
		return usageErrorf("--kube-max-lifetime %v: want 0 (none) or a duration", k.MaxLifetime)
	case c.InsecureBridge:
		return usageErrorf("--insecure-bridge-host-access applies to --backend docker only: on Kubernetes a session's network is a NetworkPolicy (--kube-network-policy-enforced)")
	case len(c.AllowNetworks) > 0:
		return usageErrorf("--allow-network applies to --backend docker only")
	case c.AgentBinary != "":
		return usageErrorf("--agent-binary applies to --backend docker only: on Kubernetes the agent comes from --agent-image")
	case c.DiskBackend == DiskLoop:
		return usageErrorf("--disk-backend loop applies to --backend docker only: Kubernetes bounds volumes by eviction (--kube-disk-limit) or as memory (--disk-mb)")
	}
	return nil
}
