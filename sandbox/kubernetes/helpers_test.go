package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
)

const testNS = "sandboxes"

var testTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// fakeAgent answers the frames of exec'd agent proxies: a ping with an
// empty result. It counts the execs and can refuse the first ones (no
// socket yet: the stream ends at once, as the proxy's does).
type fakeAgent struct {
	mu      sync.Mutex
	execs   int
	refuse  int // the first refuse execs end at once
	cmds    [][]string
	servers sync.WaitGroup
}

func (a *fakeAgent) exec(_ context.Context, ns, pod, container string, cmd []string) (io.ReadWriteCloser, error) {
	a.mu.Lock()
	a.execs++
	a.cmds = append(a.cmds, cmd)
	refuse := a.execs <= a.refuse
	a.mu.Unlock()
	host, agent := net.Pipe()
	a.servers.Go(func() {
		defer agent.Close()
		if refuse {
			return
		}
		var hdr [proto.HeaderSize]byte
		for {
			body, _, err := proto.ReadFrame(agent, &hdr)
			if err != nil {
				return
			}
			var f proto.Frame
			if json.Unmarshal(body, &f) != nil {
				return
			}
			out, _ := proto.EncodeFrame(&proto.Frame{ID: f.ID, Result: json.RawMessage("{}")})
			if _, err := agent.Write(out); err != nil {
				return
			}
		}
	})
	return host, nil
}

func (a *fakeAgent) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.execs
}

// newTestRuntime is a runtime on a fake clientset with a fake agent; cfg
// may change its Config first. Its Close and the agent's end run at the
// test's end.
func newTestRuntime(t *testing.T, cs *fake.Clientset, agent *fakeAgent, cfg func(*Config)) *Runtime {
	t.Helper()
	c := Config{
		Client: cs, Exec: agent.exec, Namespace: testNS, AgentImage: "registry.example/sandboxd-agent:v1",
		NetworkPolicyEnforced: true, Logger: slog.New(slog.DiscardHandler),
		LookupHost: func(_ context.Context, host string) ([]netip.Addr, error) {
			if host == "pypi.org" {
				return []netip.Addr{netip.MustParseAddr("151.101.0.223"), netip.MustParseAddr("151.101.64.223")}, nil
			}
			return nil, errors.New("no such host")
		},
	}
	if cfg != nil {
		cfg(&c)
	}
	r, err := New(t.Context(), c)
	require.NoError(t, err)
	t.Cleanup(func() {
		require.NoError(t, r.Close())
		agent.servers.Wait()
	})
	return r
}

// testSpec is a session spec as the manager makes it.
func testSpec(t *testing.T, id string, o sandbox.SessionOptions, poolKey string) sandbox.Spec {
	t.Helper()
	o, err := o.Resolve(sandbox.SessionOptions{})
	require.NoError(t, err)
	cmd, err := sandbox.AgentCommand(o)
	require.NoError(t, err)
	return sandbox.Spec{SessionID: id, Options: o, Labels: sandbox.SessionLabels(id, o, poolKey, testTime), Command: cmd, Pooled: poolKey != ""}
}

// kubelet plays the node's part for the Pods of a fake clientset: it sets
// a Pod's status to Running once it is created.
func runPods(t *testing.T, cs *fake.Clientset) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := cs.CoreV1().Pods(testNS).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok || pod.Status.Phase != "" || pod.DeletionTimestamp != nil {
				continue
			}
			setRunning(ctx, cs, pod)
		}
	})
	t.Cleanup(func() { cancel(); w.Stop(); wg.Wait() })
}

func setRunning(ctx context.Context, cs *fake.Clientset, pod *corev1.Pod) {
	pod = pod.DeepCopy()
	pod.Status.Phase = corev1.PodRunning
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: ContainerName, Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(testTime)}},
	}}
	_, _ = cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
}

// podStatus sets the status of a session's Pod.
func podStatus(t *testing.T, cs *fake.Clientset, id string, set func(*corev1.Pod)) {
	t.Helper()
	pod, err := cs.CoreV1().Pods(testNS).Get(t.Context(), PodName(id), metav1.GetOptions{})
	require.NoError(t, err)
	set(pod)
	_, err = cs.CoreV1().Pods(testNS).UpdateStatus(t.Context(), pod, metav1.UpdateOptions{})
	require.NoError(t, err)
}

// newClientset is a fake clientset with the test namespace.
func newClientset(objs ...runtime.Object) *fake.Clientset {
	return fake.NewClientset(append([]runtime.Object{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: testNS}}}, objs...)...)
}
