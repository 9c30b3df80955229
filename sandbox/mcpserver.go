package sandbox

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox/sidecar"
)

// Values of MCPServer.Transport and MCPServer.Start.
const (
	// TransportStdio speaks MCP over the sidecar's stdin/stdout (the
	// daemon's attach stream to its main process). The default.
	TransportStdio = sidecar.Stdio
	// TransportHTTP is streamable HTTP at http://<sidecar>:Port/Path on the
	// session's sidecar network.
	TransportHTTP = sidecar.HTTP
	// TransportSSE is the legacy HTTP+SSE transport (2024-11-05) at
	// http://<sidecar>:Port/Path.
	TransportSSE = sidecar.SSE
	// StartEager starts the sidecar with the session, before it is handed
	// out. The default.
	StartEager = "eager"
	// StartLazy starts it at the first listing or call that needs it.
	StartLazy = "lazy"
	// WorkspaceReadOnly and WorkspaceReadWrite mount the session's
	// workspace in a sidecar (MCPServer.Workspace).
	WorkspaceReadOnly  = "ro"
	WorkspaceReadWrite = "rw"
)

// MaxMCPServers bounds the sidecars of one session.
const MaxMCPServers = 8

// MCPServer declares an MCP server that runs in a container of its own
// beside the session's sandbox (a "sidecar"); its tools become the
// session's, named <Name>__<tool> (sidecar.ExposedToolName).
type MCPServer struct {
	// Name prefixes the server's tools: lower-case letters, digits and
	// '-', starting with a letter, at most 32 (no '_', so the "__"
	// separator is unambiguous).
	Name string `json:"name"`
	// Image is the sidecar's image (a client's must match --allow-image).
	Image string `json:"image"`
	// Command replaces the image's entrypoint; empty keeps it.
	Command []string `json:"command,omitempty"`
	// Args replace the image's command (arguments of the entrypoint).
	Args []string `json:"args,omitempty"`
	// Env is set in the sidecar.
	Env map[string]string `json:"env,omitempty"`
	// Transport is TransportStdio (default), TransportHTTP or TransportSSE.
	Transport string `json:"transport,omitempty"`
	// Port and Path locate the HTTP endpoint (http, sse): Port is
	// required; Path defaults to "/mcp" (http) or "/sse" (sse).
	Port int    `json:"port,omitempty"`
	Path string `json:"path,omitempty"`
	// Start is StartEager (default) or StartLazy.
	Start string `json:"start,omitempty"`
	// Workspace mounts the session's /workspace at /workspace in the
	// sidecar: WorkspaceReadOnly, WorkspaceReadWrite, or "" (not at all,
	// the default).
	Workspace string `json:"workspace,omitempty"`
	// Secrets are set in the sidecar's environment from the daemon's
	// secrets (ManagerOptions.Secrets), looked up by name when it starts:
	// only names travel in options, labels and logs. Operator profiles
	// only: a client's session.create has no way to name them.
	Secrets []MCPSecret `json:"secrets,omitempty"`
	// Limits bound the sidecar's memory, CPU and processes; a field left
	// zero takes the sandbox's (SessionOptions.Limits) in Resolve.
	Limits SidecarLimits `json:"limits,omitzero"`
	// User is who the sidecar runs as: "" (the default) is SidecarUser,
	// never root; UserImage runs it as its image's USER, root included,
	// for a server image that needs it. Operator profiles only, as
	// secrets: a client's session.create has no way to name it. Every
	// capability stays dropped, no-new-privileges and the read-only root
	// stay either way.
	User string `json:"user,omitempty"`
	// Network is NetworkNone ("" is the same: no egress, the default) or
	// NetworkBridge: the sidecar also joins a private bridge network of
	// its own with egress, made and firewalled as a bridge session's
	// (the host closed, the link-local range refused). Operator profiles
	// only, as secrets.
	Network string `json:"network,omitempty"`
	// AllowHosts, with NetworkBridge only, limits that egress to these
	// hosts, as SessionOptions.AllowHosts does a session's.
	AllowHosts []string `json:"allow_hosts,omitempty"`
}

// SidecarLimits bound one sidecar. Zero fields take the sandbox's limits.
type SidecarLimits struct {
	// Memory in bytes; swap is limited to the same amount (no swap). The
	// sidecar's /tmp (SidecarTmpfs) counts against it.
	Memory int64 `json:"memory,omitempty"`
	// CPUs, fractional.
	CPUs float64 `json:"cpus,omitempty"`
	// Pids caps processes and threads.
	Pids int64 `json:"pids,omitempty"`
}

// MCPSecret puts the daemon's secret Name into the sidecar's environment
// variable Env (default: Name).
type MCPSecret struct {
	Name string `json:"name"`
	Env  string `json:"env,omitempty"`
}

// leastSidecarMemory is the smallest MCPServer.Limits.Memory: a shell's
// minimum, and twice its /tmp.
const leastSidecarMemory = max(MinMemory, 2*SidecarTmpfs)

var mcpServerNameRe = regexp.MustCompile(`^[a-z][a-z0-9-]{0,31}$`)

// withDefaults fills an MCPServer's defaults; its limits come from the
// sandbox's, l.
func (s MCPServer) withDefaults(l Limits) MCPServer {
	if s.Limits.Memory == 0 {
		s.Limits.Memory = l.Memory
	}
	if s.Limits.CPUs == 0 {
		s.Limits.CPUs = l.CPUs
	}
	if s.Limits.Pids == 0 {
		s.Limits.Pids = l.Pids
	}
	if s.Transport == "" {
		s.Transport = TransportStdio
	}
	if s.Start == "" {
		s.Start = StartEager
	}
	if s.Path == "" {
		switch s.Transport {
		case TransportHTTP:
			s.Path = "/mcp"
		case TransportSSE:
			s.Path = "/sse"
		}
	}
	return s
}

// validateMCPServers checks resolved sidecar declarations.
func (o SessionOptions) validateMCPServers(p *problems) {
	if len(o.MCPServers) > MaxMCPServers {
		p.add("mcp_servers", "%d servers, above the limit of %d", len(o.MCPServers), MaxMCPServers)
	}
	seen := map[string]bool{}
	for i, s := range o.MCPServers {
		f := fmt.Sprintf("mcp_servers[%d]", i)
		if !mcpServerNameRe.MatchString(s.Name) {
			p.add(f+".name", "%q is not a server name (lower-case letters, digits and '-', starting with a letter, at most 32)", s.Name)
		} else if seen[s.Name] {
			p.add(f+".name", "%q is declared twice", s.Name)
		}
		seen[s.Name] = true
		if s.Image == "" {
			p.add(f+".image", "is empty")
		} else if !imageRe.MatchString(s.Image) {
			p.add(f+".image", "%q is not an image reference", s.Image)
		}
		for k := range s.Env {
			if !envNameRe.MatchString(k) {
				p.add(f+".env", "%q is not an environment variable name", k)
			}
		}
		for j, sec := range s.Secrets {
			switch env := sec.env(); {
			case !envNameRe.MatchString(sec.Name):
				p.add(fmt.Sprintf("%s.secrets[%d].name", f, j), "%q is not a secret name (letters, digits and '_', not starting with a digit)", sec.Name)
			case !envNameRe.MatchString(env):
				p.add(fmt.Sprintf("%s.secrets[%d].env", f, j), "%q is not an environment variable name", env)
			case s.Env[env] != "":
				p.add(fmt.Sprintf("%s.secrets[%d].env", f, j), "%s is set in env too", env)
			}
		}
		for j, a := range append(append([]string(nil), s.Command...), s.Args...) {
			if strings.ContainsRune(a, 0) {
				p.add(f+".command", "[%d] contains a NUL byte", j)
			}
		}
		switch s.Transport {
		case TransportStdio:
			if s.Port != 0 || s.Path != "" {
				p.add(f+".port", "port and path are for the http and sse transports, not stdio")
			}
		case TransportHTTP, TransportSSE:
			if s.Port < 1 || s.Port > 65535 {
				p.add(f+".port", "%d: want the port the server listens on, 1 to 65535", s.Port)
			}
			if !strings.HasPrefix(s.Path, "/") || strings.ContainsAny(s.Path, " ?#\x00") {
				p.add(f+".path", "%q is not an absolute URL path", s.Path)
			}
		default:
			p.add(f+".transport", "%q is not %q, %q or %q", s.Transport, TransportStdio, TransportHTTP, TransportSSE)
		}
		switch s.Start {
		case StartEager, StartLazy:
		default:
			p.add(f+".start", "%q is not %q or %q", s.Start, StartEager, StartLazy)
		}
		switch s.Workspace {
		case "", WorkspaceReadOnly, WorkspaceReadWrite:
		default:
			p.add(f+".workspace", "%q is not %q (read-only) or %q (read-write); leave it out for none", s.Workspace, WorkspaceReadOnly, WorkspaceReadWrite)
		}
		if s.User != "" && s.User != UserImage {
			p.add(f+".user", "%q: want %q (the image's user, root included) or nothing (%s)", s.User, UserImage, SidecarUser)
		}
		switch s.Network {
		case "", NetworkNone, NetworkBridge:
		default:
			p.add(f+".network", "%q: want %q (egress) or nothing (none)", s.Network, NetworkBridge)
		}
		validateAllowHosts(p, f+".allow_hosts", s.Network, s.AllowHosts)
		if s.Limits.Memory < leastSidecarMemory {
			p.add(f+".limits.memory", "%s is below the minimum of %d MiB", mib(s.Limits.Memory), leastSidecarMemory>>20)
		}
		if s.Limits.CPUs < MinCPUs {
			p.add(f+".limits.cpus", "%g is below the minimum of %g", s.Limits.CPUs, MinCPUs)
		}
		if s.Limits.Pids < MinPids {
			p.add(f+".limits.pids", "%d is below the minimum of %d", s.Limits.Pids, MinPids)
		}
	}
}

// env is the variable the secret is set in.
func (s MCPSecret) env() string {
	if s.Env == "" {
		return s.Name
	}
	return s.Env
}

// sidecarEnv is a sidecar's environment: its Env and its secrets' values
// from lookup. A missing secret is an error that names it (never a value).
func sidecarEnv(srv MCPServer, lookup func(string) (string, bool)) (map[string]string, error) {
	if len(srv.Secrets) == 0 {
		return srv.Env, nil
	}
	env := make(map[string]string, len(srv.Env)+len(srv.Secrets))
	for k, v := range srv.Env {
		env[k] = v
	}
	for _, sec := range srv.Secrets {
		if lookup == nil {
			return nil, fmt.Errorf("mcp server %q declares secrets, and this daemon has none (serve --secrets-file, or SANDBOXD_SECRET_<NAME> in its environment)", srv.Name)
		}
		v, ok := lookup(sec.Name)
		if !ok {
			return nil, fmt.Errorf("mcp server %q: the daemon has no secret %q (serve --secrets-file, or SANDBOXD_SECRET_%s in its environment)", srv.Name, sec.Name, sec.Name)
		}
		env[sec.env()] = v
	}
	return env, nil
}
