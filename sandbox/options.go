package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"time"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/bash"
	"github.com/sandboxd/sandboxd/tools/builtin"
)

// Paths inside every sandbox. They are part of the contract between the host
// and the agent binary, so they are constants, not options.
const (
	// AgentDir holds the agent binary, mounted read-only.
	AgentDir = "/.sandboxd"
	// AgentPath is the agent binary: the container's main process (under
	// the engine's init) and the target of `docker exec ... agent-proxy`.
	AgentPath = AgentDir + "/sandboxd"
	// RunDir is a small tmpfs owned by the session user for the agent's
	// socket and state; it exists so the read-only root stays read-only.
	RunDir = "/run/sandboxd"
	// AgentSocket is the agent's unix socket: a second way in, used to
	// reconnect (agent-proxy) after the daemon restarts.
	AgentSocket = RunDir + "/agent.sock"
	// AgentStateDir holds files the tools keep for the model (full output
	// of truncated commands).
	AgentStateDir = RunDir + "/state"
	// DirectDir is where a runtime that offers the direct path (decision
	// 0035) mounts the session's folder of the daemon's, read-only: the
	// agent dials the daemon's socket in it.
	DirectDir = RunDir + "/direct"
	// WorkspaceDir is the session's writable, persistent directory: a named
	// volume per session. File transfers are confined to it.
	WorkspaceDir = "/workspace"
	// SkillsDir is where the session's selected skills are mounted,
	// read-only, each at SkillsDir/<its path>.
	SkillsDir = "/skills"
	// FallbackHome is the session's home directory (and HOME) when neither
	// the session's Env nor the image's environment names a usable one
	// (none, "/", a top-level system folder such as /usr or /etc, or a path
	// inside /proc, /sys, /dev or sandboxd's own folders). Wherever HOME is, it is a writable volume of its own (see
	// SessionOptions.Env), so `git config --global`, `pip install --user`
	// and ~/.cache work on a read-only root.
	FallbackHome = "/home/sandboxd"
)

// Network modes of SessionOptions.Network. Any other value names an existing
// engine network that the session joins and that sandboxd neither makes nor
// firewalls: only one the operator lists by name (ManagerOptions.Networks),
// never sandboxd's own or the engine's predefined ones.
const (
	// NetworkNone (the default): loopback only; no DNS, no egress, no way to
	// the host or other sandboxes. The agent needs no network.
	NetworkNone = "none"
	// NetworkBridge: a private bridge network per session, created and
	// removed with it, with egress through the host's NAT. Never the
	// engine's shared default bridge.
	NetworkBridge = "bridge"
	// NetworkInternal: a private internal network per session: reachable
	// from the host by IP (sidecars, proxies), no egress.
	NetworkInternal = "internal"
)

// Values of SessionOptions.Skills and SessionOptions.SkillsInstall.
const (
	// SkillsAll selects every top-level skill of every root.
	SkillsAll = "all"
	// SkillsInstallLazy runs a skill's installer before its first call.
	SkillsInstallLazy = "lazy"
	// SkillsInstallEager runs the installers when the sandbox starts.
	SkillsInstallEager = "eager"
)

// UserImage as SessionOptions.User runs the session as the image's USER
// (root when the image names none), with the image's own ownership in the
// volumes: the image as its evaluation harness expects it (decision 0028).
// Capabilities, no-new-privileges, seccomp, the limits and the network
// stay as for any session; what root in the sandbox gives up is written
// in docs/security.md. On the APIs only a session profile of the server's
// config may set it.
const UserImage = "image"

// Values of SessionOptions.ShellInit (decision 0042).
const (
	// ShellInitNone (the default, also ""): the terminal's shell reads no
	// rc file of the image; it starts the same way in every image.
	ShellInitNone = "none"
	// ShellInitImage: the terminal's shell reads the image's environment
	// before its first prompt, so the venv or conda activation a task
	// image makes in its user's ~/.bashrc applies: the image's BASH_ENV
	// (ENV for a POSIX sh), then the .bashrc in the home folder of the
	// image's USER (its HOME, else its /etc/passwd entry; root's /root).
	// The files run as the session user; the terminal's prompt plumbing is
	// set after them, and a file that does not finish within the terminal's
	// start timeout fails the start with an error naming shell_init.
	ShellInitImage = "image"
)

// Values of SessionOptions.ToolSet (decision 0046): builtin's sets.
const (
	ToolSetOpenHands = builtin.SetOpenHands
	ToolSetOpenAI    = builtin.SetOpenAI
	ToolSetBoth      = builtin.SetBoth
)

// Values of SessionOptions.Entrypoint (decision 0042).
const (
	// EntrypointNone (the default, also ""): the image's ENTRYPOINT and
	// CMD do not run; the agent is the sandbox's only program.
	EntrypointNone = "none"
	// EntrypointImage: the agent starts the image's ENTRYPOINT + CMD as a
	// supervised background process (as the session user, in the image's
	// WORKDIR, under the session's limits) before it serves the first
	// call; its output goes to EntrypointLog, an exit is logged there and
	// restarted at most a few times, and it ends with the session.
	EntrypointImage = "image"
	// EntrypointLog is where the output of the image's entrypoint goes
	// (with EntrypointLog+".1", the previous part, once it has grown past
	// the agent's cap): readable by the session's tools.
	EntrypointLog = AgentStateDir + "/entrypoint.log"
)

// NoIdleTimeout as SessionOptions.IdleTimeout keeps a session until it is
// closed explicitly.
const NoIdleTimeout time.Duration = -1

// Built-in defaults, used for every field left zero in both the
// SessionOptions of a call and ManagerOptions.Defaults.
const (
	DefaultImage  = "sandboxd-default:latest"
	DefaultUser   = "1000:1000"
	DefaultMemory = 1 << 30
	DefaultCPUs   = 1.0
	DefaultPids   = 512
	// DefaultTmpfs is the size of /tmp when neither the call nor the
	// manager's defaults set one, lowered to what the session's memory
	// leaves (see Resolve), so a smaller Memory alone stays valid.
	DefaultTmpfs       = 256 << 20
	DefaultIdleTimeout = 30 * time.Minute
	// DefaultNoChangeTimeout is TerminalOptions.NoChangeTimeout's default:
	// the terminal's own.
	DefaultNoChangeTimeout = bash.DefaultSoftTimeout
)

// Limits bound what a session may use. Zero fields take defaults.
type Limits struct {
	// Memory in bytes; swap is limited to the same amount (no swap).
	// tmpfs pages (/tmp, a Disk-limited workspace and home) count against
	// it and cannot be reclaimed, so Tmpfs plus the Disk-limited volumes
	// must leave MemoryHeadroom of it free (checked by Validate).
	Memory int64 `json:"memory,omitempty"`
	// CPUs, fractional (0.5 = half a core).
	CPUs float64 `json:"cpus,omitempty"`
	// Pids caps processes and threads (fork-bomb guard).
	Pids int64 `json:"pids,omitempty"`
	// Tmpfs is the size of /tmp in bytes. Left zero: DefaultTmpfs, or
	// less when Memory (and Disk) leave less (see Resolve).
	Tmpfs int64 `json:"tmpfs,omitempty"`
	// Disk caps /workspace and the home volume in bytes (each). 0 leaves
	// them ordinary engine volumes (bounded by DiskQuota, if set). When
	// set, both are size-limited tmpfs volumes owned by the session user:
	// they survive daemon restarts but not engine or host restarts, they are
	// charged to Memory, and they start empty (the engine cannot seed a
	// tmpfs volume with the image's content).
	Disk int64 `json:"disk,omitempty"`
	// DiskQuota caps /workspace, the home volume and each of EditablePaths
	// in bytes (each) on the host's disk: each is an ext4 filesystem of that size in a sparse file
	// of the runtime's, mounted through a loop device (decision 0022), so a
	// write past it fails with ENOSPC, its inodes are bounded too (one per
	// DiskBytesPerInode), and the host pays only for what is written. The
	// volumes are seeded from the image like ordinary ones and survive
	// daemon restarts. 0: no quota. Exclusive with Disk (a tmpfs limit); a
	// session that sets Disk takes no DiskQuota from the defaults.
	DiskQuota int64 `json:"disk_quota,omitempty"`
}

// TerminalOptions tune the terminal tool of a session. Zero fields take
// defaults.
type TerminalOptions struct {
	// NoChangeTimeout is the terminal's soft timeout: a command that prints
	// nothing new for this long returns with exit code -1 and keeps running
	// (OpenHands' no_change_timeout_seconds). Default
	// DefaultNoChangeTimeout; between MinNoChangeTimeout and
	// MaxNoChangeTimeout. A call's own `timeout` disables it for that call.
	NoChangeTimeout time.Duration `json:"no_change_timeout,omitempty"`
}

// SessionOptions describe a session. The zero value is valid: every zero
// field takes ManagerOptions.Defaults, then the built-in default.
//
// Every field takes part in the warm-pool key (a pooled container is only
// handed out to a request with the same resolved options), so a new field
// needs nothing more than a line in validate and, if it shapes the container,
// in the runtime.
type SessionOptions struct {
	// Image is the engine image; it needs a Linux userland and nothing of
	// sandboxd (the agent binary is mounted in).
	Image string `json:"image,omitempty"`
	// Env is added to the image's environment of the agent and its tools.
	// HOME (from here, else from the image, else FallbackHome) is a
	// per-session volume seeded with the image's content of that folder,
	// unless it lies in /workspace or /tmp, which are writable already.
	Env map[string]string `json:"env,omitempty"`
	// Cwd is the initial working directory of the terminal. Empty (the
	// default): the image's WORKDIR when it names one other than "/", else
	// WorkspaceDir. A missing one under WorkspaceDir is created (owned by
	// the session user); one elsewhere must exist in the image, else the
	// create fails with ErrInvalidOptions. It need not be writable.
	Cwd string `json:"cwd,omitempty"`
	// User is who the session runs as: "uid" or "uid:gid", numeric and
	// never 0 (default 1000:1000), or UserImage: the image's USER, root
	// included, as an evaluation harness runs its images (decision 0028).
	// Every capability stays dropped either way; see UserImage for what
	// the second gives up.
	User string `json:"user,omitempty"`
	// Limits on memory, CPU, processes, /tmp and /workspace.
	Limits Limits `json:"limits"`
	// Network is NetworkNone (default), NetworkBridge, NetworkInternal, or
	// the exact name of an engine network the operator allows
	// (ManagerOptions.Networks; see CheckNetworkName).
	Network string `json:"network,omitempty"`
	// AllowHosts, with NetworkBridge only, limits the session's egress to
	// these hosts: names and "*.suffix" wildcards (not covering the apex),
	// over HTTP and TLS through the session's egress proxy, which
	// resolves them at each connection (decision 0050; HTTP(S)_PROXY set,
	// ports 80 and 443 and DNS redirected to it), and IP addresses and
	// CIDR prefixes, any port, by firewall rules. Everything else is
	// refused. Empty: any egress (the host itself is never reachable from
	// a bridge session either way). At most MaxAllowHosts entries.
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// Inject are headers set on the sandbox's requests to allowed hosts,
	// with the daemon's secrets in their values; the sandbox holds
	// placeholders (InjectRule, decision 0051). Network NetworkBridge,
	// each host allowed by name in AllowHosts, at most MaxInjectRules.
	// Operator profiles only: the APIs have no field for it, and a
	// request's options take the profile's.
	Inject []InjectRule `json:"inject,omitempty"`
	// IdleTimeout closes the session when no call was made for that long.
	// Default 30 minutes; NoIdleTimeout keeps it until closed.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// Labels are added to the session's container, volume and network.
	// Keys under the "sandboxd." prefix are reserved.
	Labels map[string]string `json:"labels,omitempty"`
	// EditablePaths are folders of the image that the session must be
	// able to change although the root filesystem is read-only: a task's
	// repository (/testbed), a Python environment under /opt. Each becomes
	// a volume of its own at the same path, seeded with the image's
	// content there, every entry owned by the session user (with
	// UserImage: owned as in the image), bounded by Limits.DiskQuota like
	// /workspace and removed with the session; a folder the image lacks
	// starts empty. Files may be uploaded to and downloaded from them as
	// from /workspace. At most MaxEditablePaths, each absolute and clean,
	// none inside another, and none of "/", a top-level system folder
	// (/usr, /etc, ...), /tmp, /workspace, SkillsDir or a path in /proc,
	// /sys, /dev or sandboxd's own folders. Decision 0028.
	EditablePaths []string `json:"editable_paths,omitempty"`
	// Tools the agent serves, as factory specs (name + params); empty is
	// every built-in tool (terminal, file_editor, grep, glob). The
	// terminal starts in the session's working directory (Cwd) unless its
	// params set "dir".
	Tools []tools.Spec `json:"tools,omitempty"`
	// ToolSet picks the built-in tools by contract when Tools is empty:
	// ToolSetOpenHands (default: terminal, file_editor, grep, glob),
	// ToolSetOpenAI (OpenAI's shell and apply_patch, grep, glob) or
	// ToolSetBoth (all six, the terminal and shell on one shell, the
	// file_editor and apply_patch on one undo history). Skills and sidecar
	// tools come with any. Exclusive with Tools. Decision 0046.
	ToolSet string `json:"tool_set,omitempty"`
	// WritableRootfs leaves the container's root filesystem writable (its
	// copy-on-write layer) instead of read-only, for harness images that
	// write outside /workspace, HOME and /tmp at run time. It grants no
	// privilege: the session user can write only where the image's
	// ownership and modes let it (installing system packages as root is
	// still impossible), and the writes land on the engine's disk without
	// a bound, so it cannot be combined with Limits.Disk. Default false;
	// true in ManagerOptions.Defaults turns it on for every session.
	WritableRootfs bool `json:"writable_rootfs,omitempty"`
	// Runtime is the engine's OCI runtime for the sandbox, e.g. "runsc"
	// (gVisor: a user-space kernel between the sandbox's code and the
	// host's, decision 0024). Empty: the engine's default (runc). A runtime
	// the engine does not have fails the create with ErrInvalidOptions
	// naming the ones it has; there is never a fallback to another.
	Runtime string `json:"runtime,omitempty"`
	// Skills selects the session's skills from the manager's skill roots by
	// path prefix, as OpenSage's enabled_skills: "fuzz" selects the skill
	// at fuzz and every skill under it, "fuzz/run-campaign" that one only,
	// SkillsAll every top-level skill. Empty: none. Clients never name host
	// paths. The selected skills are mounted read-only at SkillsDir/<path>
	// and become tools (load_skill, and one tool per executable skill).
	Skills []string `json:"skills,omitempty"`
	// SkillsInstall is when the selected skills' dependency installers run:
	// SkillsInstallLazy (default: before a skill's first call) or
	// SkillsInstallEager (when the sandbox starts, before it is handed out).
	SkillsInstall string `json:"skills_install,omitempty"`
	// Terminal tunes the session's terminal tool.
	Terminal TerminalOptions `json:"terminal"`
	// MCPServers are MCP servers run as sidecar containers of the session
	// (at most MaxMCPServers); their tools become the session's, named
	// <server>__<tool>. Secrets never travel here: only names do.
	MCPServers []MCPServer `json:"mcp_servers,omitempty"`

	// ShellInit is ShellInitNone (default) or ShellInitImage: whether the
	// terminal's shell reads the image's rc files (its user's ~/.bashrc,
	// its BASH_ENV) at start, so a venv or conda activation applies.
	ShellInit string `json:"shell_init,omitempty"`
	// Entrypoint is EntrypointNone (default) or EntrypointImage: whether
	// the agent starts the image's ENTRYPOINT + CMD as a supervised
	// background process before the first call (a service the image
	// starts at entry).
	Entrypoint string `json:"entrypoint,omitempty"`

	// Room for later options (skills, MCP sidecars): add the field here,
	// its checks to Validate, and its effect to the runtime; the pool key
	// and the adoption label follow by themselves.
}

// Over lays o over base: each field o leaves zero takes base's, Env and
// Labels are merged (o's entries win), WritableRootfs is on if either sets
// it. It is how a request's fields overlay a session profile's; the result
// still takes the manager's defaults in Resolve.
func (o SessionOptions) Over(base SessionOptions) SessionOptions { return o.withDefaults(base) }

// withDefaults fills zero fields from d.
func (o SessionOptions) withDefaults(d SessionOptions) SessionOptions {
	if o.Image == "" {
		o.Image = d.Image
	}
	if o.Cwd == "" {
		o.Cwd = d.Cwd
	}
	if o.User == "" {
		o.User = d.User
	}
	if o.Network == "" {
		// allow_hosts narrows a network: it comes with d's network only.
		if o.AllowHosts == nil {
			o.AllowHosts = d.AllowHosts
		}
		o.Network = d.Network
	}
	if o.Runtime == "" {
		o.Runtime = d.Runtime
	}
	if o.IdleTimeout == 0 {
		o.IdleTimeout = d.IdleTimeout
	}
	if o.Limits.Memory == 0 {
		o.Limits.Memory = d.Limits.Memory
	}
	if o.Limits.CPUs == 0 {
		o.Limits.CPUs = d.Limits.CPUs
	}
	if o.Limits.Pids == 0 {
		o.Limits.Pids = d.Limits.Pids
	}
	if o.Limits.Tmpfs == 0 {
		o.Limits.Tmpfs = d.Limits.Tmpfs
	}
	// Disk (tmpfs) and DiskQuota (loop ext4) are two ways to bound the same
	// volumes: a session that asks for one takes neither from d.
	if o.Limits.Disk == 0 && o.Limits.DiskQuota == 0 {
		o.Limits.Disk, o.Limits.DiskQuota = d.Limits.Disk, d.Limits.DiskQuota
	}
	if len(o.Tools) == 0 && o.ToolSet == "" { // one choice: the specs or a set
		o.Tools, o.ToolSet = d.Tools, d.ToolSet
	}
	if o.Skills == nil {
		o.Skills = d.Skills
	}
	if o.SkillsInstall == "" {
		o.SkillsInstall = d.SkillsInstall
	}
	if o.ShellInit == "" {
		o.ShellInit = d.ShellInit
	}
	if o.Entrypoint == "" {
		o.Entrypoint = d.Entrypoint
	}
	if o.Terminal.NoChangeTimeout == 0 {
		o.Terminal.NoChangeTimeout = d.Terminal.NoChangeTimeout
	}
	if o.EditablePaths == nil {
		o.EditablePaths = d.EditablePaths
	}
	if o.MCPServers == nil {
		o.MCPServers = d.MCPServers
	}
	if o.Inject == nil {
		o.Inject = d.Inject
	}
	o.WritableRootfs = o.WritableRootfs || d.WritableRootfs
	o.Env = mergeMaps(d.Env, o.Env)
	o.Labels = mergeMaps(d.Labels, o.Labels)
	return o
}

// withDefaults fills l's zero memory, CPU and pids limits from d.
func (l Limits) withDefaults(d Limits) Limits {
	if l.Memory == 0 {
		l.Memory = d.Memory
	}
	if l.CPUs == 0 {
		l.CPUs = d.CPUs
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	return l
}

// builtinDefaults are the last layer of defaults. Tmpfs is not among
// them: it follows Memory (see defaultTmpfs).
var builtinDefaults = SessionOptions{
	Image:       DefaultImage,
	User:        DefaultUser,
	Network:     NetworkNone,
	IdleTimeout: DefaultIdleTimeout,
	Terminal:    TerminalOptions{NoChangeTimeout: DefaultNoChangeTimeout},
	Limits: Limits{
		Memory: DefaultMemory,
		CPUs:   DefaultCPUs,
		Pids:   DefaultPids,
	},
}

// Resolve applies defaults (then the built-in ones) to o and validates the
// result. The returned options are complete: what a session runs with.
func (o SessionOptions) Resolve(defaults SessionOptions) (SessionOptions, error) {
	r := o.withDefaults(defaults).withDefaults(builtinDefaults)
	if r.Limits.Tmpfs == 0 {
		r.Limits.Tmpfs = defaultTmpfs(r)
	}
	// "none" is the default spelled out: resolved as "", so that it makes
	// the same pool key (and options label) as before these options were.
	if r.ShellInit == ShellInitNone {
		r.ShellInit = ""
	}
	if r.Entrypoint == EntrypointNone {
		r.Entrypoint = ""
	}
	if r.ToolSet == ToolSetOpenHands {
		r.ToolSet = ""
	}
	if len(r.MCPServers) > 0 {
		servers := make([]MCPServer, len(r.MCPServers))
		for i, s := range r.MCPServers {
			servers[i] = s.withDefaults(r.Limits)
		}
		r.MCPServers = servers
	}
	if err := r.Validate(); err != nil {
		return SessionOptions{}, err
	}
	return r, nil
}

// defaultTmpfs is the size of /tmp for resolved options that set none:
// DefaultTmpfs, or what Memory leaves beside MemoryHeadroom and the
// Disk-limited volumes, in whole MiB, but never below MinTmpfs (if even
// that does not fit, Validate says what to change).
func defaultTmpfs(o SessionOptions) int64 {
	left := o.Limits.Memory - MemoryHeadroom(o.Limits.Memory) - int64(o.diskVolumes())*o.Limits.Disk
	return max(MinTmpfs, min(DefaultTmpfs, left&^(1<<20-1)))
}

// Key identifies the container a set of resolved options makes: equal keys
// mean interchangeable warm-pool containers.
func (o SessionOptions) Key() string {
	b, err := json.Marshal(o) // map keys are sorted, so this is canonical
	if err != nil {
		panic(err) // only plain types: cannot happen
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// encode is the options label of a session's container.
func (o SessionOptions) encode() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// decodeOptions parses an options label.
func decodeOptions(s string) (SessionOptions, error) {
	var o SessionOptions
	err := json.Unmarshal([]byte(s), &o)
	return o, err
}

func mergeMaps(base, over map[string]string) map[string]string {
	if len(base) == 0 && len(over) == 0 {
		return nil
	}
	m := make(map[string]string, len(base)+len(over))
	maps.Copy(m, base)
	maps.Copy(m, over)
	return m
}
