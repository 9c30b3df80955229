package kubernetes

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/sandbox"
)

// List returns the Pods (sandbox.KindContainer), NetworkPolicies
// (sandbox.KindNetwork) and ConfigMaps of skills (sandbox.KindVolume) of
// this runtime's scope, each with its labels and
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
	cms, err := r.cli.CoreV1().ConfigMaps(r.cfg.Namespace).List(cctx, sel)
	switch {
	case apierrors.IsForbidden(err):
		// A Role from before skills: no session could have made one.
		r.log.Warn("cannot list ConfigMaps: sessions with skills cannot start; grant configmaps create, list and delete (deploy/kubernetes/rbac.yaml)", "err", err)
		cms = &corev1.ConfigMapList{}
	case err != nil:
		return nil, fmt.Errorf("listing ConfigMaps: %w", err)
	}
	out := make([]sandbox.Resource, 0, len(pods.Items)+len(nps.Items)+len(cms.Items))
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
	for i := range cms.Items {
		c := &cms.Items[i]
		out = append(out, sandbox.Resource{
			Kind: sandbox.KindVolume, ID: string(c.UID), Name: c.Name,
			SessionID: c.Labels[sandbox.LabelSession], Labels: mergedMetadata(c.ObjectMeta),
		})
	}
	return out, nil
}
