package sandbox

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bounds checked by Validate. The minimums are what the agent and a shell
// need to start; the maximums of sizes guard the daemon, not the sandbox.
const (
	MinMemory = 64 << 20
	MinCPUs   = 0.01
	MinPids   = 32
	MinTmpfs  = 1 << 20
	MinDisk   = 16 << 20
	// MinDiskQuota is the smallest Limits.DiskQuota: an ext4 filesystem
	// that size keeps most of it for files (its journal and tables take
	// about 2 MiB).
	MinDiskQuota = 16 << 20
	// MaxDiskQuota bounds Limits.DiskQuota (16 TiB, ext4's limit for a
	// file with 4 KiB blocks is far above; this guards against typos).
	MaxDiskQuota   = 16 << 40
	MinIdleTimeout = 100 * time.Millisecond
	// MinNoChangeTimeout and MaxNoChangeTimeout bound
	// TerminalOptions.NoChangeTimeout.
	MinNoChangeTimeout = 100 * time.Millisecond
	MaxNoChangeTimeout = 24 * time.Hour
	// MinMemoryHeadroom is the least memory that Limits.Memory keeps
	// beyond the tmpfs mounts (see MemoryHeadroom).
	MinMemoryHeadroom = 48 << 20
	maxEnvBytes       = 128 << 10
	maxLabelBytes     = 16 << 10
	maxToolsBytes     = 64 << 10
	// MaxAllowHosts bounds SessionOptions.AllowHosts: each entry becomes
	// firewall rules on the host (a name one per address).
	MaxAllowHosts = 64
)

// Options that other problems' texts name (see Field).
const (
	fieldMemory Field = "limits.memory"
	fieldTmpfs  Field = "limits.tmpfs"
	fieldDisk   Field = "limits.disk"
	// fieldDiskQuota: Limits.DiskQuota.
	fieldDiskQuota Field = "limits.disk_quota"
)

// ImageEnvPrefix starts the environment variables in which a runtime tells
// the agent about the image (shell_init and entrypoint: image; decision
// 0042); a session's env may not set them.
const ImageEnvPrefix = "SANDBOXD_IMAGE_"

// ReservedLabelPrefix is the label namespace sandboxd uses for its own
// bookkeeping; sessions may not set labels in it.
const ReservedLabelPrefix = "sandboxd."

var (
	envNameRe     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	imageRe       = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._:/@+-]*$`)
	networkNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)
	labelKeyRe    = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/-]*$`)
	toolNameRe    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)
	runtimeNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	hostLabelRe   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$`)
)

// Validate checks resolved options (see Resolve) and reports every problem
// at once in an *OptionsError.
func (o SessionOptions) Validate() error {
	var p problems
	if o.Image == "" {
		p.add("image", "is empty")
	} else if !imageRe.MatchString(o.Image) {
		p.add("image", "%q is not an image reference", o.Image)
	}
	o.validateEnv(&p)
	o.validateCwd(&p)
	if o.User != UserImage {
		if _, _, err := ParseUser(o.User); err != nil {
			p.add("user", "%v", err)
		}
	}
	o.validateEditablePaths(&p)
	o.Limits.validate(&p)
	o.validateTmpfsMemory(&p)
	if o.WritableRootfs && o.Limits.Disk != 0 {
		p.add("writable_rootfs", "cannot be combined with limits.disk: writes to the root filesystem land on the engine's disk, which limits.disk cannot bound")
	}
	o.validateNetwork(&p)
	validateAllowHosts(&p, "allow_hosts", o.Network, o.AllowHosts)
	o.validateInject(&p)
	if o.Runtime != "" && !runtimeNameRe.MatchString(o.Runtime) {
		p.add("runtime", "%q is not a runtime name (lower-case letters, digits, '.', '_' and '-', at most 64, e.g. \"runsc\")", o.Runtime)
	}
	if o.IdleTimeout >= 0 && o.IdleTimeout < MinIdleTimeout {
		p.add("idle_timeout", "%v is below the minimum of %v (use NoIdleTimeout to never close an idle session)", o.IdleTimeout, MinIdleTimeout)
	}
	if t := o.Terminal.NoChangeTimeout; t != 0 && (t < MinNoChangeTimeout || t > MaxNoChangeTimeout) {
		p.add("terminal.no_change_timeout", "%v is outside %v to %v", t, MinNoChangeTimeout, MaxNoChangeTimeout)
	}
	switch o.ShellInit {
	case "", ShellInitNone, ShellInitImage:
	default:
		p.add("shell_init", "%q is not %q or %q", o.ShellInit, ShellInitNone, ShellInitImage)
	}
	switch o.ToolSet {
	case "", ToolSetOpenHands, ToolSetOpenAI, ToolSetBoth:
		if o.ToolSet != "" && len(o.Tools) > 0 {
			p.add("tool_set", "cannot be combined with tools: give the tool specs or a set")
		}
	default:
		p.add("tool_set", "%q is not %q, %q or %q", o.ToolSet, ToolSetOpenHands, ToolSetOpenAI, ToolSetBoth)
	}
	switch o.Entrypoint {
	case "", EntrypointNone, EntrypointImage:
	default:
		p.add("entrypoint", "%q is not %q or %q", o.Entrypoint, EntrypointNone, EntrypointImage)
	}
	o.validateLabels(&p)
	o.validateTools(&p)
	o.validateSkills(&p)
	o.validateMCPServers(&p)
	return p.err()
}

// maxSkills bounds the selection prefixes of one session.
const maxSkills = 256

var skillPathRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127})*$`)

func (o SessionOptions) validateSkills(p *problems) {
	if len(o.Skills) > maxSkills {
		p.add("skills", "%d entries, above the limit of %d", len(o.Skills), maxSkills)
	}
	for i, s := range o.Skills {
		switch {
		case s == SkillsAll:
		case !skillPathRe.MatchString(s) || len(s) > 512:
			p.add("skills", "[%d]: %q is not a skill path prefix (relative, '/'-separated names such as \"fuzz\" or \"fuzz/run-campaign\", or %q)", i, s, SkillsAll)
		case strings.Contains("/"+s+"/", "/../") || strings.Contains("/"+s+"/", "/./"):
			p.add("skills", "[%d]: %q contains a '.' or '..' element", i, s)
		}
	}
	switch o.SkillsInstall {
	case "", SkillsInstallLazy, SkillsInstallEager:
	default:
		p.add("skills_install", "%q is not %q or %q", o.SkillsInstall, SkillsInstallLazy, SkillsInstallEager)
	}
}

func (o SessionOptions) validateTools(p *problems) {
	size := 0
	seen := map[string]bool{}
	for i, t := range o.Tools {
		size += len(t.Name) + len(t.Params)
		switch {
		case !toolNameRe.MatchString(t.Name):
			p.add("tools", "[%d]: %q is not a tool factory name", i, t.Name)
		case seen[t.Name]:
			p.add("tools", "%q is listed twice", t.Name)
		}
		seen[t.Name] = true
		if len(t.Params) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(t.Params, &obj); err != nil {
				p.add("tools", "params of %q are not a JSON object: %v", t.Name, err)
			}
		}
	}
	if size > maxToolsBytes {
		p.add("tools", "%d bytes in all, above the limit of %d", size, maxToolsBytes)
	}
}

func (o SessionOptions) validateEnv(p *problems) {
	size := 0
	for k, v := range o.Env {
		size += len(k) + len(v) + 2
		if !envNameRe.MatchString(k) {
			p.add("env", "%q is not a variable name (letters, digits and _, not starting with a digit)", k)
		}
		if strings.HasPrefix(k, ImageEnvPrefix) {
			p.add("env", "%q is under %s, which is reserved for what the runtime tells the agent of the image", k, ImageEnvPrefix)
		}
		if strings.ContainsRune(v, 0) {
			p.add("env", "the value of %s contains a NUL byte", k)
		}
	}
	if size > maxEnvBytes {
		p.add("env", "%d bytes in all, above the limit of %d", size, maxEnvBytes)
	}
}

func (o SessionOptions) validateCwd(p *problems) {
	switch {
	case o.Cwd == "": // the image's WORKDIR (checked by the runtime alike), else WorkspaceDir
	case !path.IsAbs(o.Cwd):
		p.add("cwd", "%q is not an absolute path", o.Cwd)
	case path.Clean(o.Cwd) != o.Cwd:
		p.add("cwd", "%q is not a clean path (did you mean %q?)", o.Cwd, path.Clean(o.Cwd))
	default:
		// A working directory in /proc can leak a host file descriptor into
		// the container (CVE-2024-21626); /sys and /dev have no business
		// being one either.
		if bad := KernelDir(o.Cwd); bad != "" {
			p.add("cwd", "%q is inside %s", o.Cwd, bad)
		}
		// A folder in a tmpfs that starts empty can never exist when the
		// session starts. (A missing cwd under WorkspaceDir is created; one
		// elsewhere is refused by the runtime, which sees the image.)
		for _, empty := range []string{"/tmp", RunDir} {
			if strings.HasPrefix(o.Cwd, empty+"/") {
				p.add("cwd", "%q is inside %s, which is empty when the session starts: use %s itself, or a folder under %s (created if missing)", o.Cwd, empty, empty, WorkspaceDir)
			}
		}
	}
}

// KernelDir is the kernel's folder (/proc, /sys or /dev) that p lies in,
// "" if none. A working directory in /proc can leak a host file descriptor
// into the container (CVE-2024-21626); /sys and /dev have no business
// being one either, nor a volume.
func KernelDir(p string) string {
	for _, dir := range []string{"/proc", "/sys", "/dev"} {
		if Within(p, dir) {
			return dir
		}
	}
	return ""
}

// Within reports whether path p is dir or lies under it (both clean).
func Within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

// systemDirs are the top-level folders of a Linux userland: no session's
// to replace with a volume (it would copy, say, all of /usr for every
// session and hide the image's own).
var systemDirs = map[string]bool{
	"/bin": true, "/boot": true, "/etc": true, "/lib": true, "/lib32": true, "/lib64": true,
	"/libx32": true, "/sbin": true, "/usr": true, "/var": true, "/run": true, "/home": true,
}

// IsSystemDir reports whether p is "/" or a top-level system folder
// (/usr, /etc, /var, /home, ...). Folders under them are not.
func IsSystemDir(p string) bool { return p == "/" || systemDirs[p] }

// SandboxdDir is the folder of sandboxd's own that p lies in (AgentDir,
// RunDir), "" if none.
func SandboxdDir(p string) string {
	for _, dir := range []string{AgentDir, RunDir} {
		if Within(p, dir) {
			return dir
		}
	}
	return ""
}

// MaxEditablePaths bounds SessionOptions.EditablePaths: each is a volume
// (and with a disk quota a loop device) of its own.
const MaxEditablePaths = 16

// maxPathBytes bounds one path of the options.
const maxPathBytes = 1024

func (o SessionOptions) validateEditablePaths(p *problems) {
	const field = "editable_paths"
	if len(o.EditablePaths) > MaxEditablePaths {
		p.add(field, "%d entries, above the limit of %d", len(o.EditablePaths), MaxEditablePaths)
		return
	}
	if len(o.EditablePaths) > 0 && o.Limits.Disk != 0 {
		p.add(field, "cannot be combined with %s: tmpfs volumes start empty (the engine cannot seed them from the image) and each would be charged to memory; use %s",
			fieldDisk, fieldDiskQuota)
	}
	for i, e := range o.EditablePaths {
		if why := editablePathProblem(e); why != "" {
			p.add(field, "[%d]: %q %s", i, e, why)
			continue
		}
		for _, other := range o.EditablePaths[:i] {
			switch {
			case e == other:
				p.add(field, "%q is listed twice", e)
			case Within(e, other) || Within(other, e):
				p.add(field, "%q and %q are inside one another: name the outer one only", other, e)
			}
		}
		// A folder in a tmpfs that starts empty can never exist when the
		// session starts. (A missing cwd under WorkspaceDir is created; one
		// elsewhere is refused by the runtime, which sees the image.)
		for _, empty := range []string{"/tmp", RunDir} {
			if strings.HasPrefix(o.Cwd, empty+"/") {
				p.add("cwd", "%q is inside %s, which is empty when the session starts: use %s itself, or a folder under %s (created if missing)", o.Cwd, empty, empty, WorkspaceDir)
			}
		}
	}
}

// editablePathProblem says what is wrong with p as an editable path, ""
// if nothing.
func editablePathProblem(p string) string {
	switch {
	case p == "":
		return "is empty"
	case len(p) > maxPathBytes:
		return fmt.Sprintf("is longer than %d bytes", maxPathBytes)
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return "contains a control character"
	case !path.IsAbs(p):
		return "is not an absolute path"
	case path.Clean(p) != p:
		return fmt.Sprintf("is not a clean path (did you mean %q?)", path.Clean(p))
	case IsSystemDir(p):
		return "is the root or a top-level system folder: name the folder inside it that the session changes (e.g. /usr/local/lib/python3.11/site-packages, /opt/venv)"
	case KernelDir(p) != "":
		return "is inside " + KernelDir(p)
	case SandboxdDir(p) != "":
		return "is inside sandboxd's own " + SandboxdDir(p)
	case Within(p, "/tmp"):
		return "is on /tmp, a tmpfs that is writable already"
	case Within(p, WorkspaceDir):
		return "is in " + WorkspaceDir + ", a writable volume already"
	case Within(p, SkillsDir):
		return "is in " + SkillsDir + ", where the session's skills are mounted read-only"
	}
	return ""
}

func (l Limits) validate(p *problems) {
	if l.Memory < MinMemory {
		p.add(string(fieldMemory), "%s is below the minimum of %d MiB", mib(l.Memory), MinMemory>>20)
	}
	if l.CPUs < MinCPUs {
		p.add("limits.cpus", "%g is below the minimum of %g", l.CPUs, MinCPUs)
	}
	if l.Pids < MinPids {
		p.add("limits.pids", "%d is below the minimum of %d", l.Pids, MinPids)
	}
	if l.Tmpfs < MinTmpfs {
		p.add(string(fieldTmpfs), "%s is below the minimum of %d MiB", mib(l.Tmpfs), MinTmpfs>>20)
	}
	if l.Disk != 0 && l.Disk < MinDisk {
		p.add("limits.disk", "%s is below the minimum of %d MiB (0 means no limit)", mib(l.Disk), MinDisk>>20)
	}
	switch {
	case l.DiskQuota < 0 || (l.DiskQuota != 0 && l.DiskQuota < MinDiskQuota):
		p.add(string(fieldDiskQuota), "%s is below the minimum of %d MiB (0 means no quota)", mib(l.DiskQuota), MinDiskQuota>>20)
	case l.DiskQuota > MaxDiskQuota:
		p.add(string(fieldDiskQuota), "%s is above the maximum of %d GiB", mib(l.DiskQuota), MaxDiskQuota>>30)
	}
	if l.Disk != 0 && l.DiskQuota != 0 {
		p.add(string(fieldDiskQuota), "cannot be combined with %s: the volumes are either tmpfs (%s) or quota-bound ext4 on the host's disk (%s)",
			fieldDisk, fieldDisk, fieldDiskQuota)
	}
}

// MemoryHeadroom is the part of a memory limit that the tmpfs mounts a
// session's options size (Limits.Tmpfs, and Limits.Disk for each tmpfs
// volume) may not take: max(MinMemoryHeadroom, memory/4).
//
// tmpfs pages are charged to the container's memory cgroup and, with no
// swap (MemorySwap == Memory), cannot be reclaimed: a tmpfs that may grow
// to the memory limit lets filling it get every process OOM-killed, the
// agent last, which ends the session. What has to fit in the headroom when
// every such tmpfs is full: the agent and its shell (~10 MiB charged,
// measured idle), the runtime's own small state tmpfs (the Docker runtime
// sizes it at most memory/16), and the model's commands. 48 MiB leaves a
// minimal sandbox (MinMemory, 64 MiB) 16 MiB of /tmp and its commands
// about 30 MiB; a quarter keeps the room in proportion above 192 MiB (the
// defaults, 1 GiB with a 256 MiB /tmp, leave 768 MiB for tmpfs).
func MemoryHeadroom(memory int64) int64 { return max(MinMemoryHeadroom, memory/4) }

// TmpfsBytes is what the options' tmpfs mounts may hold in all, all of
// it charged to Limits.Memory: /tmp, and with a Disk limit the workspace
// volume and the home volume (counted unless HOME is set in Env inside
// /workspace or /tmp, where the session gets no home volume; an image
// whose HOME lies there gets none either, which only Start can know).
func (o SessionOptions) TmpfsBytes() int64 {
	return o.Limits.Tmpfs + int64(o.diskVolumes())*o.Limits.Disk
}

// diskVolumes is how many tmpfs volumes of Limits.Disk a session gets.
func (o SessionOptions) diskVolumes() int {
	if o.Limits.Disk == 0 {
		return 0
	}
	if h, set := o.Env["HOME"]; set {
		for _, dir := range []string{WorkspaceDir, "/tmp"} {
			if h == dir || strings.HasPrefix(h, dir+"/") {
				return 1
			}
		}
	}
	return 2
}

// validateTmpfsMemory checks that the tmpfs mounts leave MemoryHeadroom of
// Limits.Memory free. Only when the sizes themselves are valid, so one
// mistake is reported once.
func (o SessionOptions) validateTmpfsMemory(p *problems) {
	l := o.Limits
	if l.Memory < MinMemory || l.Tmpfs < MinTmpfs || (l.Disk != 0 && l.Disk < MinDisk) {
		return
	}
	budget := l.Memory - MemoryHeadroom(l.Memory)
	if o.TmpfsBytes() <= budget {
		return
	}
	// The options are Field arguments: an API names them its way.
	format := "/tmp (%s %s)"
	args := []any{fieldTmpfs, mib(l.Tmpfs)}
	switch o.diskVolumes() {
	case 1:
		format += " + /workspace (%s %s)"
		args = append(args, fieldDisk, mib(l.Disk))
	case 2:
		format += " + /workspace and the home volume (2 x %s %s)"
		args = append(args, fieldDisk, mib(l.Disk))
	}
	format += " = %s of tmpfs, more than the %s that %s %s leaves beside its headroom of %s (max(%s, a quarter)): " +
		"tmpfs pages are charged to memory and cannot be swapped out, so filling them would get the session OOM-killed; " +
		"raise %s to at least %s, or lower %s or %s"
	args = append(args, mib(o.TmpfsBytes()), mib(budget), fieldMemory, mib(l.Memory), mib(MemoryHeadroom(l.Memory)), mib(MinMemoryHeadroom),
		fieldMemory, mib(memoryFor(o.TmpfsBytes())), fieldTmpfs, fieldDisk)
	p.add("limits", format, args...)
}

// memoryFor is the least memory limit, in whole MiB, that leaves
// MemoryHeadroom beside tmpfs bytes of tmpfs.
func memoryFor(tmpfs int64) int64 {
	m := max(tmpfs+MinMemoryHeadroom, (tmpfs*4+2)/3, MinMemory) // both terms of the headroom
	return (m + 1<<20 - 1) &^ (1<<20 - 1)
}

// mib formats a size in MiB, exact to a tenth.
func mib(n int64) string {
	if n%(1<<20) == 0 {
		return strconv.FormatInt(n>>20, 10) + " MiB"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}

func (o SessionOptions) validateNetwork(p *problems) {
	switch o.Network {
	case NetworkNone, NetworkBridge, NetworkInternal:
	case "":
		p.add("network", "is empty")
	default:
		if err := CheckNetworkName(o.Network); err != nil {
			p.add("network", "%v", err)
		}
	}
}

// ownNetworkPrefix starts the name of every network sandboxd makes: a
// session's (bridge, internal), its sidecars' and their egress networks.
const ownNetworkPrefix = "sandboxd-"

// CheckNetworkName checks the name of an engine network that sessions may
// be allowed to join (ManagerOptions.Networks), whatever the operator's
// list: a network name, never one of the modes, never one of the engine's
// predefined networks (the host's network, its default bridge, none), and
// never one of sandboxd's own (another session's network: its isolation
// is what the session's firewall rules and Docker's bridge separation
// give). That the engine's network of the name is really so named, and
// not sandboxd's, is checked again when a session joins it.
func CheckNetworkName(name string) error {
	switch {
	case name == NetworkNone || name == NetworkBridge || name == NetworkInternal:
		return fmt.Errorf("%q is a network mode of sandboxd's, not an engine network to list", name)
	case name == "host" || name == "default":
		return fmt.Errorf("%q is never allowed: it would share the host's network or the engine's shared bridge", name)
	case !networkNameRe.MatchString(name) || len(name) > maxNetworkName:
		return fmt.Errorf("%q is not a network name (letters, digits, '_', '.' and '-', at most %d)", name, maxNetworkName)
	case strings.HasPrefix(strings.ToLower(name), ownNetworkPrefix):
		return fmt.Errorf("%q names one of sandboxd's own networks (another session's, or its sidecars'): never allowed", name)
	}
	return nil
}

// maxNetworkName bounds a network name (Docker sets none; an interface
// or a label is far shorter).
const maxNetworkName = 128

// CheckNetworkAllowed checks resolved options' network against the engine
// networks the operator allows sessions to join, by exact name (an ID or
// a prefix of one is not a name): the modes none, bridge and internal are
// always allowed; any other name must be in allowed.
func (o SessionOptions) CheckNetworkAllowed(allowed []string) error {
	var p problems
	switch {
	case o.Network == NetworkNone || o.Network == NetworkBridge || o.Network == NetworkInternal:
	case slices.Contains(allowed, o.Network):
	case len(allowed) == 0:
		p.add("network", "%q is not allowed on this server: ask for %q, %q or %q (an engine network is joined only if the operator lists it: "+
			"serve --allow-network NAME, or allow_networks in the config)", o.Network, NetworkNone, NetworkBridge, NetworkInternal)
	default:
		p.add("network", "%q is not allowed on this server: ask for %q, %q, %q or one of the networks the operator lists (%s); "+
			"the operator lists one with serve --allow-network NAME, or allow_networks in the config", o.Network,
			NetworkNone, NetworkBridge, NetworkInternal, strings.Join(allowed, ", "))
	}
	return p.err()
}

// validateAllowHosts checks the allow_hosts (field) of a session or a
// sidecar on network.
func validateAllowHosts(p *problems, field, network string, hosts []string) {
	if len(hosts) == 0 {
		return
	}
	if network != NetworkBridge {
		p.add(field, "needs network %q (network %q is not a private bridge with egress that sandboxd's firewall rules could narrow)", NetworkBridge, network)
	}
	if len(hosts) > MaxAllowHosts {
		p.add(field, "%d entries, above the limit of %d", len(hosts), MaxAllowHosts)
		return
	}
	seen := map[string]bool{}
	for i, h := range hosts {
		if _, err := ParseAllowHost(h); err != nil {
			p.add(field, "[%d]: %v", i, err)
			continue
		}
		if k := strings.ToLower(h); seen[k] {
			p.add(field, "%q is listed twice", h)
		} else {
			seen[k] = true
		}
	}
}

// AllowHost is one parsed entry of SessionOptions.AllowHosts: a host name
// (Name set), a wildcard (Name is the suffix, Wildcard set: "*.x.com" is
// Name "x.com"), or an address or prefix (Prefix valid; an address is a
// single-address prefix).
type AllowHost struct {
	Name     string
	Wildcard bool
	Prefix   netip.Prefix
}

// String is the entry as written in allow_hosts, normalized.
func (a AllowHost) String() string {
	switch {
	case a.Wildcard:
		return "*." + a.Name
	case a.Name != "":
		return a.Name
	}
	return a.Prefix.String()
}

// HasHostNames reports whether allow_hosts has a name or wildcard entry
// (which only an egress proxy enforces); entries that do not parse are
// not counted.
func HasHostNames(hosts []string) bool {
	for _, h := range hosts {
		if a, err := ParseAllowHost(h); err == nil && a.Name != "" {
			return true
		}
	}
	return false
}

// ParseAllowHost parses an entry of SessionOptions.AllowHosts: an IP
// address, a CIDR prefix ("10.1.2.0/24"; host bits are ignored, /0 is
// refused), a DNS host name, or a wildcard "*.example.com", which matches
// every name under example.com (a.example.com, a.b.example.com) but not
// example.com itself: list both for both. A wildcard needs at least two
// labels after "*." ("*.com" is refused).
func ParseAllowHost(s string) (AllowHost, error) {
	if s == "" {
		return AllowHost{}, fmt.Errorf("is empty")
	}
	if strings.Contains(s, "://") {
		return AllowHost{}, fmt.Errorf("%q is a URL: give the host name alone", s)
	}
	if strings.Contains(s, "/") {
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return AllowHost{}, fmt.Errorf("%q is not a CIDR prefix (e.g. 192.0.2.0/24)", s)
		}
		if pfx.Bits() == 0 {
			return AllowHost{}, fmt.Errorf("%q allows every address: leave allow_hosts empty for unrestricted egress", s)
		}
		return AllowHost{Prefix: pfx.Masked()}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		if a.Zone() != "" {
			return AllowHost{}, fmt.Errorf("%q: an address with a zone cannot be allowed", s)
		}
		return AllowHost{Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	name, wild := strings.CutPrefix(s, "*.")
	if strings.Contains(name, "*") {
		return AllowHost{}, fmt.Errorf("%q: a wildcard is only a leading \"*.\" (e.g. *.example.com)", s)
	}
	if len(name) > 253 {
		return AllowHost{}, fmt.Errorf("%q is longer than a host name may be (253)", s[:32]+"...")
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if !hostLabelRe.MatchString(l) {
			return AllowHost{}, fmt.Errorf("%q is neither an IP address, a CIDR prefix, a host name (letters, digits and -, dot-separated) nor a wildcard (*.example.com)", s)
		}
	}
	if _, err := strconv.Atoi(labels[len(labels)-1]); err == nil {
		return AllowHost{}, fmt.Errorf("%q is not an IP address, and a host name cannot end in a number", s)
	}
	if wild && len(labels) < 2 {
		return AllowHost{}, fmt.Errorf("%q would allow a whole top-level domain: a wildcard needs two labels or more after \"*.\"", s)
	}
	return AllowHost{Name: strings.ToLower(name), Wildcard: wild}, nil
}

func (o SessionOptions) validateLabels(p *problems) {
	size := 0
	for k, v := range o.Labels {
		size += len(k) + len(v)
		if strings.HasPrefix(k, ReservedLabelPrefix) {
			p.add("labels", "%q is under the reserved prefix %q", k, ReservedLabelPrefix)
		} else if !labelKeyRe.MatchString(k) {
			p.add("labels", "%q is not a label key", k)
		}
	}
	if size > maxLabelBytes {
		p.add("labels", "%d bytes in all, above the limit of %d", size, maxLabelBytes)
	}
}

// ParseUser parses "uid" or "uid:gid" (numeric; gid defaults to uid) and
// refuses root's uid or gid. UserImage is not a user it parses: the
// runtime resolves it from the image.
func ParseUser(s string) (uid, gid int, err error) {
	u, g, hasGid := strings.Cut(s, ":")
	if !hasGid {
		g = u
	}
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	switch {
	case s == "":
		return 0, 0, fmt.Errorf("is empty")
	case err1 != nil || err2 != nil || uid < 0 || gid < 0:
		return 0, 0, fmt.Errorf("%q is not a numeric uid or uid:gid", s)
	case uid == 0 || gid == 0:
		return 0, 0, fmt.Errorf("%q is root; sandboxes never run as root", s)
	}
	return uid, gid, nil
}
