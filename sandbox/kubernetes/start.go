package kubernetes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
)

// Waiting reasons of the sandbox's container that end a start at once:
// the kubelet would only retry them with a back-off.
var (
	pullFailures  = map[string]bool{"ErrImagePull": true, "ImagePullBackOff": true, "InvalidImageName": true, "ErrImageNeverPull": true, "ImageInspectError": true}
	startFailures = map[string]bool{
		"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true, "CrashLoopBackOff": true,
		"PreStartHookError": true, "PostStartHookError": true,
	}
)

// Start creates the session's NetworkPolicy, the ConfigMap of its skills
// (skills.go) and its Pod, waits on the
// runtime's watch until the Pod's container runs, then opens the agent
// stream: pods/exec of sandbox.ProxyCommand, retried until the agent
// answers a ping on it (its socket exists a moment after the container
// starts). There is no attach: it cannot precede the container's start, so
// the agent serves its socket after its stdin's EOF and every stream is an
// exec. On any failure everything of the session is deleted again.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec) (_ io.ReadWriteCloser, err error) {
	id := spec.SessionID
	if err := checkSessionID(id); err != nil {
		return nil, err
	}
	if err := r.CheckOptions(spec.Options); err != nil {
		return nil, err
	}
	if err := r.CheckRuntime(ctx, spec.Options.Runtime); err != nil {
		return nil, err
	}
	var (
		egress []netip.Prefix
		hosts  []corev1.HostAlias
	)
	if len(spec.Options.AllowHosts) > 0 {
		if egress, hosts, err = r.resolveEgress(ctx, spec.Options.AllowHosts); err != nil {
			return nil, err
		}
	}
	var skills []byte
	if len(spec.Skills) > 0 {
		if skills, _, err = packSkills(spec.Skills); err != nil {
			r.log.Warn("skills refused at create", "session", id, "err", err)
			return nil, err
		}
	}
	pod, err := r.buildPod(spec, hosts)
	if err != nil {
		return nil, err
	}
	if r.cfg.MaxLifetime > 0 {
		pod.Spec.ActiveDeadlineSeconds = new(int64(math.Ceil(r.cfg.MaxLifetime.Seconds())))
	}
	log := r.log.With("session", id, "pod", pod.Name)
	changed, unwait := r.w.wait(pod.Name)
	defer unwait()
	defer func() {
		if err == nil {
			return
		}
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.CallTimeout)
		defer cancel()
		if rerr := r.Remove(rctx, id); rerr != nil {
			log.Warn("removing what a failed start made", "err", rerr)
		}
	}()
	began := time.Now()
	cctx, cancel := r.call(ctx)
	_, err = r.cli.NetworkingV1().NetworkPolicies(r.cfg.Namespace).Create(cctx, r.buildPolicy(spec, egress), metav1.CreateOptions{})
	cancel()
	if err != nil {
		return nil, fmt.Errorf("session %s: creating its NetworkPolicy: %w", id, err)
	}
	if skills != nil {
		if err := r.createSkills(ctx, id, skills); err != nil {
			return nil, err
		}
	}
	cctx, cancel = r.call(ctx)
	created, err := r.cli.CoreV1().Pods(r.cfg.Namespace).Create(cctx, pod, metav1.CreateOptions{})
	cancel()
	if err != nil {
		if apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("session %s: a Pod %s exists already: %w", id, pod.Name, err)
		}
		return nil, fmt.Errorf("session %s: creating its Pod: %w", id, err)
	}
	if err := r.waitRunning(ctx, created, changed); err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	running := time.Since(began)
	rwc, err := r.dialAgent(ctx, id, pod.Name)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", id, err)
	}
	log.Debug("sandbox started", "running_after", running.Round(time.Millisecond), "agent_after", time.Since(began).Round(time.Millisecond))
	return rwc, nil
}

// waitRunning waits until the Pod's container runs, on the runtime's
// watch (first is the Pod as created; changed wakes on each change of the
// Pod and each Warning Event about it). A Pod that failed, an init
// container that failed, a container the kubelet cannot create or whose
// image it cannot pull, or a terminal Event (a sandbox the node's runtime
// cannot create) ends the wait at once; so does ctx, naming the Pod's
// state and its last Warning Event.
func (r *Runtime) waitRunning(ctx context.Context, first *corev1.Pod, changed <-chan struct{}) error {
	pod := first
	for {
		if p := r.w.cached(first.Name); p != nil && p.UID == first.UID {
			pod = p
		}
		if err := runState(pod); err != nil || statusOf(pod).Running {
			return err
		}
		ev, evOK := r.w.lastEvent(first.Name, first.UID)
		if evOK && ev.terminal() {
			return fmt.Errorf("its Pod %s cannot run: %s", pod.Name, ev)
		}
		select {
		case <-changed:
		case <-ctx.Done():
			state := pendingState(pod)
			if evOK {
				state += "; last event " + ev.String()
			}
			return fmt.Errorf("its Pod %s did not run (%s): %w", pod.Name, state, ctx.Err())
		}
	}
}

// runState is the error that ends a start at a Pod's state; nil while it
// may still run.
func runState(pod *corev1.Pod) error {
	if err := initState(pod); err != nil {
		return err
	}
	if why := podEnded(pod); why != "" {
		return fmt.Errorf("its Pod %s ended before it ran: %s", pod.Name, sandboxStatus(pod))
	}
	return waitingState(containerStatus(pod), "its container")
}

// initState is the error of an init container that failed or cannot
// start (the agent's copy, the skills' unpacking), naming it and what it
// said.
func initState(pod *corev1.Pod) error {
	for i := range pod.Status.InitContainerStatuses {
		cs := &pod.Status.InitContainerStatuses[i]
		if t := cs.State.Terminated; t != nil && t.ExitCode != 0 {
			msg := strings.TrimSpace(t.Message)
			if msg == "" {
				msg = t.Reason
			}
			return fmt.Errorf("its init container %s failed with exit code %d: %s", cs.Name, t.ExitCode, msg)
		}
		if err := waitingState(cs, "its init container "+cs.Name); err != nil {
			return err
		}
	}
	return nil
}

// waitingState is the error of a container (what names it) waiting for
// what the kubelet would only retry with a back-off.
func waitingState(cs *corev1.ContainerStatus, what string) error {
	if cs == nil || cs.State.Waiting == nil {
		return nil
	}
	w := cs.State.Waiting
	switch {
	case pullFailures[w.Reason]:
		return fmt.Errorf("%w: the cluster could not pull %s (%s: %s)", sandbox.ErrImageNotFound, cs.Image, w.Reason, w.Message)
	case startFailures[w.Reason]:
		return fmt.Errorf("%s could not start (%s: %s)", what, w.Reason, w.Message)
	}
	return nil
}

// sandboxStatus describes an ended Pod as the manager would.
func sandboxStatus(pod *corev1.Pod) string { return statusOf(pod).Describe() }

// pendingState says what a Pod that does not run yet waits for.
func pendingState(pod *corev1.Pod) string {
	s := "phase " + string(pod.Status.Phase)
	if pod.Status.Phase == "" {
		s = "not scheduled"
	}
	for _, c := range pod.Status.Conditions {
		if c.Status != corev1.ConditionTrue && c.Reason != "" {
			s += fmt.Sprintf(", %s: %s %s", c.Type, c.Reason, c.Message)
		}
	}
	if cs := containerStatus(pod); cs != nil && cs.State.Waiting != nil {
		s += ", container " + cs.State.Waiting.Reason
	}
	return s
}

// dialAgent opens the agent stream of a Pod that runs: pods/exec of the
// agent proxy, pinged once before it is handed out, retried with a short
// back-off until ctx ends (the agent makes its socket a moment after the
// container starts).
func (r *Runtime) dialAgent(ctx context.Context, id, pod string) (io.ReadWriteCloser, error) {
	delay := 20 * time.Millisecond
	for {
		rwc, err := r.exec(ctx, r.cfg.Namespace, pod, ContainerName, sandbox.ProxyCommand())
		if err == nil {
			if err = probe(ctx, rwc); err == nil {
				return r.w.track(id, rwc), nil
			}
			_ = rwc.Close()
		}
		if p := r.w.cached(pod); p != nil {
			if rerr := runState(p); rerr != nil {
				return nil, rerr
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("its agent did not answer over pods/exec (last: %v): %w", err, ctx.Err())
		case <-time.After(delay):
		}
		delay = min(2*delay, time.Second)
	}
}

// probeID is the request id of the start's ping: the host's client counts
// up from 1, so it never uses this one on the same stream.
const probeID = math.MaxUint64

// probe pings the agent on a new stream and reads its answer, so that a
// stream whose agent proxy found no socket yet is never handed out.
func probe(ctx context.Context, rwc io.ReadWriteCloser) error {
	stop := context.AfterFunc(ctx, func() { _ = rwc.Close() })
	defer stop()
	req, err := proto.EncodeFrame(&proto.Frame{ID: probeID, Method: proto.MethodPing, Params: json.RawMessage("{}")})
	if err != nil {
		return err
	}
	if _, err := rwc.Write(req); err != nil {
		return fmt.Errorf("writing a ping: %w", err)
	}
	var hdr [proto.HeaderSize]byte
	body, _, err := proto.ReadFrame(rwc, &hdr)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("the agent proxy ended without an answer")
		}
		return fmt.Errorf("reading the ping's answer: %w", err)
	}
	var resp proto.Frame
	if err := json.Unmarshal(body, &resp); err != nil {
		return fmt.Errorf("the ping's answer: %w", err)
	}
	switch {
	case resp.ID != probeID:
		return fmt.Errorf("the ping's answer has id %d", resp.ID)
	case resp.Error != nil:
		return fmt.Errorf("the agent answered the ping with an error: %v", resp.Error)
	}
	return nil
}
