package kubeapi

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newNamespace makes a namespace for one test, with the label that makes
// Pod Security admission enforce restricted (latest) when restricted, and
// its default ServiceAccount (no controller-manager makes it, and the
// ServiceAccount admission plugin refuses Pods without it). Without a
// namespace controller a deleted namespace never goes away: the cleanup
// deletes its Pods (what the tests make) and the namespace.
func newNamespace(t *testing.T, restricted bool) string {
	t.Helper()
	ctx := testContext(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "t3-" + uuid.NewString()[:8], Labels: map[string]string{}}}
	if restricted {
		ns.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
		ns.Labels["pod-security.kubernetes.io/enforce-version"] = "latest"
	}
	_, err := kube.client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	require.NoError(t, err)
	_, err = kube.client.CoreV1().ServiceAccounts(ns.Name).Create(ctx,
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		zero := int64(0)
		_ = kube.client.CoreV1().Pods(ns.Name).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		_ = kube.client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// TestAPIServerVersion: the binary is the release make kube-apiserver
// builds, stamped (without -ldflags it says v0.0.0-master).
func TestAPIServerVersion(t *testing.T) {
	v, err := kube.client.Discovery().ServerVersion()
	require.NoError(t, err)
	assert.Equal(t, apiserverVersion, v.GitVersion)
	assert.Equal(t, "1", v.Major)
	assert.Equal(t, "37", v.Minor)
}

// TestRestrictedRefusesABarePod: the namespace label is enforced, so the
// tests below that see the runtime's Pods admitted are not admitted by a
// server that checks nothing.
func TestRestrictedRefusesABarePod(t *testing.T) {
	ctx := testContext(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bare"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "sandboxd-test:latest"}}},
	}
	_, err := kube.client.CoreV1().Pods(newNamespace(t, true)).Create(ctx, pod, metav1.CreateOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `violates PodSecurity "restricted:latest"`)
	for _, want := range []string{"allowPrivilegeEscalation != false", "unrestricted capabilities", "runAsNonRoot != true", "seccompProfile"} {
		assert.Contains(t, err.Error(), want)
	}

	// The same Pod in a namespace without the label is admitted.
	_, err = kube.client.CoreV1().Pods(newNamespace(t, false)).Create(ctx, pod, metav1.CreateOptions{})
	require.NoError(t, err)
}
