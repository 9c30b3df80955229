//go:build !kubernetes

package daemon

import (
	"context"
	"log/slog"
)

// kubeBuilt: this build lacks the Kubernetes backend (it takes -tags
// kubernetes): without client-go the binary, which every sandbox runs as
// its agent, is half the size and each of its processes 2.3 MB smaller
// (decision 0043).
const kubeBuilt = false

// KubeClients is empty in a build without the Kubernetes backend.
type KubeClients struct{}

func newKubeRuntime(context.Context, Config, *slog.Logger) (*runtime, error) {
	return nil, usageErrorf("--backend kubernetes: this sandboxd was built without it (build with -tags kubernetes: make build-kubernetes)")
}
