package daemon

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		if !kubeBuilt && c.Backend == BackendKubernetes {
			want = "this sandboxd was built without it (build with -tags kubernetes"
		}
		assert.Contains(t, err.Error(), want, args)
	}
	c := Defaults()
	c.Logger = quiet()
	c.Backend, c.Kube.AgentImage = BackendKubernetes, "registry.example/agent:1"
	if kubeBuilt {
		require.NoError(t, c.Validate())
	} else {
		require.ErrorContains(t, c.Validate(), "built without it")
	}
}
