package kubeapi

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	nodev1 "k8s.io/api/node/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes/kubetest"
)

// TestSandboxCannotBeCreated: a Pod whose RuntimeClass names a handler the
// node's container runtime lacks (a cluster with a gvisor RuntimeClass
// whose node has no runsc) gets the kubelet's Warning Event
// FailedCreatePodSandBox through the real API server, and the start fails
// at once with that reason and message, not "busy" at the start's
// deadline; nothing of the session is left.
func TestSandboxCannotBeCreated(t *testing.T) {
	ns := newNamespace(t, true)
	ctx := testContext(t)
	rc := "t3-gvisor-" + runID
	_, err := kube.client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: rc}, Handler: "runsc",
	}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = kube.client.NodeV1().RuntimeClasses().Delete(context.Background(), rc, metav1.DeleteOptions{})
	})
	node := startNodeWith(t, ns, func(c *kubetest.NodeConfig) { c.RuntimeHandlers = map[string]bool{"runc": true} })
	m := newManager(t, newRuntime(t, kube.client, ns, node.Name()), sandbox.ManagerOptions{})

	_, err = m.Create(ctx, sandbox.SessionOptions{Runtime: rc})
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), `FailedCreatePodSandBox: Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "runsc" is configured`)
	assert.NotContains(t, err.Error(), "deadline exceeded", "at once, not at the start's deadline")
	assert.NotContains(t, err.Error(), "busy")
	nothingLeft(t, ns)
}
