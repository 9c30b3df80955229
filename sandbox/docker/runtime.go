// Package docker is the Docker Engine runtime of sandboxd: one hardened
// container per session, whose main process (under the engine's init) is the
// agent binary, reached through an attach stream opened before the container
// starts. One operation per file: create/start (start.go), connect
// (connect.go), claim (claim.go), inspect (inspect.go), list (list.go),
// remove (remove.go), prune (prune.go); the container settings are built in
// config.go, where the workspace and home volumes go and whether their
// owner needs fixing is decided in layout.go, the fix itself (for images
// that are not sandboxd's own) is chown.go, the agent binary is checked and
// (remote engines) copied in agentbin.go, quota-bound volumes (a sparse
// ext4 file on a loop device) are made and released in quota.go, and
// stream.go turns hijacked connections into the agent's byte stream.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/internal/loglimit"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/egress"
)

// Defaults of Options.
const (
	DefaultCallTimeout = 30 * time.Second
	DefaultLogMaxSize  = "1m"
	DefaultLogMaxFiles = "2"
	// DefaultRunDirSize is the tmpfs at sandbox.RunDir (agent socket and
	// the tools' state files, e.g. full outputs of truncated commands).
	DefaultRunDirSize = 64 << 20
)

// Options configure the Docker runtime. The zero value is usable.
type Options struct {
	// Client is a configured engine client; nil makes one from the
	// environment (DOCKER_HOST etc.) with API version negotiation.
	Client *client.Client
	// AgentBinary is the host path of the static sandboxd binary put into
	// every sandbox; empty is the running executable.
	AgentBinary string
	// CopyAgent puts the agent binary into the sandbox through a volume
	// filled over the API instead of a bind mount of a host path. It is
	// turned on by itself when the engine is not on a local unix socket
	// (DOCKER_HOST=tcp://..., ssh://...), where a host path means nothing.
	CopyAgent bool
	// Labels are put on every resource and required when listing, so
	// runtimes with different Labels never see each other's resources
	// (e.g. a test run's id).
	Labels map[string]string
	// CallTimeout bounds every engine call (default 30s).
	CallTimeout time.Duration
	// LogMaxSize and LogMaxFiles cap the json-file log of each container
	// (the agent's stdout carries the protocol, so the log is of little use
	// and must not grow without bound).
	LogMaxSize  string
	LogMaxFiles string
	// RunDirSize is the size of the tmpfs at sandbox.RunDir.
	RunDirSize int64
	// Logger receives structured logs (component=docker); nil is
	// slog.Default().
	Logger *slog.Logger
	// InsecureBridge starts bridge and internal sessions, and HTTP and
	// SSE sidecars (on their internal network), even when the host
	// firewall cannot be managed (not root, no iptables, a remote
	// engine), although their code can then reach every service the host
	// listens on beyond loopback. Without it they are refused there.
	// allow_hosts is refused there either way.
	InsecureBridge bool
	// LookupHost resolves the host names of allow_hosts for the egress
	// proxy, at each connection; nil is the host's resolver. Tests map
	// names to addresses they control with it. Unused when Egress is set
	// (its own Options.Resolve is).
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// Egress runs the egress proxies of sessions whose allow_hosts name
	// hosts (firewall_egress.go); nil: the runtime makes its own with
	// LookupHost, refusing the host's addresses and the engine's bridges.
	Egress *egress.Server
	// EgressInterceptor, when set, gives a session's proxy the
	// Interceptor of its options (secret injection); nil or a nil result:
	// none.
	EgressInterceptor func(o sandbox.SessionOptions) egress.Interceptor
	// DiskDir holds the sparse files behind quota-bound volumes
	// (sandbox.Limits.DiskQuota), in a folder per scope; empty: this
	// runtime makes no quota-bound volumes. DiskQuota says whether it can.
	DiskDir string
	// DirectDir holds the per-session folders of the direct path to the
	// agent (decision 0035, direct.go), in a folder per scope; empty:
	// this runtime offers no direct path and calls go over the attach
	// stream. A remote engine gets none either (a host folder means
	// nothing there).
	DirectDir string
	// NoDirect turns the direct path off while DirectDir is still where
	// folders of earlier runs are found and removed.
	NoDirect bool
	// InjectTrust is the daemon's injection CA that sessions with inject
	// rules trust (inject.go); nil: such sessions are refused.
	InjectTrust *InjectTrust
	// NoOverlaySeed seeds editable paths and HOME by copying even where
	// an overlay of the image's layers could (decision 0040).
	NoOverlaySeed bool
}

// Runtime is the Docker implementation of sandbox.Runtime.
type Runtime struct {
	cli       *client.Client
	ownClient bool
	opts      Options
	log       *slog.Logger
	agent     *agentBinary
	// snapshotting holds the ids of the snapshots in the making, which
	// PruneSnapshots leaves alone (snapshot.go).
	snapshotting sync.Map
	// fw manages the host firewall rules of private networks (firewall.go);
	// nil when it cannot, fwErr says why.
	fw *firewall
	// egress runs the sessions' egress proxies (Options.Egress, or the
	// runtime's own: ownEgress).
	egress    *egress.Server
	ownEgress bool
	fwErr     error
	quota     quota
	// runtimes are the engine's OCI runtimes (runtimes.go).
	runtimes engineRuntimes

	// agentLogs: per session, the logger of what its agent streams carry
	// on stderr (hostile input), truncated and rate-limited once for all
	// of the session's streams (attach, agent-proxy). Dropped at Remove.
	agentLogs sync.Map // session id → *slog.Logger
	// skillVols: the skill volumes filled in copy mode.
	skillVols skillVolumes
	// sidecarNetMu serializes making sessions' sidecar networks.
	sidecarNetMu sync.Mutex
	// directDir is <DirectDir>/<scope> ("" without DirectDir); directErr
	// says why new sessions get no direct path (nil: they do).
	directDir string
	directErr error
	// removeBackoff is the first pause between container removal attempts
	// (remove.go); zero means 100ms. Tests shorten it.
	removeBackoff time.Duration
}

// agentLog is the session's logger for its agent's stderr.
func (r *Runtime) agentLog(sessionID string) *slog.Logger {
	if l, ok := r.agentLogs.Load(sessionID); ok {
		return l.(*slog.Logger)
	}
	l, _ := r.agentLogs.LoadOrStore(sessionID, loglimit.NewLogger(r.log.With("session", sessionID), loglimit.Options{}))
	return l.(*slog.Logger)
}

var _ sandbox.Runtime = (*Runtime)(nil)

// New connects to the engine (checking it answers) and checks the agent
// binary.
func New(ctx context.Context, opts Options) (*Runtime, error) {
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = DefaultCallTimeout
	}
	if opts.LogMaxSize == "" {
		opts.LogMaxSize = DefaultLogMaxSize
	}
	if opts.LogMaxFiles == "" {
		opts.LogMaxFiles = DefaultLogMaxFiles
	}
	if opts.RunDirSize <= 0 {
		opts.RunDirSize = DefaultRunDirSize
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	for k := range opts.Labels {
		if strings.HasPrefix(k, sandbox.ReservedLabelPrefix+"managed") || k == sandbox.LabelSession || k == LabelScope {
			return nil, fmt.Errorf("docker runtime: label %q is set by sandboxd itself", k)
		}
	}
	r := &Runtime{cli: opts.Client, opts: opts, log: opts.Logger.With("component", "docker")}
	if r.cli == nil {
		cli, err := client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return nil, fmt.Errorf("docker runtime: engine client: %w", err)
		}
		r.cli, r.ownClient = cli, true
	}
	pctx, cancel := context.WithTimeout(ctx, opts.CallTimeout)
	defer cancel()
	ping, err := r.cli.Ping(pctx)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("docker runtime: the engine at %s does not answer: %w", r.cli.DaemonHost(), err)
	}
	// Negotiate now, from this ping: otherwise the client negotiates on its
	// first request and, until then, reports its own maximum version.
	r.cli.NegotiateAPIVersionPing(ping)
	if !strings.HasPrefix(r.cli.DaemonHost(), "unix://") {
		r.opts.CopyAgent = true
	}
	if r.opts.LookupHost == nil {
		r.opts.LookupHost = lookupHost
	}
	r.egress = r.opts.Egress
	if r.egress == nil {
		r.egress = egress.New(egress.Options{Resolve: r.opts.LookupHost, Refuse: refuseAddr, Logger: r.log})
		r.ownEgress = true
	}
	r.setupDirect(strings.HasPrefix(r.cli.DaemonHost(), "unix://"))
	r.fw, r.fwErr = newFirewall(ctx, ScopeOf(opts.Labels), strings.HasPrefix(r.cli.DaemonHost(), "unix://"))
	switch {
	case r.fw != nil:
		if err := r.syncFirewall(ctx); err != nil {
			r.Close()
			return nil, fmt.Errorf("docker runtime: host firewall: %w", err)
		}
	case r.opts.InsecureBridge:
		r.log.Warn("host firewall unavailable: bridge and internal sessions and HTTP/SSE sidecars can reach every service the host listens on beyond loopback "+
			"(accepted by --insecure-bridge-host-access); allow_hosts is refused", "why", r.fwErr)
	default:
		r.log.Warn("host firewall unavailable: bridge and internal sessions and HTTP/SSE sidecars are refused (--insecure-bridge-host-access accepts them unguarded)", "why", r.fwErr)
	}
	path := opts.AgentBinary
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			r.Close()
			return nil, fmt.Errorf("docker runtime: locating the running binary for the agent: %w", err)
		}
		path = exe
	}
	ab, err := checkAgentBinary(path)
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("docker runtime: %w", err)
	}
	ab.scope = ScopeOf(opts.Labels)
	r.agent = ab
	r.pruneStaleAgentVolumes(pctx)
	r.warnSecurity(pctx)
	r.probeRuntimes(ctx)
	r.quota = r.probeQuota(ctx)
	quotas := "available, in " + r.quota.dir
	if r.quota.err != nil {
		quotas = "unavailable: " + r.quota.err.Error()
	}
	r.log.Info("docker runtime ready", "engine", r.cli.DaemonHost(), "api", r.cli.ClientVersion(), "engine_api", ping.APIVersion,
		"agent", ab.path, "agent_delivery", map[bool]string{true: "copied volume", false: "bind mount"}[r.opts.CopyAgent],
		"host_firewall", r.fw != nil, "disk_quotas", quotas, "oci_runtimes", r.Runtimes(), "direct_path", directState(r.directErr))
	return r, nil
}

// Egress is the server of the runtime's egress proxies (Options.Egress or
// its own): Denials lists a session's.
func (r *Runtime) Egress() *egress.Server { return r.egress }

// Client is the engine client (for tests and tools built on the runtime).
func (r *Runtime) Client() *client.Client { return r.cli }

// Close removes the runtime's shared resources that no sandbox uses
// (pruneAtClose) and releases the engine client if the runtime made it.
// Sandboxes are left alone.
func (r *Runtime) Close() error {
	if r.ownEgress && r.egress != nil {
		r.egress.Close()
	}
	r.pruneAtClose()
	if r.ownClient {
		return r.cli.Close()
	}
	return nil
}

// call returns a context for one engine call, bounded by CallTimeout.
func (r *Runtime) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, r.opts.CallTimeout)
}

// LabelScope names the set of Options.Labels a resource was made under:
// "default" for none, else a hash of them. Listing requires the runtime's
// own scope exactly, so a server without labels never adopts or reaps the
// resources of one with labels (say, a test run on the same engine), and
// neither do servers whose label sets merely overlap.
const LabelScope = "sandboxd.scope"

// ScopeOf is the LabelScope value of a runtime with the given Options.Labels.
func ScopeOf(labels map[string]string) string { return sandbox.ScopeOf(labels) }

// labels are spec's labels plus the runtime's own.
func (r *Runtime) labels(base map[string]string) map[string]string {
	l := make(map[string]string, len(base)+len(r.opts.Labels)+1)
	maps.Copy(l, base)
	maps.Copy(l, r.opts.Labels)
	l[LabelScope] = ScopeOf(r.opts.Labels)
	return l
}

// filter selects the resources of this runtime (and of one session if id
// is not empty).
func (r *Runtime) filter(id string) filters.Args {
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true"),
		filters.Arg("label", LabelScope+"="+ScopeOf(r.opts.Labels)))
	for k, v := range r.opts.Labels {
		f.Add("label", k+"="+v)
	}
	if id != "" {
		f.Add("label", sandbox.LabelSession+"="+id)
	}
	return f
}

// Resource names. Deterministic, so a repeated create hits a conflict
// instead of making a twin.
func containerName(id string, pooled bool) string {
	if pooled {
		return "sandboxd-pool-" + id
	}
	return "sandboxd-" + id
}

func workspaceVolume(id string) string { return "sandboxd-" + id + "-workspace" }
func homeVolume(id string) string      { return "sandboxd-" + id + "-home" }

// editableVolume names the volume of the session's i-th editable path.
func editableVolume(id string, i int) string { return "sandboxd-" + id + "-edit" + strconv.Itoa(i) }

func networkName(id string) string { return "sandboxd-" + id }

// wrap adds the sandbox sentinel for a missing object.
func wrap(err error, format string, args ...any) error {
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf(format, args...)
	if isNotFound(err) {
		return fmt.Errorf("%s: %w: %w", msg, sandbox.ErrNotFound, err)
	}
	return fmt.Errorf("%s: %w", msg, err)
}

func isNotFound(err error) bool {
	return err != nil && (cerrdefs.IsNotFound(err) || errors.Is(err, errNotFound))
}

var errNotFound = errors.New("not found")

// warnSecurity says at start what the engine cannot enforce. Seccomp is the
// line sandboxes rely on (every container gets sandboxd's profile: without
// engine support it would be silently absent); AppArmor adds a second one
// where the host has it.
func (r *Runtime) warnSecurity(ctx context.Context) {
	info, err := r.cli.Info(ctx)
	if err != nil {
		r.log.Warn("docker runtime: cannot read the engine's security options", "err", err)
		return
	}
	for _, w := range securityWarnings(info.SecurityOptions) {
		r.log.Warn("docker runtime: " + w)
	}
}

// securityWarnings reads the engine's SecurityOptions ("name=seccomp,
// profile=default", "name=apparmor", ...).
func securityWarnings(opts []string) []string {
	has := func(name string) bool {
		return slices.ContainsFunc(opts, func(o string) bool {
			return o == "name="+name || strings.HasPrefix(o, "name="+name+",")
		})
	}
	var out []string
	if !has("seccomp") {
		out = append(out, "the engine reports no seccomp support: sandboxes run WITHOUT a syscall filter; do not run untrusted code on this host")
	}
	if !has("apparmor") && !has("selinux") {
		out = append(out, "the host has no AppArmor or SELinux: sandboxes rely on seccomp, dropped capabilities and no-new-privileges alone (see docs/security.md)")
	}
	return out
}
