package kubetest_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes/kubetest"
)

var (
	docker    *client.Client
	binary    string
	testImage string
	runID     string
)

const (
	labelRun   = "sandboxd.kubetest.run"
	agentImage = "registry.invalid/sandboxd-agent:test"
	ns         = "sbx"
)

func TestMain(m *testing.M) {
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "kubetest:", err)
		code = 1
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("kubetest: skipped with -short (needs Docker)")
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var err error
	docker, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	defer docker.Close()
	if _, err := docker.Ping(ctx); err != nil {
		fmt.Println("kubetest: skipped, no Docker engine:", err)
		return 0, nil
	}
	tmp, err := os.MkdirTemp("", "kubetest-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	if binary, err = testenv.BuildBinary(ctx, tmp); err != nil {
		return 0, err
	}
	if testImage, err = testenv.EnsureTestImage(ctx, docker); err != nil {
		return 0, err
	}
	runID = uuid.NewString()[:12]
	code := m.Run()
	if left := testenv.Leftovers(context.Background(), docker, labelRun, runID); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "kubetest: left behind: %s\n", strings.Join(left, ", "))
		code = 1
	}
	docker.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "kubetest: goroutine leak:", err)
			code = 1
		}
	}
	return code, nil
}

func startNode(t *testing.T) (*fake.Clientset, *kubetest.Node) {
	t.Helper()
	cs := fake.NewClientset()
	node, err := kubetest.StartNode(t.Context(), kubetest.NodeConfig{
		Client: cs, Docker: docker, Namespace: ns, Name: "node-" + uuid.NewString()[:8],
		AgentBinary: binary, AgentImage: agentImage, Labels: map[string]string{labelRun: runID},
		RegisterNode: true,
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, node.Stop(context.Background())) })
	return cs, node
}

// pod is shaped like the Kubernetes runtime's: restricted security
// context, the agent image volume, memory and disk emptyDirs.
func pod(node, name string, cmd ...string) *corev1.Pod {
	t := true
	f := false
	uid := int64(1000)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-0123456789-" + name)},
		Spec: corev1.PodSpec{
			NodeName:      node,
			RestartPolicy: corev1.RestartPolicyNever,
			SecurityContext: &corev1.PodSecurityContext{RunAsNonRoot: &t, RunAsUser: &uid, RunAsGroup: &uid, FSGroup: &uid,
				SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}},
			Containers: []corev1.Container{{
				Name: "sandbox", Image: testImage, Command: cmd,
				SecurityContext: &corev1.SecurityContext{AllowPrivilegeEscalation: &f, ReadOnlyRootFilesystem: &t,
					Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}},
				Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("128Mi")}},
				VolumeMounts: []corev1.VolumeMount{
					{Name: "agent", MountPath: "/.sandboxd", ReadOnly: true},
					{Name: "tmp", MountPath: "/tmp"},
					{Name: "workspace", MountPath: "/workspace"},
				},
			}},
			Volumes: []corev1.Volume{
				{Name: "agent", VolumeSource: corev1.VolumeSource{Image: &corev1.ImageVolumeSource{Reference: agentImage}}},
				{Name: "tmp", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
					Medium: corev1.StorageMediumMemory, SizeLimit: resource.NewQuantity(8<<20, resource.BinarySI)}}},
				{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
		},
	}
}

// waitPod waits (on a watch) until cond holds for the Pod.
func waitPod(t *testing.T, cs *fake.Clientset, name string, cond func(*corev1.Pod) bool) *corev1.Pod {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()})
	require.NoError(t, err)
	defer w.Stop()
	if p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); err == nil && cond(p) {
		return p
	}
	for {
		select {
		case ev := <-w.ResultChan():
			if p, ok := ev.Object.(*corev1.Pod); ok && ev.Type != watch.Deleted && p.Name == name && cond(p) {
				return p
			}
		case <-ctx.Done():
			p, _ := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
			require.FailNow(t, "pod never got there", "%s: %+v", name, p.Status)
		}
	}
}

func running(p *corev1.Pod) bool { return p.Status.Phase == corev1.PodRunning }

func ended(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed || p.Status.Phase == corev1.PodSucceeded
}

// execOut runs cmd in the Pod through the node's API-server endpoint.
func execOut(t *testing.T, node *kubetest.Node, pod string, cmd ...string) (string, error) {
	t.Helper()
	ex, err := kubernetes.NewExec(node.Exec().RESTConfig())
	require.NoError(t, err)
	rwc, err := ex(t.Context(), ns, pod, "sandbox", cmd)
	if err != nil {
		return "", err
	}
	defer rwc.Close()
	b, err := io.ReadAll(rwc)
	return string(b), err
}

func TestNodeRunsPodAsSpecified(t *testing.T) {
	cs, node := startNode(t)
	_, err := cs.CoreV1().Pods(ns).Create(t.Context(), pod(node.Name(), "p1", "sleep", "600"), metav1.CreateOptions{})
	require.NoError(t, err)
	p := waitPod(t, cs, "p1", running)
	require.Len(t, p.Status.ContainerStatuses, 1)
	assert.NotNil(t, p.Status.ContainerStatuses[0].State.Running)
	id := node.ContainerID(ns, "p1")
	require.NotEmpty(t, id)

	insp, err := docker.ContainerInspect(t.Context(), id)
	require.NoError(t, err)
	assert.Equal(t, "1000:1000", insp.Config.User)
	assert.True(t, insp.HostConfig.ReadonlyRootfs)
	assert.Equal(t, []string{"ALL"}, []string(insp.HostConfig.CapDrop))
	assert.Contains(t, insp.HostConfig.SecurityOpt, "no-new-privileges")
	assert.Equal(t, int64(128<<20), insp.HostConfig.Memory)
	assert.Equal(t, int64(500_000_000), insp.HostConfig.NanoCPUs)
	assert.Equal(t, "none", string(insp.HostConfig.NetworkMode))
	assert.Equal(t, runID, insp.Config.Labels[labelRun])

	out, err := execOut(t, node, "p1", "sh", "-c",
		`id -u; id -g; grep CapEff /proc/self/status; touch /x 2>&1 || echo ro-root;
		 echo hi > /workspace/w && cat /workspace/w; echo t > /tmp/t && cat /tmp/t;
		 /.sandboxd/sandboxd version >/dev/null && echo agent-runs; touch /.sandboxd/x 2>/dev/null || echo agent-ro;
		 df -k /tmp | tail -1 | awk '{print $2}'`)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 10, out)
	assert.Equal(t, "1000", lines[0])
	assert.Equal(t, "1000", lines[1])
	assert.Equal(t, "CapEff:\t0000000000000000", lines[2])
	assert.Contains(t, lines[3], "Read-only file system")
	assert.Equal(t, "ro-root", lines[4])
	assert.Equal(t, "hi", lines[5])
	assert.Equal(t, "t", lines[6])
	assert.Equal(t, "agent-runs", lines[7])
	assert.Equal(t, "agent-ro", lines[8])
	assert.Equal(t, "8192", lines[9], "/tmp is a tmpfs of its sizeLimit")

	_, err = execOut(t, node, "p1", "sh", "-c", "echo oops >&2; exit 4")
	require.ErrorContains(t, err, "exit code 4")
	require.ErrorContains(t, err, "oops")

	_, err = execOut(t, node, "nope", "true")
	require.ErrorContains(t, err, "not running on node")

	// Deleting the Pod removes its container.
	require.NoError(t, cs.CoreV1().Pods(ns).Delete(t.Context(), "p1", metav1.DeleteOptions{}))
	require.Eventually(t, func() bool {
		_, err := docker.ContainerInspect(t.Context(), id)
		return cerrdefs.IsNotFound(err)
	}, 30*time.Second, 50*time.Millisecond)
}

func TestNodeReportsEnds(t *testing.T) {
	cs, node := startNode(t)
	for _, c := range []struct {
		name   string
		cmd    []string
		phase  corev1.PodPhase
		code   int32
		reason string
		mutate func(*corev1.Pod)
	}{
		{"ok", []string{"true"}, corev1.PodSucceeded, 0, "Completed", nil},
		{"fails", []string{"sh", "-c", "exit 3"}, corev1.PodFailed, 3, "Error", nil},
		{"oom", []string{"sh", "-c", "x=a; while :; do x=$x$x; done"}, corev1.PodFailed, 137, "OOMKilled", func(p *corev1.Pod) {
			p.Spec.Containers[0].Resources.Limits[corev1.ResourceMemory] = resource.MustParse("16Mi")
		}},
		{"deadline", []string{"sleep", "600"}, corev1.PodFailed, 137, "Error", func(p *corev1.Pod) {
			d := int64(1)
			p.Spec.ActiveDeadlineSeconds = &d
		}},
	} {
		p := pod(node.Name(), c.name, c.cmd...)
		if c.mutate != nil {
			c.mutate(p)
		}
		_, err := cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		require.NoError(t, err)
		got := waitPod(t, cs, c.name, ended)
		assert.Equal(t, c.phase, got.Status.Phase, c.name)
		require.Len(t, got.Status.ContainerStatuses, 1, c.name)
		term := got.Status.ContainerStatuses[0].State.Terminated
		require.NotNil(t, term, c.name)
		assert.Equal(t, c.code, term.ExitCode, c.name)
		assert.Equal(t, c.reason, term.Reason, c.name)
		if c.name == "deadline" {
			assert.Equal(t, "DeadlineExceeded", got.Status.Reason)
		}
	}
}

func TestNodeRefusesWhatItCannotRun(t *testing.T) {
	cs, node := startNode(t)
	bad := pod(node.Name(), "hp", "true")
	bad.Spec.Volumes = append(bad.Spec.Volumes, corev1.Volume{Name: "host", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}})
	bad.Spec.Containers[0].VolumeMounts = append(bad.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "host", MountPath: "/host"})
	// A configMap volume is run (a session's skills), but not without its ConfigMap.
	noCM := pod(node.Name(), "cm", "true")
	noCM.Spec.Volumes = append(noCM.Spec.Volumes, corev1.Volume{Name: "cfg", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "x"}}}})
	noCM.Spec.Containers[0].VolumeMounts = append(noCM.Spec.Containers[0].VolumeMounts, corev1.VolumeMount{Name: "cfg", MountPath: "/cfg"})
	root := pod(node.Name(), "root", "true")
	zero := int64(0)
	root.Spec.SecurityContext.RunAsUser = &zero
	for _, p := range []*corev1.Pod{bad, noCM, root} {
		_, err := cs.CoreV1().Pods(ns).Create(t.Context(), p, metav1.CreateOptions{})
		require.NoError(t, err)
	}
	assert.Contains(t, waitPod(t, cs, "hp", ended).Status.Message, "only emptyDir, configMap and the agent image")
	assert.Contains(t, waitPod(t, cs, "cm", ended).Status.Message, `configmaps "x" not found`)
	assert.Contains(t, waitPod(t, cs, "root", ended).Status.Message, "non-root")
	ctrs, err := docker.ContainerList(t.Context(), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", kubetest.LabelNode+"="+node.Name()))})
	require.NoError(t, err)
	assert.Empty(t, ctrs, "nothing was made for a Pod that cannot run")
}
