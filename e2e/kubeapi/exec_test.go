package kubeapi

import (
	"context"
	"errors"
	"io"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	streaming "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes/kubetest"
)

// dockerExec runs exec requests in one real container with `docker exec
// -i`: the kubelet side of these tests, without the test node's Pods.
type dockerExec struct{ container string }

func (d dockerExec) ExecInContainer(ctx context.Context, _, _, _ string, cmd []string,
	in io.Reader, out, errw io.WriteCloser, _ bool, _ <-chan streaming.TerminalSize, _ time.Duration,
) error {
	c := exec.CommandContext(ctx, "docker", append([]string{"exec", "-i", d.container}, cmd...)...)
	c.Stdout, c.Stderr = out, errw
	// Not c.Stdin = in: Wait would wait for a copy blocked reading in
	// after the command has ended.
	stdin, err := c.StdinPipe()
	if err != nil {
		return err
	}
	if err := c.Start(); err != nil {
		return err
	}
	go func() {
		if in != nil {
			_, _ = io.Copy(stdin, in)
		}
		_ = stdin.Close()
	}()
	err = c.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return utilexec.CodeExitError{Err: err, Code: ee.ExitCode()}
	}
	return err
}

// startContainer runs a sandboxd-test container that sleeps, removed when
// the test ends.
func startContainer(t *testing.T) string {
	t.Helper()
	ctx := testContext(t)
	name := "sandboxd-t3-" + uuid.NewString()[:8]
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--rm", "--name", name, "--label", labelRun+"="+runID,
		"--network", "none", "--user", "1000:1000", "--cap-drop", "ALL", testenv.DefaultTestImage, "sleep", "600").CombinedOutput()
	require.NoError(t, err, "docker run: %s", out)
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	return name
}

// registerNode makes a Node whose kubelet endpoint is the test exec
// server's: kube-apiserver sends pods/exec of the Pods bound to it there
// (InternalIP 127.0.0.1, the port of Kubelet(); no kubelet CA, so the
// apiserver does not verify the endpoint's certificate).
func registerNode(t *testing.T, srv *kubetest.ExecServer) string {
	t.Helper()
	ctx := testContext(t)
	host, portStr, err := net.SplitHostPort(srv.Kubelet().Host)
	require.NoError(t, err)
	port, err := strconv.Atoi(portStr)
	require.NoError(t, err)
	name := "t3-node-" + uuid.NewString()[:8]
	node, err := kube.client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = kube.client.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	})
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: host}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(port)
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}}
	_, err = kube.client.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{})
	require.NoError(t, err)
	return name
}

// TestExecThroughAPIServer: pods/exec of a Pod bound to a Node goes from a
// client through the real kube-apiserver to that Node's kubelet endpoint
// (Kubernetes' own exec server code, here at a loopback address) and into a
// real container, both ways, with the runtime's ExecFunc (WebSocket v5
// first); an exit code and stderr come back as an error.
func TestExecThroughAPIServer(t *testing.T) {
	ctr := startContainer(t)
	srv, err := kubetest.NewExecServer(dockerExec{container: ctr}, nil)
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	nodeName := registerNode(t, srv)
	ns := newNamespace(t, false)
	ctx := testContext(t)
	_, err = kube.client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{NodeName: nodeName, AutomountServiceAccountToken: new(false),
			Containers: []corev1.Container{{Name: "c", Image: testenv.DefaultTestImage}}},
	}, metav1.CreateOptions{})
	require.NoError(t, err)

	execFn, err := kubernetes.NewExec(kube.admin)
	require.NoError(t, err)
	stream, err := execFn(ctx, ns, "p", "c", []string{"cat"})
	require.NoError(t, err)
	_, err = io.WriteString(stream, "through the apiserver\n")
	require.NoError(t, err)
	buf := make([]byte, len("through the apiserver\n"))
	_, err = io.ReadFull(stream, buf)
	require.NoError(t, err)
	assert.Equal(t, "through the apiserver\n", string(buf))
	require.NoError(t, stream.Close())
	assert.GreaterOrEqual(t, srv.Counts().Kubelet, int64(1), "the kubelet endpoint served it")
	assert.Zero(t, srv.Counts().WebSocket+srv.Counts().SPDY, "the real apiserver, not the test server's API endpoint, carried it")

	// whoami inside the container: the stream reaches the real one.
	stream, err = execFn(ctx, ns, "p", "c", []string{"id", "-u"})
	require.NoError(t, err)
	out, err := io.ReadAll(stream)
	require.NoError(t, err)
	assert.Equal(t, "1000", strings.TrimSpace(string(out)))
	require.NoError(t, stream.Close())
}
