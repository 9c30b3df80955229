package kubernetes

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/sandboxd/sandboxd/sandbox"
)

// claimAttempts bounds the retries of a claim whose patch met a newer
// resourceVersion that still carries the pool label (the kubelet wrote the
// Pod's status meanwhile, not a rival daemon).
const claimAttempts = 5

// Claim removes the pool label of a pooled Pod with a merge patch guarded
// by the Pod's resourceVersion: the API server is the lock, so of two
// daemons racing for one Pod exactly one succeeds, and the other gets an
// error wrapping sandbox.ErrClaimed. A Pod this runtime has claimed
// already is no error (AnnotationClaimedBy names the claimant).
func (r *Runtime) Claim(ctx context.Context, sessionID string) error {
	if err := checkSessionID(sessionID); err != nil {
		return err
	}
	pods := r.cli.CoreV1().Pods(r.cfg.Namespace)
	for range claimAttempts {
		cctx, cancel := r.call(ctx)
		pod, err := pods.Get(cctx, PodName(sessionID), metav1.GetOptions{})
		cancel()
		if err != nil {
			return wrap(err, "session %s: reading its Pod to claim it", sessionID)
		}
		// The pool's key is a label or, when it does not fit one, an
		// annotation (splitMetadata).
		if _, pooled := mergedMetadata(pod.ObjectMeta)[sandbox.LabelPool]; !pooled {
			if pod.Annotations[AnnotationClaimedBy] == r.id {
				return nil
			}
			return fmt.Errorf("session %s: %w (by %q)", sessionID, sandbox.ErrClaimed, pod.Annotations[AnnotationClaimedBy])
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": pod.ResourceVersion,
			"labels":          map[string]any{sandbox.LabelPool: nil},
			"annotations":     map[string]any{sandbox.LabelPool: nil, AnnotationClaimedBy: r.id},
		}})
		cctx, cancel = r.call(ctx)
		_, err = pods.Patch(cctx, pod.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		cancel()
		switch {
		case err == nil:
			return nil
		case apierrors.IsConflict(err):
			continue // changed meanwhile: look again
		}
		return wrap(err, "session %s: claiming its Pod", sessionID)
	}
	return fmt.Errorf("session %s: claiming its Pod: its resourceVersion kept changing (%d attempts)", sessionID, claimAttempts)
}
