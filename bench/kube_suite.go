//go:build kubernetes

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kclient "k8s.io/client-go/kubernetes"

	"github.com/sandboxd/sandboxd/e2e/kubenode"
	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
	skube "github.com/sandboxd/sandboxd/sandbox/kubernetes"
)

// Built only with -tags kubernetes (client-go): `make bench-kube`.
func init() {
	register(suite{
		name: "kube",
		about: "sessions on a real Kubernetes node (make kubenode: kubelet, containerd, runc) beside Docker in the same run: " +
			"time to interactive (create → first terminal call answered), alternated; a burst of 20 creates at once at the default limits, " +
			"and a burst of as many as the node has room for (allocatable CPU / 500m) " +
			"($" + kubenode.EnvKubeconfig + "; the same test image on both)",
		run:   runKubeSuite,
		named: true,
	})
}

// kubeBurst is how many sessions a burst creates at once.
const kubeBurst = 20

// kubeRunLabel marks the run's Pods (the runtime refuses sandboxd.* keys,
// which it sets itself).
const kubeRunLabel = "bench.kube.run"

func runKubeSuite(ctx context.Context, e *env) (_ []row, err error) {
	kubeconfig := os.Getenv(kubenode.EnvKubeconfig)
	if kubeconfig == "" {
		return nil, fmt.Errorf("%s is not set: make kubenode brings a real node up, make bench-kube runs this suite", kubenode.EnvKubeconfig)
	}
	node, err := kubenode.Open(kubeconfig)
	if err != nil {
		return nil, err
	}
	cli, err := kclient.NewForConfig(node.REST)
	if err != nil {
		return nil, err
	}
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	rs, err := newRunScope()
	if err != nil {
		return nil, err
	}
	defer rs.end(&err, "docker")

	// The agent of the binary under test, as the node's agent image.
	agentImage, err := node.ImportAgent(ctx, su.bin, "sandboxd-agent:bench-"+rs.value)
	if err != nil {
		return nil, err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = errors.Join(err, node.RemoveImage(rctx, agentImage))
	}()

	drt, err := sdocker.New(ctx, sdocker.Options{AgentBinary: su.bin, Labels: rs.labels(), Logger: su.quiet})
	if err != nil {
		return nil, err
	}
	defer drt.Close()
	dm, err := sandbox.NewManager(ctx, drt, sandbox.ManagerOptions{
		Defaults: sandbox.SessionOptions{Image: su.image, IdleTimeout: sandbox.NoIdleTimeout}, Logger: su.quiet,
	})
	if err != nil {
		return nil, err
	}
	defer shutdownManager(dm, e)

	// As `serve --backend kubernetes --kube-agent-volume init
	// --kube-host-users --kube-network-policy-enforced` on this node
	// (decision 0049: containerd 1.6 has neither image volumes nor user
	// namespaces; its bridge does not enforce the policy).
	krt, err := skube.New(ctx, skube.Config{
		Client: cli, REST: node.REST, Namespace: node.Namespace, Labels: map[string]string{kubeRunLabel: rs.value},
		AgentImage: agentImage, AgentVolume: skube.AgentVolumeInit, HostUsers: true,
		NetworkPolicyEnforced: true, Node: node.Name, Logger: su.quiet,
	})
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, krt.Close()) }()
	km, err := sandbox.NewManager(ctx, krt, sandbox.ManagerOptions{
		Defaults: sandbox.SessionOptions{Image: node.TestImage, IdleTimeout: sandbox.NoIdleTimeout}, Logger: su.quiet,
	})
	if err != nil {
		return nil, err
	}
	defer shutdownManager(km, e)
	podsGone := func() error { return waitNoPods(ctx, cli, node.Namespace, kubeRunLabel+"="+rs.value) }

	// Time to interactive, one session at a time, alternated; the first
	// round of each warms the engine's and the node's caches, untimed.
	n := e.n(10)
	var dTTI, kTTI []time.Duration
	for i := -1; i < n; i++ {
		d, err := interactive(ctx, dm)
		if err != nil {
			return nil, fmt.Errorf("docker: %w", err)
		}
		k, err := interactive(ctx, km)
		if err != nil {
			return nil, fmt.Errorf("kubernetes: %w", err)
		}
		if i >= 0 {
			dTTI, kTTI = append(dTTI, d), append(kTTI, k)
			e.logf("kube: time to interactive %d/%d: docker %s, kubernetes %s", i+1, n, ms(d), ms(k))
		}
		if err := podsGone(); err != nil {
			return nil, err
		}
	}
	rows := []row{
		{scenario: "kube: time to interactive, Docker (create → first terminal call answered)", s: sampleOfDurations(dTTI)},
		{scenario: "kube: time to interactive, Kubernetes (real kubelet, containerd 1.6, agent by init container)", s: sampleOfDurations(kTTI),
			baseline: "Docker, same run", base: sampleOfDurations(dTTI)},
	}

	// A burst of kubeBurst creates at once, at the default limits (1 CPU,
	// 1 GiB): Docker starts every one; the kubelet admits only the Pods
	// whose requests fit the node's allocatable CPU (the runtime requests
	// what it limits: the Guaranteed QoS class) and rejects the others
	// (OutOfcpu), which the suite counts rather than fails on.
	dEach, dWall, dFail, err := burst(ctx, dm, kubeBurst, sandbox.Limits{})
	if err != nil {
		return rows, fmt.Errorf("docker burst: %w", err)
	}
	e.logf("kube: docker burst of %d: %d started, wall %s, p50 %s", kubeBurst, len(dEach), ms(dWall), ms(sampleOfDurations(dEach).p50))
	if err := podsGone(); err != nil {
		return rows, err
	}
	kEach, kWall, kFail, err := burst(ctx, km, kubeBurst, sandbox.Limits{})
	if err != nil {
		return rows, fmt.Errorf("kubernetes burst: %w", err)
	}
	e.logf("kube: kubernetes burst of %d: %d started, %d rejected by the kubelet (%s), wall %s", kubeBurst, len(kEach), kFail, kubeRejected, ms(kWall))
	if err := podsGone(); err != nil {
		return rows, err
	}
	name := fmt.Sprintf("burst of %d creates at once, default limits (1 CPU, 1 GiB)", kubeBurst)
	rows = append(rows,
		row{scenario: fmt.Sprintf("kube: %s, Docker, each to its first answer (%d started, %d failed)", name, len(dEach), dFail), s: sampleOfDurations(dEach)},
		row{scenario: fmt.Sprintf("kube: %s, Docker, wall until all answered", name), s: sampleOfDurations([]time.Duration{dWall})},
		// No ratio: the started sessions are not the same number.
		row{scenario: fmt.Sprintf("kube: %s, Kubernetes, each to its first answer (%d started, %d rejected %s)", name, len(kEach), kFail, kubeRejected),
			s: sampleOfDurations(kEach)},
	)

	// The burst the node has room for: each Pod requests at least the
	// init container's 500m CPU (the agent's copy), so a node admits
	// allocatable/500m of them; both runtimes with the limits of that
	// size (half a CPU, 512 MiB).
	room, err := nodeRoom(ctx, cli, node.Name)
	if err != nil {
		return rows, err
	}
	small := sandbox.Limits{CPUs: 0.5, Memory: 512 << 20}
	dEach, dWall, dFail, err = burst(ctx, dm, room, small)
	if err == nil && dFail > 0 {
		err = fmt.Errorf("%d of %d rejected", dFail, room)
	}
	if err != nil {
		return rows, fmt.Errorf("docker burst of %d: %w", room, err)
	}
	if err := podsGone(); err != nil {
		return rows, err
	}
	kEach, kWall, kFail, err = burst(ctx, km, room, small)
	if err == nil && kFail > 0 {
		err = fmt.Errorf("%d of %d rejected %s: the node has less room than its allocatable CPU says", kFail, room, kubeRejected)
	}
	if err != nil {
		return rows, fmt.Errorf("kubernetes burst of %d: %w", room, err)
	}
	e.logf("kube: burst of %d (the node's room): docker wall %s, kubernetes wall %s", room, ms(dWall), ms(kWall))
	if err := podsGone(); err != nil {
		return rows, err
	}
	name = fmt.Sprintf("burst of %d creates at once (the node's room at 500m CPU a Pod), half a CPU and 512 MiB each", room)
	return append(rows,
		row{scenario: "kube: " + name + ", Docker, each to its first answer", s: sampleOfDurations(dEach)},
		row{scenario: "kube: " + name + ", Kubernetes, each to its first answer", s: sampleOfDurations(kEach),
			baseline: "Docker, same burst", base: sampleOfDurations(dEach)},
		row{scenario: "kube: " + name + ", Docker, wall until all answered", s: sampleOfDurations([]time.Duration{dWall})},
		row{scenario: "kube: " + name + ", Kubernetes, wall until all answered", s: sampleOfDurations([]time.Duration{kWall}),
			baseline: "Docker, same burst", base: sampleOfDurations([]time.Duration{dWall})},
	), nil
}

// kubeRejected is the kubelet's reason for a Pod whose requests do not fit
// the node.
const kubeRejected = "OutOfcpu"

// nodeRoom is how many session Pods the node admits at once: its
// allocatable CPU over the 500m the agent's init container requests.
func nodeRoom(ctx context.Context, cli kclient.Interface, name string) (int, error) {
	n, err := cli.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, err
	}
	cpu := n.Status.Allocatable[corev1.ResourceCPU]
	room := int(cpu.MilliValue() / 500)
	if room < 1 {
		return 0, fmt.Errorf("node %s: allocatable CPU %s holds no session Pod", name, cpu.String())
	}
	return min(room, kubeBurst), nil
}

// interactive creates a session, times it to its first terminal call
// answered, and closes it.
func interactive(ctx context.Context, m *sandbox.Manager) (time.Duration, error) {
	start := time.Now()
	s, err := m.Create(ctx, sandbox.SessionOptions{})
	if err != nil {
		return 0, err
	}
	callErr := firstCall(ctx, s)
	took := time.Since(start)
	closeErr := m.Close(ctx, s.ID())
	return took, errors.Join(callErr, closeErr)
}

var terminalEcho = json.RawMessage(`{"command": "echo ready"}`)

func firstCall(ctx context.Context, s *sandbox.Session) error {
	obs, err := s.Call(ctx, "terminal", terminalEcho, nil)
	if err != nil {
		return err
	}
	if obs.IsError || !strings.Contains(obs.Text(), "ready") {
		return fmt.Errorf("terminal: %.200s", obs.Text())
	}
	return nil
}

// burst creates n sessions with limits at once, each timed to its first
// answer; it closes them all after the last answered. A create the kubelet
// rejected for want of room is counted in rejected, not an error.
func burst(ctx context.Context, m *sandbox.Manager, n int, limits sandbox.Limits) (each []time.Duration, wall time.Duration, rejected int, err error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		ids  []string
		errs []error
	)
	start := time.Now()
	for range n {
		wg.Go(func() {
			began := time.Now()
			s, err := m.Create(ctx, sandbox.SessionOptions{Limits: limits})
			if err == nil {
				err = firstCall(ctx, s)
			}
			took := time.Since(began)
			mu.Lock()
			defer mu.Unlock()
			if s != nil {
				ids = append(ids, s.ID())
			}
			switch {
			case err != nil && strings.Contains(err.Error(), kubeRejected):
				rejected++
			case err != nil:
				errs = append(errs, err)
			default:
				each = append(each, took)
			}
		})
	}
	wg.Wait()
	wall = time.Since(start)
	for _, id := range ids {
		wg.Go(func() {
			if cerr := m.Close(ctx, id); cerr != nil && !errors.Is(cerr, sandbox.ErrNotFound) {
				mu.Lock()
				errs = append(errs, cerr)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return each, wall, rejected, errors.Join(errs...)
}

// waitNoPods waits until the run's Pods are gone: a closed session's Pod
// takes its grace period on a real kubelet, and the next measurement
// should not share the node with it.
func waitNoPods(ctx context.Context, cli kclient.Interface, ns, selector string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	for {
		pods, err := cli.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return fmt.Errorf("waiting for the closed sessions' Pods to go: %w", err)
		}
		if len(pods.Items) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d Pods still there after 3 min", len(pods.Items))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

func shutdownManager(m *sandbox.Manager, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Shutdown(ctx, false); err != nil {
		e.logf("kube: shutting down a manager: %v", err)
	}
}
