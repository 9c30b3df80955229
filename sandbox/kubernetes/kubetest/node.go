package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	kclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	streaming "k8s.io/cri-streaming/pkg/streaming/remotecommand"
	utilexec "k8s.io/utils/exec"
)

// Labels the node puts on its Docker containers, besides NodeConfig.Labels.
const (
	LabelNode      = "kubetest.node"
	LabelNamespace = "kubetest.namespace"
	LabelPod       = "kubetest.pod"
	LabelPodUID    = "kubetest.pod-uid"
)

// NodeConfig configures a test node.
type NodeConfig struct {
	// Client is the cluster: the fake clientset, or a real API server's.
	Client kclient.Interface
	// Docker is the engine that runs the Pods.
	Docker *client.Client
	// Namespace is the namespace whose Pods the node runs.
	Namespace string
	// Name is the node's name (default "kubetest"): the node runs the Pods
	// whose spec.nodeName it is.
	Name string
	// AgentBinary is the host's static sandboxd binary. An image volume of
	// AgentImage, or an emptyDir that an init container of AgentImage fills,
	// becomes a read-only bind of it at <mountPath>/sandboxd (where the
	// agent image holds it): no registry here, and no image to pull.
	AgentBinary string
	// AgentImage is the agent image reference the runtime puts in Pods.
	AgentImage string
	// Labels go on every Docker object the node makes (the test run's
	// label, so the leftovers check finds what Stop failed to remove).
	Labels map[string]string
	// RegisterNode creates a Node object of this name whose kubelet
	// endpoint is the exec server's (for a real API server to proxy
	// pods/exec to it); Stop deletes it.
	RegisterNode bool
	// BindUnscheduled binds Pods that have no node to this one (there is
	// no scheduler). Off: the runtime pins its Pods (Config.Node).
	BindUnscheduled bool
	// RuntimeHandlers are the RuntimeClass handlers this node's container
	// runtime has. nil: a Pod's runtimeClassName is not realized (every
	// Pod runs with Docker's runc). Else a Pod whose RuntimeClass's handler
	// is not here does not run, as on a kubelet over containerd: a Warning
	// Event FailedCreatePodSandBox (`no runtime for "<handler>" is
	// configured`) on the Pod, which stays Pending with its container
	// waiting in ContainerCreating.
	RuntimeHandlers map[string]bool
	// Log receives what the node does; nil discards it.
	Log *slog.Logger
}

// Node is a Docker-backed stand-in for a kubelet, for tests only. It
// watches the Pods of a namespace, runs each Pod bound to it as one
// Docker container (the spec mapped as far as Docker can: see
// containerSpec), writes the Pod's status back (Running; terminated with
// exit code and reason; OOMKilled; DeadlineExceeded), removes the
// container when the Pod is deleted, and serves exec through an
// ExecServer. It is not a kubelet: no probes, no restarts, no eviction, no
// NetworkPolicy (Pods get no network at all), one container per Pod.
type Node struct {
	cfg      NodeConfig
	exec     *ExecServer
	stateDir string
	log      *slog.Logger

	mu   sync.Mutex
	pods map[types.UID]*podState

	cancel context.CancelFunc
	wg     sync.WaitGroup
	stop   sync.Once
}

type podState struct {
	ns, name  string
	uid       types.UID
	container string // the Pod's container name
	image     string // and its image
	id        string // Docker container ID; "" when none was made
	dirs      string // host folder of its disk emptyDirs
	deadline  *time.Timer
	timedOut  bool
	finished  bool
}

// StartNode starts a test node; Stop ends it.
func StartNode(ctx context.Context, cfg NodeConfig) (*Node, error) {
	switch {
	case cfg.Client == nil:
		return nil, errors.New("kubetest: NodeConfig.Client is required")
	case cfg.Docker == nil:
		return nil, errors.New("kubetest: NodeConfig.Docker is required")
	case cfg.Namespace == "":
		return nil, errors.New("kubetest: NodeConfig.Namespace is required")
	case cfg.AgentBinary == "":
		return nil, errors.New("kubetest: NodeConfig.AgentBinary is required")
	}
	if _, err := os.Stat(cfg.AgentBinary); err != nil {
		return nil, fmt.Errorf("kubetest: agent binary: %w", err)
	}
	if cfg.Name == "" {
		cfg.Name = "kubetest"
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	dir, err := os.MkdirTemp("", "kubetest-node-")
	if err != nil {
		return nil, fmt.Errorf("kubetest: %w", err)
	}
	n := &Node{cfg: cfg, stateDir: dir, log: cfg.Log.With("node", cfg.Name), pods: map[types.UID]*podState{}}
	if n.exec, err = NewExecServer(n, n.podUID); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if cfg.RegisterNode {
		if err := n.register(ctx); err != nil {
			n.exec.Close()
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	lctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancel = cancel
	synced := make(chan struct{})
	n.wg.Add(2)
	go func() { defer n.wg.Done(); n.watchDocker(lctx) }()
	go func() { defer n.wg.Done(); n.watchPods(lctx, synced) }()
	select {
	case <-synced:
		return n, nil
	case <-ctx.Done():
		_ = n.Stop(context.Background())
		return nil, ctx.Err()
	}
}

// Exec is the node's exec server (its kubelet and API-server endpoints).
func (n *Node) Exec() *ExecServer { return n.exec }

// Name is the node's name.
func (n *Node) Name() string { return n.cfg.Name }

// ContainerID is the Docker container running a Pod ("" if none).
func (n *Node) ContainerID(namespace, pod string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.pods {
		if p.ns == namespace && p.name == pod {
			return p.id
		}
	}
	return ""
}

// Stop ends the node: its watches, its exec server, every container it
// made (found by label, so also those of Pods it lost track of), its
// folders and its Node object.
func (n *Node) Stop(ctx context.Context) error {
	var errs []error
	n.stop.Do(func() {
		n.cancel()
		n.exec.Close()
		n.wg.Wait()
		n.mu.Lock()
		for _, p := range n.pods {
			if p.deadline != nil {
				p.deadline.Stop()
			}
		}
		n.mu.Unlock()
		ctrs, err := n.cfg.Docker.ContainerList(ctx, container.ListOptions{All: true,
			Filters: filters.NewArgs(filters.Arg("label", LabelNode+"="+n.cfg.Name))})
		errs = append(errs, err)
		for _, c := range ctrs {
			err := n.cfg.Docker.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
			if !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) { // gone, or going
				errs = append(errs, err)
			}
		}
		errs = append(errs, os.RemoveAll(n.stateDir))
		if n.cfg.RegisterNode {
			err := n.cfg.Client.CoreV1().Nodes().Delete(ctx, n.cfg.Name, metav1.DeleteOptions{})
			if !apierrors.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("kubetest: stopping node %s: %w", n.cfg.Name, err)
	}
	return nil
}

// register creates the Node object: its kubelet endpoint is the exec
// server's, at 127.0.0.1.
func (n *Node) register(ctx context.Context) error {
	port, err := strconv.Atoi(n.exec.Kubelet().Port())
	if err != nil {
		return fmt.Errorf("kubetest: kubelet port: %w", err)
	}
	nodes := n.cfg.Client.CoreV1().Nodes()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.cfg.Name, Labels: map[string]string{
		"kubernetes.io/hostname": n.cfg.Name, "kubernetes.io/os": "linux", LabelNode: n.cfg.Name,
	}}}
	created, err := nodes.Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("kubetest: registering node %s: %w", n.cfg.Name, err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("8Gi"),
		corev1.ResourcePods: resource.MustParse("110"), corev1.ResourceEphemeralStorage: resource.MustParse("50Gi"),
	}
	now := metav1.Now()
	created.Status = corev1.NodeStatus{
		Capacity: capacity, Allocatable: capacity,
		Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeInternalIP, Address: "127.0.0.1"},
			{Type: corev1.NodeHostName, Address: n.cfg.Name},
		},
		DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: int32(port)}},
		Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
			Reason: "KubeletReady", Message: "kubetest node", LastHeartbeatTime: now, LastTransitionTime: now}},
		NodeInfo: corev1.NodeSystemInfo{OperatingSystem: "linux", Architecture: "amd64",
			KubeletVersion: "kubetest", ContainerRuntimeVersion: "docker://"},
	}
	if _, err := nodes.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		_ = nodes.Delete(ctx, n.cfg.Name, metav1.DeleteOptions{})
		return fmt.Errorf("kubetest: node %s status: %w", n.cfg.Name, err)
	}
	return nil
}

// watchPods follows the namespace's Pods: a watch, then a list (a Pod
// made in between is seen twice; handling one is idempotent), again when
// the watch ends.
func (n *Node) watchPods(ctx context.Context, synced chan<- struct{}) {
	pods := n.cfg.Client.CoreV1().Pods(n.cfg.Namespace)
	first := true
	for ctx.Err() == nil {
		w, err := pods.Watch(ctx, metav1.ListOptions{})
		if err != nil {
			n.log.Warn("kubetest: watching pods", "err", err)
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		list, err := pods.List(ctx, metav1.ListOptions{})
		if err != nil {
			w.Stop()
			n.log.Warn("kubetest: listing pods", "err", err)
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		seen := map[types.UID]bool{}
		for i := range list.Items {
			seen[list.Items[i].UID] = true
			n.handle(ctx, &list.Items[i])
		}
		n.forgetMissing(ctx, seen)
		if first {
			close(synced)
			first = false
		}
		n.follow(ctx, w)
		w.Stop()
	}
}

// follow handles a watch's events until it ends or ctx is done (the fake
// clientset's watch does not end with ctx).
func (n *Node) follow(ctx context.Context, w watch.Interface) {
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				return
			}
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			switch ev.Type {
			case watch.Added, watch.Modified:
				n.handle(ctx, pod)
			case watch.Deleted:
				n.gone(ctx, pod.UID)
			}
		case <-ctx.Done():
			return
		}
	}
}

// forgetMissing drops the Pods the node runs that a fresh list no longer has.
func (n *Node) forgetMissing(ctx context.Context, seen map[types.UID]bool) {
	n.mu.Lock()
	var gone []types.UID
	for uid := range n.pods {
		if !seen[uid] {
			gone = append(gone, uid)
		}
	}
	n.mu.Unlock()
	for _, uid := range gone {
		n.gone(ctx, uid)
	}
}

// handle brings one Pod's container in line with the Pod.
func (n *Node) handle(ctx context.Context, pod *corev1.Pod) {
	if pod.Spec.NodeName == "" && n.cfg.BindUnscheduled && pod.DeletionTimestamp == nil {
		err := n.cfg.Client.CoreV1().Pods(pod.Namespace).Bind(ctx, &corev1.Binding{
			ObjectMeta: metav1.ObjectMeta{Name: pod.Name, Namespace: pod.Namespace, UID: pod.UID},
			Target:     corev1.ObjectReference{Kind: "Node", Name: n.cfg.Name},
		}, metav1.CreateOptions{})
		if err != nil {
			n.log.Warn("kubetest: binding", "pod", pod.Name, "err", err)
			return
		}
		pod = pod.DeepCopy()
		pod.Spec.NodeName = n.cfg.Name // the fake clientset does not apply a binding
	}
	if pod.Spec.NodeName != n.cfg.Name {
		return
	}
	if pod.DeletionTimestamp != nil {
		n.gone(ctx, pod.UID)
		// The kubelet ends a graceful deletion once the Pod's containers
		// are gone: with grace 0 the API server removes the object.
		err := n.cfg.Client.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{
			GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &pod.UID},
		})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			n.log.Warn("kubetest: finishing deletion", "pod", pod.Name, "err", err)
		}
		return
	}
	n.mu.Lock()
	_, known := n.pods[pod.UID]
	if !known {
		n.pods[pod.UID] = &podState{ns: pod.Namespace, name: pod.Name, uid: pod.UID}
	}
	n.mu.Unlock()
	if known || pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return
	}
	n.run(ctx, pod)
}

// run makes and starts a Pod's container and reports it Running, or
// reports why it cannot run.
func (n *Node) run(ctx context.Context, pod *corev1.Pod) {
	log := n.log.With("pod", pod.Name)
	if msg := n.sandboxFailure(ctx, pod); msg != "" {
		log.Warn("kubetest: pod sandbox not created", "why", msg)
		n.warn(ctx, pod, "FailedCreatePodSandBox", msg)
		n.setStatus(ctx, pod, func(st *corev1.PodStatus) {
			st.Phase = corev1.PodPending
			st.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
			st.ContainerStatuses = []corev1.ContainerStatus{{Name: pod.Spec.Containers[0].Name, Image: pod.Spec.Containers[0].Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ContainerCreating"}}}}
		})
		return
	}
	spec, err := n.containerSpec(ctx, pod)
	if err != nil {
		log.Warn("kubetest: pod not runnable", "err", err)
		n.setStatus(ctx, pod, func(st *corev1.PodStatus) {
			st.Phase, st.Reason, st.Message = corev1.PodFailed, "KubetestUnsupported", err.Error()
		})
		return
	}
	n.mu.Lock()
	ps := n.pods[pod.UID]
	if ps != nil {
		ps.container, ps.image, ps.dirs = spec.ctr.Name, spec.ctr.Image, spec.dirs
	}
	n.mu.Unlock()
	if ps == nil {
		return // deleted meanwhile
	}
	name := fmt.Sprintf("kubetest-%s-%s-%s", pod.Namespace, pod.Name, string(pod.UID)[:min(8, len(pod.UID))])
	for _, ic := range spec.inits {
		st, err := n.runInit(ctx, name, ic)
		spec.initStatuses = append(spec.initStatuses, st)
		if err != nil || st.State.Terminated.ExitCode != 0 {
			if err != nil {
				log.Warn("kubetest: init container", "init", ic.ctr.Name, "err", err)
				st.State.Terminated.Message = err.Error()
			}
			n.setStatus(ctx, pod, func(ps *corev1.PodStatus) {
				ps.Phase = corev1.PodFailed
				ps.InitContainerStatuses = spec.initStatuses
				ps.ContainerStatuses = []corev1.ContainerStatus{{Name: spec.ctr.Name, Image: spec.ctr.Image,
					State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}}}}
			})
			return
		}
	}
	created, err := n.cfg.Docker.ContainerCreate(ctx, spec.config, spec.host, nil, nil, name)
	if err != nil {
		log.Warn("kubetest: creating container", "err", err)
		n.setStatus(ctx, pod, func(st *corev1.PodStatus) {
			st.Phase = corev1.PodPending
			st.ContainerStatuses = []corev1.ContainerStatus{{Name: spec.ctr.Name, Image: spec.ctr.Image,
				State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerError", Message: err.Error()}}}}
		})
		return
	}
	n.mu.Lock()
	ps.id = created.ID
	gone := n.pods[pod.UID] == nil
	n.mu.Unlock()
	if gone {
		_ = n.cfg.Docker.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
		return
	}
	if err := n.cfg.Docker.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		log.Warn("kubetest: starting container", "err", err)
		n.setStatus(ctx, pod, func(st *corev1.PodStatus) {
			st.Phase, st.Reason, st.Message = corev1.PodFailed, "StartError", err.Error()
		})
		return
	}
	insp, err := n.cfg.Docker.ContainerInspect(ctx, created.ID)
	if err != nil {
		log.Warn("kubetest: inspecting container", "err", err)
		return
	}
	started := metav1.Now()
	if t, err := time.Parse(time.RFC3339Nano, insp.State.StartedAt); err == nil {
		started = metav1.NewTime(t)
	}
	if d := pod.Spec.ActiveDeadlineSeconds; d != nil {
		n.mu.Lock()
		ps.deadline = time.AfterFunc(time.Duration(*d)*time.Second, func() { n.deadlineExceeded(pod.UID) })
		n.mu.Unlock()
	}
	n.setStatus(ctx, pod, func(st *corev1.PodStatus) {
		if st.Phase == corev1.PodSucceeded || st.Phase == corev1.PodFailed {
			return // it ended before this was written
		}
		st.Phase = corev1.PodRunning
		st.HostIP, st.HostIPs = "127.0.0.1", []corev1.HostIP{{IP: "127.0.0.1"}}
		st.StartTime = &started
		st.Conditions = runningConditions(started)
		st.InitContainerStatuses = spec.initStatuses
		st.ContainerStatuses = []corev1.ContainerStatus{{
			Name: spec.ctr.Name, Image: spec.ctr.Image, ImageID: insp.Image, ContainerID: "docker://" + created.ID,
			Ready: true, Started: ptrTo(true),
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
		}}
	})
	log.Debug("kubetest: pod running", "container", created.ID[:12])
}

// sandboxFailure is why the node's container runtime cannot create the
// Pod's sandbox, in containerd's words; "" when it can (see
// NodeConfig.RuntimeHandlers).
func (n *Node) sandboxFailure(ctx context.Context, pod *corev1.Pod) string {
	rc := pod.Spec.RuntimeClassName
	if n.cfg.RuntimeHandlers == nil || rc == nil || *rc == "" {
		return ""
	}
	cls, err := n.cfg.Client.NodeV1().RuntimeClasses().Get(ctx, *rc, metav1.GetOptions{})
	if err != nil {
		return "Failed to create pod sandbox: " + err.Error()
	}
	if n.cfg.RuntimeHandlers[cls.Handler] {
		return ""
	}
	return fmt.Sprintf("Failed to create pod sandbox: rpc error: code = Unknown desc = failed to get sandbox runtime: no runtime for %q is configured", cls.Handler)
}

// warn records a Warning Event about a Pod, as the kubelet does.
func (n *Node) warn(ctx context.Context, pod *corev1.Pod, reason, msg string) {
	now := metav1.Now()
	_, err := n.cfg.Client.CoreV1().Events(pod.Namespace).Create(ctx, &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", pod.Name, now.UnixNano()), Namespace: pod.Namespace},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID,
			ResourceVersion: pod.ResourceVersion},
		Reason: reason, Message: msg, Type: corev1.EventTypeWarning, Count: 1, FirstTimestamp: now, LastTimestamp: now,
		Source: corev1.EventSource{Component: "kubelet", Host: n.cfg.Name}, ReportingController: "kubelet", ReportingInstance: n.cfg.Name,
	}, metav1.CreateOptions{})
	if err != nil {
		n.log.Warn("kubetest: recording an event", "pod", pod.Name, "reason", reason, "err", err)
	}
}

// runInit runs an init container to its exit and removes it: its status
// says how it ended (a failure's message is the tail of its output, as
// the kubelet's FallbackToLogsOnError would have it).
func (n *Node) runInit(ctx context.Context, pod string, ic initSpec) (corev1.ContainerStatus, error) {
	st := corev1.ContainerStatus{Name: ic.ctr.Name, Image: ic.ctr.Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Error", ExitCode: -1}}}
	created, err := n.cfg.Docker.ContainerCreate(ctx, ic.config, ic.host, nil, nil, pod+"-init-"+ic.ctr.Name)
	if err != nil {
		return st, err
	}
	defer func() {
		_ = n.cfg.Docker.ContainerRemove(context.WithoutCancel(ctx), created.ID, container.RemoveOptions{Force: true})
	}()
	started := metav1.Now()
	wait, werr := n.cfg.Docker.ContainerWait(ctx, created.ID, container.WaitConditionNextExit)
	if err := n.cfg.Docker.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return st, err
	}
	select {
	case res := <-wait:
		t := st.State.Terminated
		t.ExitCode, t.StartedAt, t.FinishedAt = int32(res.StatusCode), started, metav1.Now()
		if res.StatusCode == 0 {
			t.Reason = "Completed"
			st.Ready = true
			return st, nil
		}
		t.Message = n.logTail(ctx, created.ID)
		return st, nil
	case err := <-werr:
		return st, err
	case <-ctx.Done():
		return st, ctx.Err()
	}
}

// logTail is the last KiB of a container's output.
func (n *Node) logTail(ctx context.Context, id string) string {
	rc, err := n.cfg.Docker.ContainerLogs(ctx, id, container.LogsOptions{ShowStdout: true, ShowStderr: true, Tail: "20"})
	if err != nil {
		return ""
	}
	defer rc.Close()
	var out, errb bytes.Buffer
	_, _ = stdcopy.StdCopy(&out, &errb, io.LimitReader(rc, 64<<10))
	s := strings.TrimSpace(out.String() + errb.String())
	if len(s) > 1024 {
		s = s[len(s)-1024:]
	}
	return s
}

func runningConditions(at metav1.Time) []corev1.PodCondition {
	var cs []corev1.PodCondition
	for _, t := range []corev1.PodConditionType{corev1.PodScheduled, corev1.PodInitialized, corev1.ContainersReady, corev1.PodReady} {
		cs = append(cs, corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: at})
	}
	return cs
}

// gone removes what the node made for a Pod.
func (n *Node) gone(ctx context.Context, uid types.UID) {
	n.mu.Lock()
	ps := n.pods[uid]
	delete(n.pods, uid)
	n.mu.Unlock()
	if ps == nil {
		return
	}
	if ps.deadline != nil {
		ps.deadline.Stop()
	}
	if ps.id != "" {
		err := n.cfg.Docker.ContainerRemove(context.WithoutCancel(ctx), ps.id, container.RemoveOptions{Force: true})
		if err != nil && !cerrdefs.IsNotFound(err) && !cerrdefs.IsConflict(err) {
			n.log.Warn("kubetest: removing container", "pod", ps.name, "err", err)
		}
	}
	if ps.dirs != "" {
		_ = os.RemoveAll(ps.dirs)
	}
}

// deadlineExceeded ends a Pod past its activeDeadlineSeconds, as the
// kubelet does: the container is killed and the Pod fails with reason
// DeadlineExceeded.
func (n *Node) deadlineExceeded(uid types.UID) {
	n.mu.Lock()
	ps := n.pods[uid]
	if ps != nil {
		ps.timedOut = true
	}
	n.mu.Unlock()
	if ps == nil || ps.id == "" {
		return
	}
	_ = n.cfg.Docker.ContainerKill(context.Background(), ps.id, "KILL")
}

// watchDocker turns the node's containers' deaths into Pod statuses.
func (n *Node) watchDocker(ctx context.Context) {
	for ctx.Err() == nil {
		msgs, errs := n.cfg.Docker.Events(ctx, events.ListOptions{Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)),
			filters.Arg("event", string(events.ActionDie)),
			filters.Arg("label", LabelNode+"="+n.cfg.Name),
		)})
		// Deaths missed while no event stream was open.
		n.resync(ctx)
	loop:
		for {
			select {
			case m := <-msgs:
				n.died(ctx, types.UID(m.Actor.Attributes[LabelPodUID]), m.Actor.ID)
			case err := <-errs:
				if ctx.Err() == nil {
					n.log.Warn("kubetest: docker events", "err", err)
					sleepCtx(ctx, time.Second)
				}
				break loop
			case <-ctx.Done():
				return
			}
		}
	}
}

// resync reports the containers that are no longer running.
func (n *Node) resync(ctx context.Context) {
	ctrs, err := n.cfg.Docker.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", LabelNode+"="+n.cfg.Name), filters.Arg("status", "exited"))})
	if err != nil {
		return
	}
	for _, c := range ctrs {
		n.died(ctx, types.UID(c.Labels[LabelPodUID]), c.ID)
	}
}

// died writes a dead container's end into its Pod's status.
func (n *Node) died(ctx context.Context, uid types.UID, id string) {
	n.mu.Lock()
	ps := n.pods[uid]
	if ps == nil || ps.id != id || ps.finished {
		n.mu.Unlock()
		return
	}
	ps.finished = true
	timedOut, ctrName, image := ps.timedOut, ps.container, ps.image
	n.mu.Unlock()
	insp, err := n.cfg.Docker.ContainerInspect(ctx, id)
	if err != nil || insp.State == nil {
		return
	}
	term := &corev1.ContainerStateTerminated{ExitCode: int32(insp.State.ExitCode), ContainerID: "docker://" + id}
	if t, err := time.Parse(time.RFC3339Nano, insp.State.StartedAt); err == nil {
		term.StartedAt = metav1.NewTime(t)
	}
	if t, err := time.Parse(time.RFC3339Nano, insp.State.FinishedAt); err == nil {
		term.FinishedAt = metav1.NewTime(t)
	}
	switch {
	case insp.State.OOMKilled:
		term.Reason = "OOMKilled"
	case insp.State.ExitCode == 0:
		term.Reason = "Completed"
	default:
		term.Reason = "Error"
	}
	n.setStatus(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ps.ns, Name: ps.name, UID: uid}}, func(st *corev1.PodStatus) {
		st.Phase = corev1.PodFailed
		if term.ExitCode == 0 && !timedOut {
			st.Phase = corev1.PodSucceeded
		}
		if timedOut {
			st.Reason, st.Message = "DeadlineExceeded", "Pod was active on the node longer than the specified deadline"
		}
		for i := range st.Conditions {
			if st.Conditions[i].Type == corev1.PodReady || st.Conditions[i].Type == corev1.ContainersReady {
				st.Conditions[i].Status, st.Conditions[i].Reason = corev1.ConditionFalse, "PodCompleted"
			}
		}
		if len(st.ContainerStatuses) == 0 { // it died before Running was written
			st.ContainerStatuses = []corev1.ContainerStatus{{Name: ctrName, Image: image, ContainerID: "docker://" + id}}
		}
		for i := range st.ContainerStatuses {
			st.ContainerStatuses[i].Ready, st.ContainerStatuses[i].Started = false, ptrTo(false)
			st.ContainerStatuses[i].State = corev1.ContainerState{Terminated: term}
		}
	})
}

// setStatus writes a Pod's status (the pods/status subresource), retried
// on conflicts; a Pod that is gone is no error.
func (n *Node) setStatus(ctx context.Context, pod *corev1.Pod, change func(*corev1.PodStatus)) {
	pods := n.cfg.Client.CoreV1().Pods(pod.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := pods.Get(ctx, pod.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.UID != pod.UID {
			return nil // another Pod of that name
		}
		change(&cur.Status)
		_, err = pods.UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
		n.log.Warn("kubetest: writing pod status", "pod", pod.Name, "err", err)
	}
}

// podUID is the ExecServer's lookup: the UID of a Pod this node runs.
func (n *Node) podUID(namespace, pod string) (string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, p := range n.pods {
		if p.ns == namespace && p.name == pod && p.id != "" {
			return string(p.uid), nil
		}
	}
	return "", fmt.Errorf("pod %s/%s is not running on node %s", namespace, pod, n.cfg.Name)
}

// ExecInContainer runs cmd in a Pod's container with docker exec (the
// streaming server's Executor). name is "namespace/pod".
func (n *Node) ExecInContainer(ctx context.Context, name, uid, ctrName string, cmd []string,
	in io.Reader, out, errw io.WriteCloser, tty bool, _ <-chan streaming.TerminalSize, _ time.Duration,
) error {
	n.mu.Lock()
	ps := n.pods[types.UID(uid)]
	var id, want string
	if ps != nil && ps.ns+"/"+ps.name == name {
		id, want = ps.id, ps.container
	}
	n.mu.Unlock()
	if id == "" {
		return fmt.Errorf("pod %s is not running on node %s", name, n.cfg.Name)
	}
	if ctrName != want {
		return fmt.Errorf("pod %s has no container %q", name, ctrName)
	}
	ex, err := n.cfg.Docker.ContainerExecCreate(ctx, id, container.ExecOptions{
		Cmd: cmd, AttachStdin: in != nil, AttachStdout: true, AttachStderr: true, Tty: tty,
	})
	if err != nil {
		return err
	}
	hj, err := n.cfg.Docker.ContainerExecAttach(ctx, ex.ID, container.ExecAttachOptions{Tty: tty})
	if err != nil {
		return err
	}
	defer hj.Close()
	stop := context.AfterFunc(ctx, hj.Close)
	defer stop()
	if in != nil {
		go func() {
			_, _ = io.Copy(hj.Conn, in)
			_ = hj.CloseWrite()
		}()
	}
	stdout, stderr := io.Discard, io.Discard
	if out != nil {
		stdout = out
	}
	if errw != nil {
		stderr = errw
	}
	if tty {
		_, err = io.Copy(stdout, hj.Reader)
	} else {
		_, err = stdcopy.StdCopy(stdout, stderr, hj.Reader)
	}
	if err != nil && ctx.Err() == nil {
		return err
	}
	res, err := n.cfg.Docker.ContainerExecInspect(context.WithoutCancel(ctx), ex.ID)
	if err != nil {
		return err
	}
	if res.Running {
		return errors.New("the exec's stream ended while its command still runs")
	}
	if res.ExitCode != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("command terminated with exit code %d", res.ExitCode), Code: res.ExitCode}
	}
	return nil
}

func ptrTo[T any](v T) *T { return &v }

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// labels are the labels of a Pod's container.
func (n *Node) labels(pod *corev1.Pod) map[string]string {
	l := maps.Clone(n.cfg.Labels)
	if l == nil {
		l = map[string]string{}
	}
	l[LabelNode] = n.cfg.Name
	l[LabelNamespace] = pod.Namespace
	l[LabelPod] = pod.Name
	l[LabelPodUID] = string(pod.UID)
	return l
}

// dirOf is the host folder of a Pod's disk emptyDirs.
func (n *Node) dirOf(pod *corev1.Pod) string { return filepath.Join(n.stateDir, string(pod.UID)) }
