package kubernetes

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Inspect reports the state of a session's Pod (an error wrapping
// sandbox.ErrNotFound when it has none).
func (r *Runtime) Inspect(ctx context.Context, sessionID string) (sandbox.Status, error) {
	if err := checkSessionID(sessionID); err != nil {
		return sandbox.Status{}, err
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	pod, err := r.cli.CoreV1().Pods(r.cfg.Namespace).Get(cctx, PodName(sessionID), metav1.GetOptions{})
	if err != nil {
		return sandbox.Status{}, wrap(err, "session %s: reading its Pod", sessionID)
	}
	return statusOf(pod), nil
}

// statusOf maps a Pod's status: running is phase Running with the
// sandbox's container running and no deletion under way; the exit code,
// times and OOM kill come from the container's terminated state; eviction
// (the kubelet's answer to a Pod past its ephemeral-storage or emptyDir
// limit: "disk limit") and activeDeadlineSeconds are named in Reason, and
// the Pod's or container's message is the Error.
func statusOf(pod *corev1.Pod) sandbox.Status {
	var st sandbox.Status
	cs := containerStatus(pod)
	var msgs []string
	if cs != nil {
		switch {
		case cs.State.Running != nil:
			st.Running = pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil
			st.StartedAt = cs.State.Running.StartedAt.Time
		case cs.State.Terminated != nil:
			t := cs.State.Terminated
			st.ExitCode = int(t.ExitCode)
			st.StartedAt, st.FinishedAt = t.StartedAt.Time, t.FinishedAt.Time
			st.OOMKilled = t.Reason == "OOMKilled"
			if t.Reason != "" && t.Reason != "Error" && t.Reason != "Completed" && !st.OOMKilled {
				msgs = append(msgs, t.Reason)
			}
			if t.Message != "" {
				msgs = append(msgs, t.Message)
			}
		case cs.State.Waiting != nil && cs.State.Waiting.Reason != "":
			w := cs.State.Waiting
			msgs = append(msgs, strings.TrimSpace(w.Reason+": "+w.Message))
		}
	}
	switch pod.Status.Reason {
	case "Evicted":
		st.Reason = "evicted by Kubernetes"
		if evictedForDisk(pod.Status.Message) {
			st.Reason += ": disk limit (its ephemeral-storage limit or a volume's size limit)"
		}
	case "DeadlineExceeded":
		st.Reason = "past its maximum lifetime (activeDeadlineSeconds)"
	case "":
	default:
		msgs = append(msgs, pod.Status.Reason)
	}
	if pod.Status.Message != "" {
		msgs = append(msgs, pod.Status.Message)
	}
	if pod.DeletionTimestamp != nil {
		msgs = append(msgs, "its Pod is being deleted")
	}
	st.Error = strings.Join(msgs, ": ")
	return st
}

// evictedForDisk tells from an eviction message that storage was the
// cause: the kubelet writes "Pod ephemeral local storage usage exceeds
// the total limit of containers ...", "Usage of EmptyDir volume ... exceeds
// the limit ...", "Container ... exceeded its local ephemeral storage
// limit ...", or "The node was low on resource: ephemeral-storage".
func evictedForDisk(msg string) bool {
	m := strings.ToLower(msg)
	return strings.Contains(m, "ephemeral") || strings.Contains(m, "emptydir") || strings.Contains(m, "storage")
}
