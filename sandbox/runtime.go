package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/sandbox/sidecar"
)

// Labels sandboxd puts on every container, volume and network it creates.
// They are the only record of a session outside the daemon's memory: a
// restarted daemon finds, adopts and reaps by them.
const (
	LabelManaged = "sandboxd.managed" // "true"
	LabelSession = "sandboxd.session" // session id
	LabelImage   = "sandboxd.image"   // image reference the session asked for
	LabelCreated = "sandboxd.created" // RFC 3339 creation time
	LabelOptions = "sandboxd.options" // resolved SessionOptions as JSON (containers)
	LabelPool    = "sandboxd.pool"    // pool key, on containers started for a warm pool
	// LabelSidecar is the MCP server name on a session's sidecar
	// containers (MCPServer.Name); the sandbox's own container has none.
	LabelSidecar = "sandboxd.sidecar"
)

// Runtime is the container engine behind the Manager. It speaks of
// sessions by id; which containers, volumes and networks make one is its
// business. Every method is safe for concurrent use and honours ctx.
type Runtime interface {
	// Start creates the sandbox of spec, connects to the stdio of
	// spec.Command and starts it as the sandbox's main process. The stream
	// is the agent's framed protocol; closing it leaves the sandbox
	// running. On error nothing of the session is left behind.
	Start(ctx context.Context, spec Spec) (io.ReadWriteCloser, error)
	// Connect opens a new stream to the agent of a running sandbox by
	// running ProxyCommand in it, which bridges to the agent's unix
	// socket; used to adopt sessions after a restart and to reconnect
	// when the first stream breaks.
	Connect(ctx context.Context, sessionID string) (io.ReadWriteCloser, error)
	// Claim records that a sandbox started for a warm pool was handed out,
	// so that a restarted daemon adopts it rather than recycling it.
	Claim(ctx context.Context, sessionID string) error
	// Inspect reports the state of a session's sandbox; an error wrapping
	// ErrNotFound if it has none.
	Inspect(ctx context.Context, sessionID string) (Status, error)
	// List returns every resource carrying this runtime's labels.
	List(ctx context.Context) ([]Resource, error)
	// Remove deletes everything of a session (container, its processes,
	// volumes, networks, and the runtime's files behind volumes, such as
	// KindDisk). Removing what is already gone is no error.
	Remove(ctx context.Context, sessionID string) error
}

// Spec is what a Runtime needs to make one session's sandbox.
type Spec struct {
	SessionID string
	Options   SessionOptions    // resolved and validated
	Labels    map[string]string // for every resource of the session (see Labels)
	// Command is the sandbox's main process, AgentCommand(Options): the
	// runtime runs it as given, in place of any entrypoint of the image,
	// so that what the agent serves is decided here for every runtime. It
	// runs in Options.Cwd, or when that is empty in the image's working
	// directory if the image names one other than "/", else in
	// WorkspaceDir (the agent's terminal starts there); as Options.User,
	// or for UserImage as the image's user.
	Command []string
	// Skills are the folders of the selected skills, shown read-only at
	// SkillsDir/<Path> (SessionOptions.Skills, resolved by the manager).
	Skills []SkillMount
	// Pooled marks a sandbox started for a warm pool; it counts as not
	// handed out until Claim.
	Pooled bool
}

// SessionLabels are the labels of every resource of a session.
func SessionLabels(id string, o SessionOptions, poolKey string, created time.Time) map[string]string {
	l := make(map[string]string, len(o.Labels)+6)
	for k, v := range o.Labels {
		l[k] = v
	}
	l[LabelManaged] = "true"
	l[LabelSession] = id
	l[LabelImage] = o.Image
	l[LabelCreated] = created.UTC().Format(time.RFC3339Nano)
	l[LabelOptions] = o.encode()
	if poolKey != "" {
		l[LabelPool] = poolKey
	}
	return l
}

// ResourceKind names what a Resource is.
type ResourceKind string

const (
	KindContainer ResourceKind = "container"
	KindVolume    ResourceKind = "volume"
	KindNetwork   ResourceKind = "network"
	// KindDisk is a file of the runtime's behind a session's volume (a
	// quota-bound volume's backing file); Remove deletes it with the rest.
	KindDisk ResourceKind = "disk"
	// KindDirect is a session's host folder of the direct path to its
	// agent (DirectRuntime); Remove deletes it with the rest.
	KindDirect ResourceKind = "direct"
)

// Resource is one labelled thing in the engine.
type Resource struct {
	Kind      ResourceKind
	ID        string
	Name      string
	SessionID string // LabelSession; empty for shared resources
	Labels    map[string]string
	// Containers only.
	Running bool
	Paused  bool // frozen (PauseRuntime); Running is false
	Pooled  bool // started for a warm pool and never claimed
	// Outdated says why the container was made with other settings than
	// this runtime would use now (e.g. an older seccomp profile); "" if
	// it is current. Reclaim does not put an outdated container back into
	// a pool; a claimed one is adopted (its session lives on) with a
	// warning.
	Outdated string
}

// Status is the state of a session's sandbox.
type Status struct {
	Running   bool
	Paused    bool // frozen (PauseRuntime); Running is false
	ExitCode  int
	OOMKilled bool
	Error     string // the engine's error, e.g. why it could not start
	// Reason is why the engine ended the sandbox, when it says (on
	// Kubernetes: evicted past its disk limit, past its deadline): it
	// replaces the guess Describe makes from the exit code.
	Reason     string
	StartedAt  time.Time
	FinishedAt time.Time
}

// Describe says in a sentence what happened to a sandbox that stopped.
func (s Status) Describe() string {
	if s.Running {
		return "its container is running but the agent does not answer"
	}
	msg := fmt.Sprintf("its container exited with code %d", s.ExitCode)
	// The engine's OOMKilled stays set once any process of the container
	// was OOM-killed, so it explains only a SIGKILL exit.
	switch {
	case s.Reason != "":
		msg += " (" + s.Reason + ")"
	case s.OOMKilled && s.ExitCode == 137:
		msg += " (killed: out of memory; raise limits.memory)"
	case s.ExitCode == 137:
		msg += " (SIGKILL: killed from outside sandboxd, e.g. docker kill, or by a process in the sandbox)"
	case s.ExitCode == 143:
		msg += " (SIGTERM: stopped from outside sandboxd, or by a process in the sandbox)"
	case s.ExitCode > 128:
		msg += fmt.Sprintf(" (killed by signal %d)", s.ExitCode-128)
	}
	if s.Error != "" {
		msg += ": " + s.Error
	}
	return msg
}

// SidecarRuntime is implemented by runtimes that run a session's MCP
// servers in containers of their own (SessionOptions.MCPServers). The
// sidecars carry the session's labels plus LabelSidecar, so Remove, the
// reaper and reclaim handle them with the session.
type SidecarRuntime interface {
	// StartSidecar starts one sidecar of a session, replacing any
	// container it had under that name (a restart), and connects to it.
	StartSidecar(ctx context.Context, spec SidecarSpec) (*sidecar.Conn, error)
}

// SidecarSpec is what a runtime needs to start one MCP sidecar.
type SidecarSpec struct {
	SessionID string
	Server    MCPServer         // resolved (MCPServer.withDefaults)
	Labels    map[string]string // the session's (SessionLabels)
	Env       map[string]string // Server.Env with the secrets resolved: never logged or labelled
}

// Sidecar settings that MCPServer does not declare.
const (
	// SidecarTmpfs is the size of a sidecar's /tmp.
	SidecarTmpfs = 16 << 20
	// SidecarUser is the user a sidecar runs as unless its profile says
	// UserImage: never root.
	SidecarUser = DefaultUser
)

// ScopeOf is a runtime's scope for its labels (the value of its scope
// label): "default" for none, else a hash of them, the same for every
// runtime, so a server never adopts or reaps what a server with other
// labels made.
func ScopeOf(labels map[string]string) string {
	if len(labels) == 0 {
		return "default"
	}
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		fmt.Fprintf(h, "%q=%q\n", k, labels[k])
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}
