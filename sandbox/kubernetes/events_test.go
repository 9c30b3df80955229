package kubernetes

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxd/sandboxd/sandbox"
)

// onPodCreated runs f on each Pod of the fake clientset once it is
// created, as a kubelet or scheduler would react to it.
func onPodCreated(t *testing.T, cs *fake.Clientset, f func(ctx context.Context, pod *corev1.Pod)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := cs.CoreV1().Pods(testNS).Watch(ctx, metav1.ListOptions{})
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && ev.Type == "ADDED" {
				f(ctx, pod)
			}
		}
	})
	t.Cleanup(func() { cancel(); w.Stop(); wg.Wait() })
}

// warn records a Warning Event about a Pod as the kubelet does.
func warn(ctx context.Context, cs *fake.Clientset, name string, uid types.UID, reason, msg string) {
	_, _ = cs.CoreV1().Events(testNS).Create(ctx, &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: name + "." + reason, Namespace: testNS},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: testNS, Name: name, UID: uid, APIVersion: "v1"},
		Reason:         reason, Message: msg, Type: corev1.EventTypeWarning, Count: 1,
		Source: corev1.EventSource{Component: "kubelet", Host: "node-1"},
	}, metav1.CreateOptions{})
}

// TestStartFailsOnTerminalEvent: a sandbox the node's container runtime
// cannot create (its RuntimeClass handler is missing: the kubelet only
// retries) ends the start at once with the kubelet's reason and message,
// not at the deadline; nothing is left.
func TestStartFailsOnTerminalEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newClientset()
		const msg = `Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for "runsc" is configured`
		onPodCreated(t, cs, func(ctx context.Context, pod *corev1.Pod) {
			warn(ctx, cs, pod.Name, pod.UID, "FailedCreatePodSandBox", msg)
		})
		r := newTestRuntime(t, cs, &fakeAgent{}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		began := time.Now()
		_, err := r.Start(ctx, testSpec(t, testSession, sandbox.SessionOptions{}, ""))
		require.Error(t, err)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "cannot run: FailedCreatePodSandBox: "+msg)
		assert.Less(t, time.Since(began), time.Minute, "at once, not at the deadline")
		assertNothingLeft(t, r)
	})
}

// TestStartDeadlineNamesLastEvent: an Event the kubelet or scheduler may
// get past (no node fits yet, a mount that may appear) does not end the
// start; at the deadline the error names the last one. An Event of
// another Pod of the same name (an older UID) is not this Pod's.
func TestStartDeadlineNamesLastEvent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newClientset()
		onPodCreated(t, cs, func(ctx context.Context, pod *corev1.Pod) {
			warn(ctx, cs, pod.Name, "an-older-pod", "FailedCreatePodSandBox", `no runtime for "runsc" is configured`)
			warn(ctx, cs, pod.Name, pod.UID, "FailedScheduling", "0/3 nodes are available: 3 Insufficient memory.")
		})
		r := newTestRuntime(t, cs, &fakeAgent{}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		_, err := r.Start(ctx, testSpec(t, testSession, sandbox.SessionOptions{}, ""))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "last event FailedScheduling: 0/3 nodes are available: 3 Insufficient memory.")
		assert.NotContains(t, err.Error(), "runsc")
		assertNothingLeft(t, r)
	})
}

// TestStartFailsOnInitContainer: an init container that failed (the
// skills' unpacking) or cannot start ends the start at once, naming it and
// what it said.
func TestStartFailsOnInitContainer(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   corev1.ContainerState
		want string
	}{
		{"failed", corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error", Message: "skills archive: entry \"/x\" is not a clean relative path"}},
			`its init container sandboxd-skills failed with exit code 1: skills archive: entry "/x" is not a clean relative path`},
		{"cannot start", corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: `configmap "sbx-x" not found`}},
			`its init container sandboxd-skills could not start (CreateContainerConfigError: configmap "sbx-x" not found)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				cs := newClientset()
				onPodCreated(t, cs, func(ctx context.Context, pod *corev1.Pod) {
					pod = pod.DeepCopy()
					pod.Status.Phase = corev1.PodPending
					pod.Status.InitContainerStatuses = []corev1.ContainerStatus{{Name: skillsInitName, State: tc.st}}
					_, _ = cs.CoreV1().Pods(testNS).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
				})
				r := newTestRuntime(t, cs, &fakeAgent{}, nil)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				_, err := r.Start(ctx, testSpec(t, testSession, sandbox.SessionOptions{}, ""))
				require.Error(t, err)
				require.NotErrorIs(t, err, context.DeadlineExceeded)
				assert.Contains(t, err.Error(), tc.want)
			})
		})
	}
}

func TestEventTerminal(t *testing.T) {
	for _, tc := range []struct {
		reason, msg string
		want        bool
	}{
		{"FailedCreatePodSandBox", `failed to get sandbox runtime: no runtime for "kata" is configured`, true},
		{"FailedCreatePodSandBox", `failed to find runtime handler kata from runtime list`, true},
		{"FailedCreatePodSandBox", "Failed to create pod sandbox: can't set `spec.hostUsers: false`, runtime does not support user namespaces", true},
		{"FailedCreatePodSandBox", `plugin type="bridge" failed (add): failed to allocate for range 0`, false},
		{"FailedMount", `MountVolume.SetUp failed for volume "skills-archive" : configmap "sbx-x" not found`, false},
		{"FailedScheduling", `0/1 nodes are available: 1 node(s) had untolerated taint`, false},
	} {
		assert.Equal(t, tc.want, podEvent{reason: tc.reason, message: tc.msg}.terminal(), "%s %s", tc.reason, tc.msg)
	}
	assert.Equal(t, "FailedMount: m (3 times)", podEvent{reason: "FailedMount", message: "m\n", count: 3}.String())
}
