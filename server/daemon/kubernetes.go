//go:build kubernetes

package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	kclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/sandboxd/sandboxd/sandbox/kubernetes"
)

// kubeBuilt: this build has the Kubernetes backend.
const kubeBuilt = true

// inClusterNamespace is where a Pod's service account names its namespace.
const inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// KubeClients are what a test gives the Kubernetes backend in place of
// --kubeconfig: a clientset (fake, or of a test API server), its REST
// config and the exec of the agent proxy; Node pins the Pods to a node.
// Each one left nil is made from the kubeconfig or in-cluster config.
type KubeClients struct {
	Client kclient.Interface
	REST   *rest.Config
	Exec   kubernetes.ExecFunc
	Node   string
}

// newKubeRuntime makes the Kubernetes runtime of c.
func newKubeRuntime(ctx context.Context, c Config, log *slog.Logger) (*runtime, error) {
	k, kc := c.Kube, c.Kube.Clients
	restCfg, ns := kc.REST, k.Namespace
	if kc.Client == nil || kc.Exec == nil {
		if restCfg == nil {
			var err error
			if restCfg, err = kubeREST(k.Kubeconfig); err != nil {
				return nil, err
			}
		}
	}
	if ns == "" {
		if k.Kubeconfig == "" && kc.Client == nil {
			b, err := os.ReadFile(inClusterNamespace)
			if err != nil {
				return nil, usageErrorf("--backend kubernetes: no --namespace, and this server's own is unknown (%v)", err)
			}
			ns = strings.TrimSpace(string(b))
		} else {
			return nil, usageErrorf("--backend kubernetes with --kubeconfig needs --namespace")
		}
	}
	rt, err := kubernetes.New(ctx, kubernetes.Config{
		Client: kc.Client, REST: restCfg, Exec: kc.Exec, Namespace: ns, Labels: c.Labels,
		AgentImage: k.AgentImage, AgentVolume: k.AgentVolume, NetworkPolicyEnforced: k.NetworkPolicyEnforced,
		HostUsers: k.HostUsers, SeccompProfile: k.SeccompProfile, DiskLimit: int64(k.DiskLimit), MaxLifetime: k.MaxLifetime,
		Node: kc.Node, Logger: log,
	})
	if err != nil {
		return nil, err
	}
	if c.Direct {
		log.Info("no direct path on kubernetes: every call goes through pods/exec of the agent proxy")
	}
	return &runtime{rt: rt, checkRuntime: rt.CheckRuntime, checkOptions: rt.CheckOptions,
		diskQuota: fmt.Errorf("the %s backend bounds volumes by eviction, not disk quotas", BackendKubernetes), close: func() { _ = rt.Close() }}, nil
}

// kubeREST is the client configuration of a kubeconfig file, or the
// in-cluster one.
func kubeREST(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, usageErrorf("--backend kubernetes without --kubeconfig needs to run in a cluster: %v", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, usageErrorf("--kubeconfig %s: %v", kubeconfig, err)
	}
	return cfg, nil
}
