package kubernetes

import (
	"context"
	"errors"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Remove deletes a session's Pod (grace 0: its processes are killed), its
// NetworkPolicy and the ConfigMap of its skills, and ends its agent streams. What is gone already
// (NotFound) is no error, so Remove is idempotent.
func (r *Runtime) Remove(ctx context.Context, sessionID string) error {
	if err := checkSessionID(sessionID); err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	r.w.forget(sessionID)
	cctx, cancel := r.call(ctx)
	defer cancel()
	var errs []error
	name := PodName(sessionID)
	err := r.cli.CoreV1().Pods(r.cfg.Namespace).Delete(cctx, name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting Pod %s: %w", name, err))
	}
	err = r.cli.NetworkingV1().NetworkPolicies(r.cfg.Namespace).Delete(cctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		errs = append(errs, fmt.Errorf("deleting NetworkPolicy %s: %w", name, err))
	}
	// Forbidden: a Role from before skills, which could not have made one.
	err = r.cli.CoreV1().ConfigMaps(r.cfg.Namespace).Delete(cctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
		errs = append(errs, fmt.Errorf("deleting ConfigMap %s: %w", name, err))
	}
	if len(errs) > 0 {
		return fmt.Errorf("session %s: %w", sessionID, errors.Join(errs...))
	}
	r.log.Debug("sandbox removed", "session", sessionID)
	return nil
}
