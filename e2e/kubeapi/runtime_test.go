package kubeapi

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kclient "k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes/kubetest"
)

var (
	dockerOnce   sync.Once
	dockerCli    *client.Client
	agentBinary  string
	dockerSetErr error
)

// dockerSetup is the engine and the static agent binary the test node
// needs, made once.
func dockerSetup(t *testing.T) (*client.Client, string) {
	t.Helper()
	dockerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if dockerCli, dockerSetErr = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); dockerSetErr != nil {
			return
		}
		if _, dockerSetErr = dockerCli.Ping(ctx); dockerSetErr != nil {
			return
		}
		if _, dockerSetErr = testenv.EnsureTestImage(ctx, dockerCli); dockerSetErr != nil {
			return
		}
		agentBinary, dockerSetErr = testenv.BuildBinary(ctx, tmpDir)
	})
	require.NoError(t, dockerSetErr, "the test node needs the Docker engine and the static agent binary")
	return dockerCli, agentBinary
}

func logger() *slog.Logger {
	if os.Getenv("SANDBOXD_E2E_VERBOSE") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// startNode starts the Docker-backed test node for ns, registered as a
// Node of the real API server (its kubelet endpoint the node's exec
// server), so pods/exec goes kube-apiserver → node → container.
func startNode(t *testing.T, ns string) *kubetest.Node {
	t.Helper()
	return startNodeOpts(t, ns, false)
}

// startNodeOpts is startNode; bind makes the node bind the Pods that name
// no node (a daemon's whose runtime does not pin them: there is no
// scheduler).
func startNodeOpts(t *testing.T, ns string, bind bool) *kubetest.Node {
	t.Helper()
	return startNodeWith(t, ns, func(c *kubetest.NodeConfig) { c.BindUnscheduled = bind })
}

// startNodeWith is startNode with what set changes in the node's config.
func startNodeWith(t *testing.T, ns string, set func(*kubetest.NodeConfig)) *kubetest.Node {
	t.Helper()
	docker, bin := dockerSetup(t)
	cfg := kubetest.NodeConfig{
		Client: kube.client, Docker: docker, Namespace: ns, Name: "t3-" + uuid.NewString()[:8],
		AgentBinary: bin, AgentImage: t3AgentImage, Labels: map[string]string{labelRun: runID},
		RegisterNode: true, Log: logger(),
	}
	if set != nil {
		set(&cfg)
	}
	node, err := kubetest.StartNode(testContext(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, node.Stop(ctx))
	})
	return node
}

// newRuntime is a Kubernetes runtime (one "daemon") on the real API server
// as client's user, its Pods pinned to node; its exec is the default one
// (NewExec of the REST config: WebSocket v5 through the apiserver).
func newRuntime(t *testing.T, cli kclient.Interface, ns, node string) *kubernetes.Runtime {
	t.Helper()
	rt, err := kubernetes.New(testContext(t), kubernetes.Config{
		Client: cli, REST: kube.admin, Namespace: ns, Labels: map[string]string{"t3.run": runID},
		AgentImage: t3AgentImage, NetworkPolicyEnforced: true, Node: node, Logger: logger(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, rt.Close()) })
	return rt
}

func newManager(t *testing.T, rt sandbox.Runtime, opts sandbox.ManagerOptions) *sandbox.Manager {
	t.Helper()
	opts.Defaults.Image = testenv.DefaultTestImage
	opts.Logger = logger()
	m, err := sandbox.NewManager(testContext(t), rt, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, m.Shutdown(ctx, false))
	})
	return m
}

func terminal(t *testing.T, s *sandbox.Session, command string) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{"command": command})
	require.NoError(t, err)
	obs, err := s.Call(testContext(t), "terminal", raw, nil)
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())
	return obs.Text()
}

// nothingLeft checks that the namespace holds no Pod, no NetworkPolicy and
// no ConfigMap of sandboxd.
func nothingLeft(t *testing.T, ns string) {
	t.Helper()
	ctx := testContext(t)
	pods, err := kube.client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, pods.Items, "Pods left")
	nps, err := kube.client.NetworkingV1().NetworkPolicies(ns).List(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	assert.Empty(t, nps.Items, "NetworkPolicies left")
	cms, err := kube.client.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: sandbox.LabelManaged + "=true"})
	require.NoError(t, err)
	assert.Empty(t, cms.Items, "ConfigMaps left")
}

// TestSessionThroughAPIServer: a whole session on the real API server, in a
// namespace enforcing Pod Security restricted: the runtime's Pod and
// NetworkPolicy are admitted, the test node runs the Pod, the terminal call
// goes kube-apiserver → node's kubelet endpoint → container, and closing
// the session leaves nothing.
func TestSessionThroughAPIServer(t *testing.T) {
	ns := newNamespace(t, true)
	node := startNode(t, ns)
	m := newManager(t, newRuntime(t, kube.client, ns, node.Name()), sandbox.ManagerOptions{})
	ctx := testContext(t)
	s, err := m.Create(ctx, sandbox.SessionOptions{})
	require.NoError(t, err)

	out := terminal(t, s, "id -u; cat /proc/self/status | grep CapEff; touch /x 2>&1; echo ok")
	assert.Contains(t, out, "1000")
	assert.Contains(t, out, "CapEff:\t0000000000000000")
	assert.Contains(t, out, "Read-only file system")
	assert.GreaterOrEqual(t, node.Exec().Counts().Kubelet, int64(1), "the apiserver sent the exec to the node's kubelet endpoint")
	assert.Zero(t, node.Exec().Counts().WebSocket+node.Exec().Counts().SPDY, "nothing used the test node's own API endpoint")

	// The Pod as the API server stored it after admission.
	pod, err := kube.client.CoreV1().Pods(ns).Get(ctx, kubernetes.PodName(s.ID()), metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
	assert.Equal(t, node.Name(), pod.Spec.NodeName)
	c := pod.Spec.Containers[0]
	require.NotNil(t, c.SecurityContext)
	assert.False(t, *c.SecurityContext.AllowPrivilegeEscalation)
	assert.True(t, *c.SecurityContext.ReadOnlyRootFilesystem)
	assert.Equal(t, []corev1.Capability{"ALL"}, c.SecurityContext.Capabilities.Drop)
	assert.False(t, *pod.Spec.AutomountServiceAccountToken)

	require.NoError(t, m.Close(ctx, s.ID()))
	nothingLeft(t, ns)
}

// TestClaimRaceTwoDaemons: two runtimes of one scope (two daemons) claim
// one pooled Pod at once; the API server's resourceVersion check gives one
// winner, and the loser gets sandbox.ErrClaimed.
func TestClaimRaceTwoDaemons(t *testing.T) {
	ns := newNamespace(t, true)
	node := startNode(t, ns)
	a := newRuntime(t, kube.client, ns, node.Name())
	b := newRuntime(t, kube.client, ns, node.Name())
	ctx := testContext(t)

	o, err := sandbox.SessionOptions{Image: testenv.DefaultTestImage}.Resolve(sandbox.SessionOptions{})
	require.NoError(t, err)
	cmd, err := sandbox.AgentCommand(o)
	require.NoError(t, err)
	id := strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	stream, err := a.Start(ctx, sandbox.Spec{SessionID: id, Options: o, Command: cmd, Pooled: true,
		Labels: sandbox.SessionLabels(id, o, "t3-pool", time.Now())})
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = stream.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, a.Remove(ctx, id))
		nothingLeft(t, ns)
	})

	for round := range 5 {
		// A fresh pooled Pod each round after the first: put the pool
		// label back, as a pool would on a new sandbox.
		if round > 0 {
			patch := []byte(`{"metadata":{"labels":{"` + sandbox.LabelPool + `":"t3-pool"},"annotations":{"` + kubernetes.AnnotationClaimedBy + `":null}}}`)
			_, err := kube.client.CoreV1().Pods(ns).Patch(ctx, kubernetes.PodName(id), types.MergePatchType, patch, metav1.PatchOptions{})
			require.NoError(t, err)
		}
		start := make(chan struct{})
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for i, rt := range []*kubernetes.Runtime{a, b} {
			wg.Go(func() {
				<-start
				errs[i] = rt.Claim(ctx, id)
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else {
				require.ErrorIs(t, err, sandbox.ErrClaimed, "round %d", round)
			}
		}
		assert.Equal(t, 1, won, "round %d: exactly one daemon wins: %v", round, errs)
	}
}

// TestPodDeletedFailsSession: a session's Pod deleted from outside (kubectl
// delete, an operator, a node drain) fails the session, found by the
// runtime's watch, with a reason naming the deletion. The reason, not a
// time, tells the watch from the health ping (which would say the agent
// did not answer): a 5 s bound here failed only on a loaded machine
// (issue 23).
func TestPodDeletedFailsSession(t *testing.T) {
	ns := newNamespace(t, true)
	node := startNode(t, ns)
	m := newManager(t, newRuntime(t, kube.client, ns, node.Name()), sandbox.ManagerOptions{})
	ctx := testContext(t)
	s, err := m.Create(ctx, sandbox.SessionOptions{})
	require.NoError(t, err)
	assert.Contains(t, terminal(t, s, "echo alive"), "alive")

	deleted := time.Now()
	require.NoError(t, kube.client.CoreV1().Pods(ns).Delete(ctx, kubernetes.PodName(s.ID()), metav1.DeleteOptions{}))
	select {
	case <-s.Done():
		t.Logf("session failed %v after the Pod was deleted", time.Since(deleted).Round(time.Millisecond))
	case <-ctx.Done():
		t.Fatal("the session did not end after its Pod's deletion")
	}
	require.Error(t, s.Err())
	assert.Contains(t, strings.ToLower(s.Err().Error()), "deleted", "the reason names the deletion: %v", s.Err())
	assert.NotErrorIs(t, s.Err(), context.DeadlineExceeded)
}
