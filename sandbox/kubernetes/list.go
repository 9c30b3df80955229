package kubernetes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/sandbox"
)

// List returns the Pods (sandbox.KindContainer) and NetworkPolicies
// (sandbox.KindNetwork) of this runtime's scope, each with its labels and
// annotations as one map.
func (r *Runtime) List(ctx context.Context) ([]sandbox.Resource, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	sel := metav1.ListOptions{LabelSelector: r.selector("")}
	pods, err := r.cli.CoreV1().Pods(r.cfg.Namespace).List(cctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing Pods: %w", err)
	}
	nps, err := r.cli.NetworkingV1().NetworkPolicies(r.cfg.Namespace).List(cctx, sel)
	if err != nil {
		return nil, fmt.Errorf("listing NetworkPolicies: %w", err)
	}
	out := make([]sandbox.Resource, 0, len(pods.Items)+len(nps.Items))
	for i := range pods.Items {
		p := &pods.Items[i]
		meta := mergedMetadata(p.ObjectMeta)
		_, pooled := meta[sandbox.LabelPool]
		out = append(out, sandbox.Resource{
			Kind: sandbox.KindContainer, ID: string(p.UID), Name: p.Name,
			SessionID: p.Labels[sandbox.LabelSession], Labels: meta,
			Running: statusOf(p).Running && p.Status.Phase == corev1.PodRunning,
			Pooled:  pooled,
		})
	}
	for i := range nps.Items {
		n := &nps.Items[i]
		out = append(out, sandbox.Resource{
			Kind: sandbox.KindNetwork, ID: string(n.UID), Name: n.Name,
			SessionID: n.Labels[sandbox.LabelSession], Labels: mergedMetadata(n.ObjectMeta),
		})
	}
	return out, nil
}
