//go:build kubernetes

package daemon

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxd/sandboxd/sandbox"
)

// A daemon on the Kubernetes backend (a fake cluster): without the
// operator's NetworkPolicy declaration its default sessions are refused at
// start, naming Kubernetes; with it, it starts and stops.
func TestKubeBackendStarts(t *testing.T) {
	kube := func(enforced bool) Config {
		c := Defaults()
		c.Logger, c.StateDir, c.Token, c.Listen = quiet(), t.TempDir(), strings.Repeat("t", 32), "127.0.0.1:0"
		c.Backend = BackendKubernetes
		c.Kube.AgentImage, c.Kube.Namespace, c.Kube.NetworkPolicyEnforced = "registry.example/agent:1", "sandboxes", enforced
		c.Kube.Clients.Client = fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "sandboxes"}})
		c.Kube.Clients.Exec = func(context.Context, string, string, string, []string) (io.ReadWriteCloser, error) {
			return nil, errors.New("no exec in this test")
		}
		return c
	}
	_, err := New(t.Context(), kube(false))
	require.ErrorIs(t, err, sandbox.ErrUnsupported)
	assert.Contains(t, err.Error(), "network: none is not supported on the kubernetes runtime")

	d, err := New(t.Context(), kube(true))
	require.NoError(t, err)
	assert.Equal(t, "sandboxes", d.Runtime.(interface{ Namespace() string }).Namespace())
	require.NoError(t, d.Shutdown(t.Context()))
}
