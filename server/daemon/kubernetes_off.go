//go:build nokubernetes

package daemon

import (
	"context"
	"log/slog"
)

// kubeBuilt: this build lacks the Kubernetes backend (-tags nokubernetes),
// and with it client-go: a smaller binary, and a smaller agent in every
// sandbox (decision 0043).
const kubeBuilt = false

// KubeClients is empty in a build without the Kubernetes backend.
type KubeClients struct{}

func newKubeRuntime(context.Context, Config, *slog.Logger) (*runtime, error) {
	return nil, usageErrorf("--backend kubernetes: this sandboxd was built without it (-tags nokubernetes)")
}
