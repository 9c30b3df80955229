package kubernetes

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// TestStartRunsTheAgentOverExec: Start creates the NetworkPolicy and the
// Pod, waits for Running on the watch, and hands out an exec stream of the
// agent proxy only once the agent answered a ping on it (here the first
// two execs find no socket yet).
func TestStartRunsTheAgentOverExec(t *testing.T) {
	cs := newClientset()
	runPods(t, cs)
	agent := &fakeAgent{refuse: 2}
	r := newTestRuntime(t, cs, agent, nil)
	rwc, err := r.Start(t.Context(), testSpec(t, testSession, sandbox.SessionOptions{}, ""))
	require.NoError(t, err)
	defer rwc.Close()
	assert.Equal(t, 3, agent.count())
	assert.Equal(t, sandbox.ProxyCommand(), agent.cmds[2])
	st, err := r.Inspect(t.Context(), testSession)
	require.NoError(t, err)
	assert.True(t, st.Running)
	_, err = cs.NetworkingV1().NetworkPolicies(testNS).Get(t.Context(), PodName(testSession), metav1.GetOptions{})
	require.NoError(t, err)

	res, err := r.List(t.Context())
	require.NoError(t, err)
	require.Len(t, res, 2)
	kinds := map[sandbox.ResourceKind]sandbox.Resource{}
	for _, x := range res {
		kinds[x.Kind] = x
		assert.Equal(t, testSession, x.SessionID)
	}
	assert.True(t, kinds[sandbox.KindContainer].Running)
	assert.False(t, kinds[sandbox.KindContainer].Pooled)
	assert.NotEmpty(t, kinds[sandbox.KindContainer].Labels[sandbox.LabelOptions])

	// Connect opens another stream through the proxy.
	c, err := r.Connect(t.Context(), testSession)
	require.NoError(t, err)
	require.NoError(t, c.Close())
}

// TestStartPodNeverRuns: a Pod no node runs ends the start at ctx's
// deadline, naming its state, and nothing of the session is left. (In a
// synctest bubble: the 30 s deadline passes on the fake clock.)
func TestStartPodNeverRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cs := newClientset()
		r := newTestRuntime(t, cs, &fakeAgent{}, nil)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel()
		began := time.Now()
		_, err := r.Start(ctx, testSpec(t, testSession, sandbox.SessionOptions{}, ""))
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Contains(t, err.Error(), "did not run (not scheduled)")
		assert.Equal(t, 30*time.Second, time.Since(began))
		assertNothingLeft(t, r)
	})
}

// TestStartImagePullFails: a container whose image cannot be pulled ends
// the start at once with sandbox.ErrImageNotFound, and nothing is left.
func TestStartImagePullFails(t *testing.T) {
	cs := newClientset()
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, Image: pod.Spec.Containers[0].Image,
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: "not found"}}}}
		return false, nil, nil
	})
	r := newTestRuntime(t, cs, &fakeAgent{}, nil)
	_, err := r.Start(t.Context(), testSpec(t, testSession, sandbox.SessionOptions{Image: "nope:1"}, ""))
	require.ErrorIs(t, err, sandbox.ErrImageNotFound)
	assert.Contains(t, err.Error(), "ErrImagePull")
	assertNothingLeft(t, r)
}

func assertNothingLeft(t *testing.T, r *Runtime) {
	t.Helper()
	res, err := r.List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, res)
}

// TestClaimRace: two runtimes (two daemons) claim one pooled Pod at once;
// the API server (here a reactor) answers the second patch with 409
// Conflict: exactly one wins, the other gets sandbox.ErrClaimed. A repeated
// claim by the winner is no error.
func TestClaimRace(t *testing.T) {
	cs := newClientset()
	runPods(t, cs)
	a := newTestRuntime(t, cs, &fakeAgent{}, nil)
	b := newTestRuntime(t, cs, &fakeAgent{}, nil)
	rwc, err := a.Start(t.Context(), testSpec(t, testSession, sandbox.SessionOptions{}, "pool/"+`{"image":"x"}`))
	require.NoError(t, err)
	defer rwc.Close()

	// Both read the Pod before either patches (both reads answer the
	// pooled Pod as it is now); the second patch meets the first one's
	// resourceVersion. (The fake serializes its reactors, so the reads
	// are served from a snapshot rather than held at a barrier.)
	pooled, err := cs.CoreV1().Pods(testNS).Get(t.Context(), PodName(testSession), metav1.GetOptions{})
	require.NoError(t, err)
	var gets, patches int
	cs.PrependReactor("get", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		gets++
		if gets <= 2 {
			return true, pooled.DeepCopy(), nil
		}
		return false, nil, nil
	})
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		if patches == 2 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, PodName(testSession), errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for i, r := range []*Runtime{a, b} {
		wg.Go(func() { errs[i] = r.Claim(t.Context(), testSession) })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		if err == nil {
			won++
		} else {
			require.ErrorIs(t, err, sandbox.ErrClaimed)
		}
	}
	assert.Equal(t, 1, won, "errors: %v", errs)
	assert.Equal(t, 2, patches)
	res, err := a.List(t.Context())
	require.NoError(t, err)
	for _, x := range res {
		assert.False(t, x.Pooled)
	}
	winner := a
	if errs[0] != nil {
		winner = b
	}
	assert.NoError(t, winner.Claim(t.Context(), testSession))
}

// TestClaimRetriesAStatusConflict: a 409 caused by the kubelet writing
// the status (the Pod is still pooled) is retried, not taken for a rival.
func TestClaimRetriesAStatusConflict(t *testing.T) {
	cs := newClientset()
	runPods(t, cs)
	r := newTestRuntime(t, cs, &fakeAgent{}, nil)
	rwc, err := r.Start(t.Context(), testSpec(t, testSession, sandbox.SessionOptions{}, "p"))
	require.NoError(t, err)
	defer rwc.Close()
	patches := 0
	cs.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		if patches == 1 {
			return true, nil, apierrors.NewConflict(schema.GroupResource{Resource: "pods"}, PodName(testSession), errors.New("modified"))
		}
		return false, nil, nil
	})
	require.NoError(t, r.Claim(t.Context(), testSession))
	assert.Equal(t, 2, patches)
	require.ErrorIs(t, r.Claim(t.Context(), "0b6f7c1e-0000-4f0e-9d2a-7c4e1f2a3b4c"), sandbox.ErrNotFound)
}

// TestRemoveIsIdempotent: Remove deletes the Pod and the NetworkPolicy;
// removing what is gone (NotFound) is success.
func TestRemoveIsIdempotent(t *testing.T) {
	cs := newClientset()
	runPods(t, cs)
	r := newTestRuntime(t, cs, &fakeAgent{}, nil)
	require.NoError(t, r.Remove(t.Context(), testSession))
	rwc, err := r.Start(t.Context(), testSpec(t, testSession, sandbox.SessionOptions{}, ""))
	require.NoError(t, err)
	require.NoError(t, r.Remove(t.Context(), testSession))
	// Its stream ended with it, closed on the daemon's side (the fake
	// agent's end would read as EOF).
	_, err = io.ReadAll(rwc)
	require.ErrorIs(t, err, io.ErrClosedPipe)
	assertNothingLeft(t, r)
	require.NoError(t, r.Remove(t.Context(), testSession))
	_, err = r.Inspect(t.Context(), testSession)
	require.ErrorIs(t, err, sandbox.ErrNotFound)
	require.Error(t, r.Remove(t.Context(), ""))
}

// TestPodEndClosesItsStreams: a Pod deleted, evicted (disk), OOM-killed
// or past its deadline ends its session's agent streams through the
// watch, so the manager inspects it at once; Inspect then gives the reason.
func TestPodEndClosesItsStreams(t *testing.T) {
	terminated := func(code int32, reason string) func(*corev1.Pod) {
		return func(p *corev1.Pod) {
			p.Status.Phase = corev1.PodFailed
			p.Status.ContainerStatuses[0].State = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason}}
		}
	}
	for _, tc := range []struct {
		name   string
		end    func(*corev1.Pod)
		delete bool
		want   string
	}{
		{name: "deleted", delete: true},
		{name: "evicted for disk", end: func(p *corev1.Pod) {
			terminated(137, "Error")(p)
			p.Status.Reason, p.Status.Message = "Evicted", "Pod ephemeral local storage usage exceeds the total limit of containers 10Gi."
		}, want: "exited with code 137 (evicted by Kubernetes: disk limit (its ephemeral-storage limit or a volume's size limit)): Pod ephemeral local storage"},
		{name: "oom killed", end: terminated(137, "OOMKilled"), want: "exited with code 137 (killed: out of memory; raise limits.memory)"},
		{name: "deadline", end: func(p *corev1.Pod) {
			terminated(143, "Error")(p)
			p.Status.Reason, p.Status.Message = "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
		}, want: "exited with code 143 (past its maximum lifetime (activeDeadlineSeconds)): Pod was active"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newClientset()
			runPods(t, cs)
			r := newTestRuntime(t, cs, &fakeAgent{}, nil)
			rwc, err := r.Start(t.Context(), testSpec(t, testSession, sandbox.SessionOptions{}, ""))
			require.NoError(t, err)
			defer rwc.Close()
			if tc.delete {
				require.NoError(t, cs.CoreV1().Pods(testNS).Delete(t.Context(), PodName(testSession), metav1.DeleteOptions{}))
			} else {
				podStatus(t, cs, testSession, tc.end)
			}
			// Returns when the watch closed the stream on the daemon's side
			// (the fake agent's end would read as EOF).
			_, err = io.ReadAll(rwc)
			require.ErrorIs(t, err, io.ErrClosedPipe)
			st, err := r.Inspect(t.Context(), testSession)
			if tc.delete {
				require.ErrorIs(t, err, sandbox.ErrNotFound)
				return
			}
			require.NoError(t, err)
			assert.False(t, st.Running)
			assert.Contains(t, st.Describe(), tc.want)
		})
	}
}

// TestStatusOf maps Pod states to sandbox.Status.
func TestStatusOf(t *testing.T) {
	ctr := func(s corev1.ContainerState) []corev1.ContainerStatus {
		return []corev1.ContainerStatus{{Name: ContainerName, State: s}}
	}
	term := func(code int32, reason string) corev1.ContainerState {
		return corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason,
			StartedAt: metav1.NewTime(testTime), FinishedAt: metav1.NewTime(testTime.Add(time.Minute))}}
	}
	now := metav1.NewTime(testTime)
	for name, tc := range map[string]struct {
		status  corev1.PodStatus
		deleted bool
		want    sandbox.Status
		says    string
	}{
		"running": {status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: ctr(corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}})},
			want: sandbox.Status{Running: true, StartedAt: testTime}},
		"being deleted": {status: corev1.PodStatus{Phase: corev1.PodRunning, ContainerStatuses: ctr(corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}})},
			deleted: true, says: "its Pod is being deleted"},
		"oom": {status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: ctr(term(137, "OOMKilled"))},
			says: "code 137 (killed: out of memory; raise limits.memory)"},
		"sigkill": {status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: ctr(term(137, "Error"))}, says: "code 137 (SIGKILL"},
		"sigterm": {status: corev1.PodStatus{Phase: corev1.PodFailed, ContainerStatuses: ctr(term(143, "Error"))}, says: "code 143 (SIGTERM"},
		"evicted, memory pressure": {status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "The node was low on resource: memory."},
			says: "(evicted by Kubernetes): The node was low on resource: memory."},
		"evicted, emptyDir": {status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "Evicted", Message: "Usage of EmptyDir volume \"workspace\" exceeds the limit \"10Gi\"."},
			says: "disk limit"},
		"deadline": {status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "DeadlineExceeded"}, says: "activeDeadlineSeconds"},
		"image pull": {status: corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: ctr(corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: "Back-off pulling"}})},
			says: "ImagePullBackOff: Back-off pulling"},
	} {
		t.Run(name, func(t *testing.T) {
			pod := &corev1.Pod{Status: tc.status}
			if tc.deleted {
				pod.DeletionTimestamp = &now
			}
			st := statusOf(pod)
			if tc.says == "" {
				assert.Equal(t, tc.want, st)
				return
			}
			assert.False(t, st.Running)
			assert.Contains(t, st.Describe(), tc.says)
		})
	}
}

// TestUnsupportedRefused: what the runtime does not do is refused with a
// *sandbox.UnsupportedError naming Kubernetes before anything is made.
func TestUnsupportedRefused(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     sandbox.SessionOptions
		enforced bool
		feature  string
	}{
		{name: "mcp sidecars", opts: sandbox.SessionOptions{MCPServers: []sandbox.MCPServer{{Name: "fs", Image: "mcp/fs"}}}, enforced: true, feature: "mcp_servers"},
		{name: "disk quota", opts: sandbox.SessionOptions{Limits: sandbox.Limits{DiskQuota: 1 << 30}}, enforced: true, feature: "limits.disk_quota"},
		{name: "editable paths", opts: sandbox.SessionOptions{EditablePaths: []string{"/testbed"}}, enforced: true, feature: "editable_paths"},
		{name: "inject", opts: sandbox.SessionOptions{Network: sandbox.NetworkBridge, AllowHosts: []string{"a.test"}, Inject: []sandbox.InjectRule{{Host: "a.test", Header: "X", Value: "v"}}}, enforced: true, feature: "inject (secrets injected on the way out)"},
		{name: "image user", opts: sandbox.SessionOptions{User: sandbox.UserImage}, enforced: true, feature: "user: image"},
		{name: "shell init", opts: sandbox.SessionOptions{ShellInit: sandbox.ShellInitImage}, enforced: true, feature: "shell_init"},
		{name: "entrypoint", opts: sandbox.SessionOptions{Entrypoint: sandbox.EntrypointImage}, enforced: true, feature: "entrypoint"},
		{name: "internal network", opts: sandbox.SessionOptions{Network: sandbox.NetworkInternal}, enforced: true, feature: "network: internal"},
		{name: "network none, not enforced", opts: sandbox.SessionOptions{}, feature: "network: none"},
		{name: "allow_hosts by name", opts: sandbox.SessionOptions{Network: sandbox.NetworkBridge, AllowHosts: []string{"10.0.0.1", "*.pypi.org"}}, enforced: true, feature: "allow_hosts by host name"},
		{name: "allow_hosts, not enforced", opts: sandbox.SessionOptions{Network: sandbox.NetworkBridge, AllowHosts: []string{"10.0.0.1"}}, feature: "network: bridge with allow_hosts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newClientset()
			r := newTestRuntime(t, cs, &fakeAgent{}, func(c *Config) { c.NetworkPolicyEnforced = tc.enforced })
			spec := testSpec(t, testSession, tc.opts, "")
			err := r.CheckOptions(spec.Options)
			var ue *sandbox.UnsupportedError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, Name, ue.Runtime)
			assert.Contains(t, ue.Feature, tc.feature)
			require.ErrorIs(t, err, sandbox.ErrUnsupported)
			before := len(cs.Actions())
			_, err = r.Start(t.Context(), spec)
			require.ErrorIs(t, err, sandbox.ErrUnsupported)
			assert.Len(t, cs.Actions(), before, "Start made API calls: %v", cs.Actions()[before:])
		})
	}
}

// TestRuntimeClassChecked: a session's Runtime must name a RuntimeClass
// the cluster has; a missing one is refused before anything is made.
func TestRuntimeClassChecked(t *testing.T) {
	cs := newClientset()
	r := newTestRuntime(t, cs, &fakeAgent{}, nil)
	err := r.CheckRuntime(t.Context(), "gvisor")
	var oe *sandbox.OptionsError
	require.ErrorAs(t, err, &oe)
	assert.Contains(t, err.Error(), `no RuntimeClass "gvisor"`)
	_, err = r.Start(t.Context(), testSpec(t, testSession, sandbox.SessionOptions{Runtime: "gvisor"}, ""))
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	assertNothingLeft(t, r)
	require.NoError(t, r.CheckRuntime(t.Context(), ""))
}

// TestConfigChecked: New refuses a Config it cannot work with, naming
// every problem.
func TestConfigChecked(t *testing.T) {
	_, err := New(t.Context(), Config{Client: newClientset(), Exec: (&fakeAgent{}).exec, Namespace: "Bad_NS", AgentVolume: "copy",
		SeccompProfile: "/etc/x.json", Labels: map[string]string{"sandboxd.session": "x"}})
	require.Error(t, err)
	for _, want := range []string{"namespace", "no agent image", "agent volume", "seccomp profile", "set by sandboxd itself"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = New(t.Context(), Config{Exec: (&fakeAgent{}).exec, Namespace: "x", AgentImage: "a"})
	require.ErrorContains(t, err, "no REST config")
}
