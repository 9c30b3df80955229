//go:build !nokubernetes

package daemon

import (
	"context"
	"errors"
	"flag"
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

// The Kubernetes backend's flags are checked against the backend chosen:
// one that means nothing to it is an error naming the flag.
func TestKubeFlagsValidated(t *testing.T) {
	for args, want := range map[string]string{
		"--backend nomad":                `--backend "nomad": want docker or kubernetes`,
		"--kubeconfig /k":                "--kubeconfig applies to --backend kubernetes only",
		"--kube-network-policy-enforced": "--kube-network-policy-enforced applies to --backend kubernetes only",
		"--backend kubernetes":           "--backend kubernetes needs --agent-image",
		"--backend kubernetes --agent-image a --kube-agent-volume copy":      `--kube-agent-volume "copy": want image or init`,
		"--backend kubernetes --agent-image a --insecure-bridge-host-access": "--insecure-bridge-host-access applies to --backend docker only",
		"--backend kubernetes --agent-image a --agent-binary /b":             "--agent-binary applies to --backend docker only",
		"--backend kubernetes --agent-image a --disk-backend loop":           "--disk-backend loop applies to --backend docker only",
		"--backend kubernetes --agent-image a --kube-max-lifetime -1s":       "--kube-max-lifetime -1s",
	} {
		c := Defaults()
		c.Logger = quiet()
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c.RegisterFlags(fs)
		require.NoError(t, fs.Parse(strings.Fields(args)), args)
		err := c.Validate()
		require.Error(t, err, args)
		assert.Contains(t, err.Error(), want, args)
	}
	c := Defaults()
	c.Logger = quiet()
	c.Backend, c.Kube.AgentImage = BackendKubernetes, "registry.example/agent:1"
	require.NoError(t, c.Validate())
}

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
