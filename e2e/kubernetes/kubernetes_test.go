package kubernetes

import (
	"context"
	"log/slog"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxd/sandboxd/e2e/contract"
	"github.com/sandboxd/sandboxd/sandbox"
	skube "github.com/sandboxd/sandboxd/sandbox/kubernetes"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes/kubetest"
)

const (
	namespace = "sandboxd-e2e"
	// agentImage is the reference the runtime puts in Pods; the node binds
	// the host binary for it (there is no registry to pull from).
	agentImage = "registry.invalid/sandboxd-agent:e2e"
	labelTest  = "e2e.kubernetes.test"
)

var unsafeLabel = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

func logger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("SANDBOXD_E2E_VERBOSE") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// env is one test's cluster: the fake clientset, a test node, the
// runtime of sandbox/kubernetes and a manager over it.
type env struct {
	cs   *fake.Clientset
	node *kubetest.Node
	m    *sandbox.Manager
	// daemon makes another runtime and manager on the same cluster and
	// node (a daemon started again).
	daemon func() *sandbox.Manager
}

// newEnv makes a test's cluster. refuseWebSocket makes the API-server
// endpoint refuse the WebSocket upgrade, so every stream must take the
// SPDY fallback.
func newEnv(t *testing.T, refuseWebSocket bool, agentVolume string) *env {
	t.Helper()
	return newEnvWith(t, refuseWebSocket, agentVolume, nil)
}

// newEnvWith is newEnv with the manager's skill source.
func newEnvWith(t *testing.T, refuseWebSocket bool, agentVolume string, skillSource sandbox.SkillSource) *env {
	t.Helper()
	ctx := ctxT(t)
	cs := fake.NewClientset(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})
	node, err := kubetest.StartNode(ctx, kubetest.NodeConfig{
		Client: cs, Docker: docker, Namespace: namespace, Name: "kubetest-" + uuid.NewString()[:8],
		AgentBinary: agentBinary, AgentImage: agentImage, Labels: map[string]string{labelRun: runID},
		Log: logger(),
	})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, node.Stop(context.Background())) })
	node.Exec().SetRefuseWebSocket(refuseWebSocket)
	e := &env{cs: cs, node: node}
	e.daemon = func() *sandbox.Manager {
		t.Helper()
		exec, err := skube.NewExec(node.Exec().RESTConfig())
		require.NoError(t, err)
		rt, err := skube.New(ctx, skube.Config{
			Client: cs, Exec: exec, Namespace: namespace, AgentImage: agentImage, AgentVolume: agentVolume,
			Labels: map[string]string{labelRun: runID, labelTest: unsafeLabel.ReplaceAllString(t.Name(), "_")},
			Node:   node.Name(),
			// The node gives Pods no network at all: a deny-all policy holds.
			NetworkPolicyEnforced: true,
			Logger:                logger(),
		})
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, rt.Close()) })
		m, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{
			Defaults: sandbox.SessionOptions{Image: testImage}, ReapInterval: 100 * time.Millisecond, Logger: logger(),
			Skills: skillSource,
		})
		require.NoError(t, err)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			assert.NoError(t, m.Shutdown(ctx, false))
		})
		return m
	}
	e.m = e.daemon()
	return e
}

// checkProtocol asserts which protocol carried every exec of the test.
func (e *env) checkProtocol(t *testing.T, refused bool) {
	t.Helper()
	c := e.node.Exec().Counts()
	t.Logf("exec requests at the API-server endpoint: %+v", c)
	if refused {
		assert.Positive(t, c.SPDY, "the SPDY fallback carried the streams")
		assert.Equal(t, c.Refused, c.SPDY, "each stream was refused as a WebSocket first, then fell back")
		assert.Zero(t, c.WebSocket)
	} else {
		assert.Positive(t, c.WebSocket, "WebSocket v5 carried the streams")
		assert.Zero(t, c.SPDY, "no fallback")
		assert.Zero(t, c.Refused)
	}
	assert.Equal(t, c.WebSocket+c.SPDY, c.Kubelet, "every stream went through the kubelet endpoint")
}

var protocols = []struct {
	name    string
	refused bool
}{{"websocket", false}, {"spdy-fallback", true}}

// TestContractOverPodsExec: the executor suites (terminal, file_editor,
// grep, glob) and the tool annotations, e2e/contract as on Docker, over
// pods/exec into the Pod's container, once over each protocol.
func TestContractOverPodsExec(t *testing.T) {
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, p.refused, "")
			start := time.Now()
			s, err := e.m.Create(ctxT(t), sandbox.SessionOptions{Image: testImage, Tools: contract.Tools()})
			require.NoError(t, err)
			t.Logf("session ready in %v", time.Since(start).Round(time.Millisecond))
			contract.Run(t, s)
			t.Logf("contract ran in %v", time.Since(start).Round(time.Millisecond))
			e.checkProtocol(t, p.refused)
		})
	}
}

// TestSecurityInsidePod reads back from inside the Pod's container what
// the runtime's Pod asks for (non-root, no capabilities, no privilege
// escalation, seccomp, read-only root, limits, no network), as the
// Docker e2e does. The node realizes the Pod spec with Docker; a real
// kubelet is not here, so this shows the runtime's Pod and the agent
// work under those settings, not that a kubelet applies them.
func TestSecurityInsidePod(t *testing.T) {
	for _, vol := range []string{skube.AgentVolumeImage, skube.AgentVolumeInit} {
		t.Run(vol, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, false, vol)
			s, err := e.m.Create(ctxT(t), sandbox.SessionOptions{
				Limits: sandbox.Limits{Memory: 256 << 20, CPUs: 0.5, Tmpfs: 32 << 20},
				Tools:  contract.Tools(),
			})
			require.NoError(t, err)

			pod, err := e.cs.CoreV1().Pods(namespace).Get(ctxT(t), skube.PodName(s.ID()), metav1.GetOptions{})
			require.NoError(t, err)
			assert.Equal(t, corev1.PodRunning, pod.Status.Phase)
			assert.Equal(t, e.node.Name(), pod.Spec.NodeName)
			id := e.node.ContainerID(namespace, pod.Name)
			require.NotEmpty(t, id)
			info, err := docker.ContainerInspect(ctxT(t), id)
			require.NoError(t, err)
			t.Logf("the node's container: user %q, read-only root %v, cap drop %v, security %v, memory %d, cpus %d, mounts %d",
				info.Config.User, info.HostConfig.ReadonlyRootfs, info.HostConfig.CapDrop, info.HostConfig.SecurityOpt,
				info.HostConfig.Memory, info.HostConfig.NanoCPUs, len(info.Mounts))

			out := contract.Sh(t, s, `echo "uid=$(id -u) gid=$(id -g)"; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; `+
				`touch /rootfile 2>&1; echo "root_write=$?"; touch /workspace/ok && echo workspace_write=0; `+
				`touch /tmp/ok && echo tmp_write=0; touch `+sandbox.AgentPath+` 2>&1; echo "agent_write=$?"; `+
				`cat /sys/fs/cgroup/memory/memory.limit_in_bytes; cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us; `+
				`cat /proc/net/dev | awk 'NR>2{print "iface " $1}'`)
			t.Log(out)
			assert.Contains(t, out, "uid=1000 gid=1000")
			assert.Regexp(t, `CapEff:\s+0000000000000000`, out)
			assert.Regexp(t, `CapPrm:\s+0000000000000000`, out)
			assert.Regexp(t, `NoNewPrivs:\s+1`, out)
			assert.Regexp(t, `Seccomp:\s+2`, out)
			assert.Contains(t, out, "Read-only file system")
			assert.NotContains(t, out, "root_write=0")
			assert.NotContains(t, out, "agent_write=0", "the agent binary is read-only")
			assert.Contains(t, out, "workspace_write=0")
			assert.Contains(t, out, "tmp_write=0")
			assert.Contains(t, out, "268435456", "memory limit")
			assert.Contains(t, out, "\n50000", "half a CPU (cfs quota of a 100000 period)")
			ifaces := regexp.MustCompile(`iface (\S+)`).FindAllStringSubmatch(out, -1)
			require.Len(t, ifaces, 1, out)
			assert.Equal(t, "lo:", ifaces[0][1], "no network but loopback")
			e.checkProtocol(t, false)
		})
	}
}

// TestPodDeletedFailsSession: a Pod deleted from outside (kubectl delete)
// ends its container on the node and fails the session, found by the
// runtime's watch.
func TestPodDeletedFailsSession(t *testing.T) {
	t.Parallel()
	e := newEnv(t, false, "")
	ctx := ctxT(t)
	s, err := e.m.Create(ctx, sandbox.SessionOptions{Tools: contract.Tools()})
	require.NoError(t, err)
	contract.PodDeleted(ctx, t, s, func(ctx context.Context) error {
		return e.cs.CoreV1().Pods(namespace).Delete(ctx, skube.PodName(s.ID()), metav1.DeleteOptions{})
	})
}
