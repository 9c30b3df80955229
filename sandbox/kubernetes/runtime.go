package kubernetes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	kclient "k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Name is the runtime's name in errors (sandbox.UnsupportedError).
const Name = "kubernetes"

// Values of Config.AgentVolume.
const (
	// AgentVolumeImage mounts Config.AgentImage read-only at
	// sandbox.AgentDir as an image volume (Kubernetes 1.35+ with
	// containerd 2.1+ or CRI-O): nothing is copied.
	AgentVolumeImage = "image"
	// AgentVolumeInit copies the binary from Config.AgentImage into an
	// emptyDir at sandbox.AgentDir with an init container, for clusters
	// without image volumes.
	AgentVolumeInit = "init"
)

// Defaults of Config.
const (
	DefaultCallTimeout = 30 * time.Second
	// DefaultDiskLimit is Config.DiskLimit's default.
	DefaultDiskLimit = 10 << 30
	// DefaultRunDirSize is the emptyDir at sandbox.RunDir, as the Docker
	// runtime's tmpfs there.
	DefaultRunDirSize = 64 << 20
)

// Config configures the Kubernetes runtime.
type Config struct {
	// Client is the clientset; nil makes one from REST.
	Client kclient.Interface
	// REST is the cluster's client configuration (kubeconfig or
	// in-cluster); it makes Client and Exec when they are nil.
	REST *rest.Config
	// Exec runs the agent proxy in a Pod; nil is NewExec(REST).
	Exec ExecFunc
	// Namespace holds the sessions' Pods and NetworkPolicies (required).
	Namespace string
	// Labels are put on every Pod and NetworkPolicy and required when
	// listing; their hash is the sandboxd.scope label, as on Docker, so
	// daemons with different Labels never see each other's sessions.
	Labels map[string]string
	// AgentImage is the OCI reference of the agent image the nodes pull:
	// the static sandboxd binary at /sandboxd (`sandboxd agent-image`
	// writes it; docs/kubernetes.md says how to push it). Required.
	AgentImage string
	// AgentVolume is AgentVolumeImage (default) or AgentVolumeInit.
	AgentVolume string
	// AgentPullPolicy is the pull policy of the agent image ("" is
	// IfNotPresent).
	AgentPullPolicy string
	// NetworkPolicyEnforced is the operator's declaration that the
	// cluster's network plugin enforces NetworkPolicies. Without it every
	// session is refused (each one's network is a NetworkPolicy).
	NetworkPolicyEnforced bool
	// HostUsers runs the Pods in the node's user namespace (hostUsers
	// true), for clusters without user namespace support; by default each
	// Pod gets a user namespace of its own.
	HostUsers bool
	// SeccompProfile is a seccomp profile installed on every node, as a
	// path relative to the kubelet's seccomp folder (Localhost); "" is the
	// container runtime's default (RuntimeDefault).
	SeccompProfile string
	// DiskLimit is each Pod's ephemeral-storage limit and the size limit
	// of its /workspace and home folder when the session sets no
	// Limits.Disk (default DefaultDiskLimit). Past it the kubelet evicts
	// the Pod: the session fails with "disk limit".
	DiskLimit int64
	// RunDirSize is the size of the emptyDir at sandbox.RunDir.
	RunDirSize int64
	// Node pins every Pod to this node name (tests); "" lets the scheduler
	// place them.
	Node string
	// MaxLifetime, when set, is every Pod's activeDeadlineSeconds: the
	// cluster ends a sandbox that old whatever becomes of the daemon (a
	// pooled one's time counts from its start, not from its hand-out).
	MaxLifetime time.Duration
	// CallTimeout bounds every API call (default 30s).
	CallTimeout time.Duration
	// LookupHost resolves the host names of allow_hosts; nil is the
	// host's resolver (IPv4).
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// Logger receives structured logs (component=kubernetes); nil is
	// slog.Default().
	Logger *slog.Logger
}

// Runtime is the Kubernetes implementation of sandbox.Runtime.
type Runtime struct {
	cfg    Config
	cli    kclient.Interface
	exec   ExecFunc
	log    *slog.Logger
	scope  string
	labels map[string]string // Config.Labels plus managed and scope
	// id names this runtime instance in the claims it makes.
	id string

	w *watcher

	// runtimeClasses are the RuntimeClasses found to exist (CheckRuntime).
	runtimeClasses sync.Map // name → true
}

var (
	_ sandbox.Runtime        = (*Runtime)(nil)
	_ sandbox.OptionsChecker = (*Runtime)(nil)
)

// Label and annotation keys of this runtime beside sandbox's.
const (
	// LabelScope is as on Docker: the hash of Config.Labels.
	LabelScope = "sandboxd.scope"
	// AnnotationClaimedBy names the runtime instance that claimed a
	// pooled Pod.
	AnnotationClaimedBy = "sandboxd.claimed-by"
)

// ContainerName is the name of the sandbox's container in its Pod.
const ContainerName = "sandbox"

// New checks cfg, makes the clients it lacks and starts the watch on the
// scope's Pods (Close stops it). It fails if the namespace cannot be
// read. klog, client-go's log, goes to Config.Logger from then on (the
// last runtime made wins; klog.go).
func New(ctx context.Context, cfg Config) (*Runtime, error) {
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.DiskLimit <= 0 {
		cfg.DiskLimit = DefaultDiskLimit
	}
	if cfg.RunDirSize <= 0 {
		cfg.RunDirSize = DefaultRunDirSize
	}
	if cfg.AgentVolume == "" {
		cfg.AgentVolume = AgentVolumeImage
	}
	if cfg.AgentPullPolicy == "" {
		cfg.AgentPullPolicy = "IfNotPresent"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.LookupHost == nil {
		cfg.LookupHost = lookupIPv4
	}
	if err := cfg.check(); err != nil {
		return nil, fmt.Errorf("kubernetes runtime: %w", err)
	}
	routeKlog(cfg.Logger)
	r := &Runtime{cfg: cfg, cli: cfg.Client, exec: cfg.Exec, log: cfg.Logger.With("component", "kubernetes", "namespace", cfg.Namespace)}
	if r.cli == nil || r.exec == nil {
		if cfg.REST == nil {
			return nil, errors.New("kubernetes runtime: no REST config to make the clientset or exec from")
		}
	}
	if r.cli == nil {
		cs, err := kclient.NewForConfig(cfg.REST)
		if err != nil {
			return nil, fmt.Errorf("kubernetes runtime: clientset: %w", err)
		}
		r.cli = cs
	}
	if r.exec == nil {
		ex, err := NewExec(cfg.REST)
		if err != nil {
			return nil, fmt.Errorf("kubernetes runtime: exec: %w", err)
		}
		r.exec = ex
	}
	r.scope = ScopeOf(cfg.Labels)
	r.labels = maps.Clone(cfg.Labels)
	if r.labels == nil {
		r.labels = map[string]string{}
	}
	r.labels[sandbox.LabelManaged] = "true"
	r.labels[LabelScope] = r.scope
	var b [8]byte
	_, _ = rand.Read(b[:])
	r.id = hex.EncodeToString(b[:])

	cctx, cancel := r.call(ctx)
	_, err := r.cli.CoreV1().Namespaces().Get(cctx, cfg.Namespace, metav1.GetOptions{})
	cancel()
	if err != nil && !apierrors.IsForbidden(err) { // a Role in the namespace need not read the namespace itself
		return nil, fmt.Errorf("kubernetes runtime: namespace %s: %w", cfg.Namespace, err)
	}
	r.w = newWatcher(r)
	if err := r.w.start(ctx); err != nil {
		return nil, fmt.Errorf("kubernetes runtime: watching the Pods of namespace %s: %w", cfg.Namespace, err)
	}
	r.log.Info("kubernetes runtime ready", "scope", r.scope, "agent_image", cfg.AgentImage, "agent_volume", cfg.AgentVolume,
		"network_policy_enforced", cfg.NetworkPolicyEnforced, "host_users", cfg.HostUsers, "seccomp", seccompName(cfg.SeccompProfile))
	return r, nil
}

// check validates what the caller gave.
func (c Config) check() error {
	var errs []error
	if c.Namespace == "" {
		errs = append(errs, errors.New("no namespace"))
	} else if msgs := validation.IsDNS1123Label(c.Namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("namespace %q: %s", c.Namespace, strings.Join(msgs, "; ")))
	}
	if c.AgentImage == "" {
		errs = append(errs, errors.New("no agent image (the OCI reference of the image holding the sandboxd binary)"))
	} else if strings.ContainsAny(c.AgentImage, " \t\n") {
		errs = append(errs, fmt.Errorf("agent image %q: not an image reference", c.AgentImage))
	}
	switch c.AgentVolume {
	case AgentVolumeImage, AgentVolumeInit:
	default:
		errs = append(errs, fmt.Errorf("agent volume %q: want %q or %q", c.AgentVolume, AgentVolumeImage, AgentVolumeInit))
	}
	switch c.AgentPullPolicy {
	case "Always", "IfNotPresent", "Never":
	default:
		errs = append(errs, fmt.Errorf("agent pull policy %q: want Always, IfNotPresent or Never", c.AgentPullPolicy))
	}
	if p := c.SeccompProfile; p != "" && (strings.HasPrefix(p, "/") || slices.Contains(strings.Split(p, "/"), "..")) {
		errs = append(errs, fmt.Errorf("seccomp profile %q: want a path relative to the kubelet's seccomp folder", p))
	}
	if c.Node != "" {
		if msgs := validation.IsDNS1123Subdomain(c.Node); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("node %q: %s", c.Node, strings.Join(msgs, "; ")))
		}
	}
	for k, v := range c.Labels {
		if k == sandbox.LabelManaged || k == sandbox.LabelSession || k == LabelScope || strings.HasPrefix(k, sandbox.ReservedLabelPrefix) {
			errs = append(errs, fmt.Errorf("label %q is set by sandboxd itself", k))
			continue
		}
		if msgs := validation.IsQualifiedName(k); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label %q: %s", k, strings.Join(msgs, "; ")))
		}
		if msgs := validation.IsValidLabelValue(v); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("label %s=%q: %s", k, v, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// Close stops the watch. Sandboxes are left alone.
func (r *Runtime) Close() error {
	r.w.stop()
	return nil
}

// Client is the clientset (for tests and tools built on the runtime).
func (r *Runtime) Client() kclient.Interface { return r.cli }

// Namespace is the namespace of the sessions' Pods.
func (r *Runtime) Namespace() string { return r.cfg.Namespace }

// call returns a context for one API call, bounded by CallTimeout.
func (r *Runtime) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.cfg.CallTimeout)
}

// ScopeOf is the LabelScope value of a runtime with the given labels:
// "default" for none, else a hash of them (the Docker runtime's rule).
func ScopeOf(labels map[string]string) string { return sandbox.ScopeOf(labels) }

// PodName is the name of a session's Pod (and of its NetworkPolicy).
func PodName(sessionID string) string { return "sbx-" + sessionID }

// selector selects the runtime's objects (and one session's if id is not
// empty).
func (r *Runtime) selector(id string) string {
	parts := make([]string, 0, len(r.labels)+1)
	for _, k := range slices.Sorted(maps.Keys(r.labels)) {
		parts = append(parts, k+"="+r.labels[k])
	}
	if id != "" {
		parts = append(parts, sandbox.LabelSession+"="+id)
	}
	return strings.Join(parts, ",")
}

// checkSessionID refuses ids that cannot name a Pod.
func checkSessionID(id string) error {
	if id == "" {
		return errors.New("empty session id")
	}
	if msgs := validation.IsDNS1123Label(PodName(id)); len(msgs) > 0 {
		return fmt.Errorf("session id %q cannot name a Pod: %s", id, strings.Join(msgs, "; "))
	}
	if msgs := validation.IsValidLabelValue(id); len(msgs) > 0 {
		return fmt.Errorf("session id %q cannot be a label value: %s", id, strings.Join(msgs, "; "))
	}
	return nil
}

// wrap adds the sandbox sentinel for a missing object.
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf(format, args...)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%s: %w: %w", msg, sandbox.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", msg, err)
}

func seccompName(p string) string {
	if p == "" {
		return "RuntimeDefault"
	}
	return "Localhost " + p
}
