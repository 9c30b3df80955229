package kubernetes

import "context"

// Pause is not supported: Kubernetes has no freeze of a Pod's processes
// (the kubelet's API exposes none), so a session is not paused on a cluster.
func (r *Runtime) Pause(context.Context, string) error {
	return unsupported("pause", "Kubernetes cannot freeze a Pod's processes; close the session or keep it running")
}

// Unpause is not supported (see Pause).
func (r *Runtime) Unpause(context.Context, string) error {
	return unsupported("resume", "Kubernetes cannot freeze a Pod's processes, so none is paused")
}
