//go:build kubernetes

// This file is what the tests and `bench -suite kube` share: the node
// mk/kubenode.sh describes, and the agent image imported into its
// containerd.

package kubenode

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// EnvKubeconfig names the running node's kubeconfig; node.env, written by
// mk/kubenode.sh beside it, says the rest.
const EnvKubeconfig = "SANDBOXD_KUBENODE_KUBECONFIG"

// Node is the node mk/kubenode.sh brought up.
type Node struct {
	Kubeconfig string
	// Name is the Node's name; Namespace the namespace made for sessions
	// (Pod Security restricted enforced).
	Name, Namespace string
	// ContainerdAddress is the socket of the node's own containerd.
	ContainerdAddress string
	// TestImage is the session image, imported from Docker.
	TestImage string
	// BridgeGateway is the host's address on the Pods' bridge.
	BridgeGateway string
	// Scheduler is true when a kube-scheduler places Pods that name no
	// node (a daemon's).
	Scheduler bool
	REST      *rest.Config
}

// Open reads the node from its kubeconfig and the node.env beside it.
func Open(kubeconfig string) (*Node, error) {
	b, err := os.ReadFile(filepath.Join(filepath.Dir(kubeconfig), "node.env"))
	if err != nil {
		return nil, fmt.Errorf("the node's description (is it up? make kubenode): %w", err)
	}
	env := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && !strings.HasPrefix(k, "#") {
			env[k] = v
		}
	}
	n := &Node{
		Kubeconfig: kubeconfig, Name: env["NODE"], Namespace: env["NAMESPACE"],
		ContainerdAddress: env["CONTAINERD_ADDRESS"], TestImage: env["TEST_IMAGE"], BridgeGateway: env["BRIDGE_GATEWAY"],
		Scheduler: env["SCHEDULER"] != "",
	}
	if n.Name == "" || n.Namespace == "" || n.ContainerdAddress == "" || n.TestImage == "" {
		return nil, fmt.Errorf("node.env beside %s lacks NODE, NAMESPACE, CONTAINERD_ADDRESS or TEST_IMAGE", kubeconfig)
	}
	if n.REST, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return nil, err
	}
	n.REST.QPS, n.REST.Burst = 100, 200
	return n, nil
}

// ctr runs Debian's ctr against the node's containerd, in the CRI's
// namespace, with stdin.
func (n *Node) ctr(ctx context.Context, stdin io.Reader, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.ContainerdAddress, "--namespace", "k8s.io"}, args...)...)
	cmd.Stdin = stdin
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// ImportAgent writes binary as the agent image (sandboxd agent-image) under
// tag and imports it into the node's containerd, so the Pods run the
// agent built from this tree; it returns the image's full reference.
func (n *Node) ImportAgent(ctx context.Context, binary, tag string) (string, error) {
	img := exec.CommandContext(ctx, binary, "agent-image", "--binary", binary, "--tag", tag, "--tar", "-")
	var stderr bytes.Buffer
	img.Stderr = &stderr
	tarball, err := img.Output()
	if err != nil {
		return "", fmt.Errorf("sandboxd agent-image: %w: %s", err, stderr.String())
	}
	if _, err := n.ctr(ctx, bytes.NewReader(tarball), "images", "import", "-"); err != nil {
		return "", err
	}
	return "docker.io/library/" + tag, nil
}

// RemoveImage removes ref from the node's containerd.
func (n *Node) RemoveImage(ctx context.Context, ref string) error {
	_, err := n.ctr(ctx, nil, "images", "rm", ref)
	return err
}

// ContainerSpec is the OCI runtime spec that the kubelet and containerd
// made for a container and handed to runc; id is the Pod status's
// containerID ("containerd://…").
func (n *Node) ContainerSpec(ctx context.Context, id string) (*specs.Spec, error) {
	raw, ok := strings.CutPrefix(id, "containerd://")
	if !ok {
		return nil, fmt.Errorf("container %q is not containerd's", id)
	}
	out, err := n.ctr(ctx, nil, "containers", "info", raw)
	if err != nil {
		return nil, err
	}
	var info struct {
		Spec *specs.Spec `json:"Spec"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("ctr containers info %s: %w", raw, err)
	}
	if info.Spec == nil {
		return nil, errors.New("ctr containers info: no Spec")
	}
	return info.Spec, nil
}
