package daemon

import (
	"crypto/x509"
	"flag"
	"io"
	"log/slog"
	"os"
	"time"

	dockerclient "github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/wsproto"
)

// Runtime backends (Config.Backend).
const (
	BackendDocker = "docker"
)

// Disk backends (Config.DiskBackend, --disk-backend).
const (
	DiskAuto  = "auto"
	DiskLoop  = "loop"
	DiskTmpfs = "tmpfs"
	DiskNone  = "none"
)

// DefaultDiskQuota is --disk-quota's default.
const DefaultDiskQuota = 10 << 30

// minMaxMessage is the smallest --max-message-bytes: below it ordinary
// tool results would close the connection.
const minMaxMessage = 1 << 20

// Config is everything a daemon is made of: the flags of `sandboxd serve`
// (RegisterFlags names each field's flag) and, last, the seams the
// benchmarks and in-process tests set. Defaults gives serve's defaults.
type Config struct {
	Listen, StateDir, TLSCert, TLSKey string
	InsecureAllowRemote               bool
	InsecureBridge                    bool
	AllowNetworks                     List
	AllowOrigins, AllowHosts          List
	AllowImages                       List
	Image, Runtime, MCPImage          string
	MCPIdle                           time.Duration
	Labels                            KeyValues
	AgentBinary                       string
	DiskQuota                         Size
	DiskBackend, DiskDir              string
	DiskMB                            int
	Pool                              Pool
	MaxStarts, MaxSessions            int
	MaxMessage                        int64
	Direct, KeepSessions              bool
	DrainTimeout, ShutdownTimeout     time.Duration
	MaxStartWait                      time.Duration // --max-start-wait (sandbox.ManagerOptions.MaxStartWait)
	SnapshotRetention                 time.Duration // --snapshot-retention (sandbox.ManagerOptions.SnapshotRetention)
	LogLevel, LogFormat               string
	ConfigPath                        string
	SkillsDirs                        Paths
	SecretsFile                       string

	// Backend names the sessions' runtime: BackendDocker ("" too) or
	// BackendKubernetes (--backend).
	Backend string
	// Kube configures BackendKubernetes.
	Kube Kube
	// Token is the operator token; empty: SANDBOXD_TOKEN, else the token
	// file of StateDir (made on first start).
	Token string
	// Logger, if set, is used as it is (LogLevel and LogFormat are then
	// not read); else one is made on LogOutput (default stderr).
	Logger    *slog.Logger
	LogOutput io.Writer
	// DockerClient, if set, is the engine client of the Docker runtime.
	DockerClient *dockerclient.Client
	// Version is what /healthz and the banner say.
	Version string
	// InjectRoots verify the hosts that inject rules send secrets to;
	// nil: the host's system roots. Tests set their test CA's.
	InjectRoots *x509.CertPool
	// ManagerHook and ServerHook, if set, change the manager's and the
	// server's options just before they are made (tests and benchmarks:
	// a short idle timeout, a small output budget).
	ManagerHook func(*sandbox.ManagerOptions)
	ServerHook  func(*server.Options)
}

// Defaults is serve's configuration without flags.
func Defaults() Config {
	return Config{
		Listen:            server.DefaultListen,
		Image:             sandbox.DefaultImage,
		MCPImage:          server.DefaultMCPImage,
		MCPIdle:           30 * time.Minute,
		Labels:            KeyValues{},
		DiskQuota:         DefaultDiskQuota,
		DiskBackend:       DiskAuto,
		MaxStarts:         sandbox.DefaultMaxConcurrentStarts,
		MaxStartWait:      sandbox.DefaultMaxStartWait,
		SnapshotRetention: sandbox.DefaultSnapshotRetention,
		MaxSessions:       server.DefaultMaxSessions,
		MaxMessage:        server.DefaultMaxMessageBytes,
		Direct:            true,
		DrainTimeout:      server.DefaultDrainTimeout,
		ShutdownTimeout:   60 * time.Second,
		LogLevel:          "info",
		LogFormat:         "text",
		Backend:           BackendDocker,
		Kube:              kubeDefaults(),
	}
}

// RegisterFlags defines serve's flags on fs, each setting its field of c
// (whose values are the flags' defaults).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	if c.Labels == nil {
		c.Labels = KeyValues{}
	}
	fs.StringVar(&c.Listen, "listen", c.Listen, "address to listen on: host:port, or unix:/path for a unix socket (mode 0600)")
	fs.StringVar(&c.StateDir, "state-dir", c.StateDir, "where the operator token and session records live (default $XDG_STATE_HOME/sandboxd or ~/.local/state/sandboxd)")
	fs.StringVar(&c.TLSCert, "tls-cert", c.TLSCert, "serve HTTPS/WSS with this certificate (PEM)")
	fs.StringVar(&c.TLSKey, "tls-key", c.TLSKey, "the key of --tls-cert (PEM)")
	fs.BoolVar(&c.InsecureAllowRemote, "insecure-allow-remote", c.InsecureAllowRemote, "allow a non-loopback --listen without TLS (only behind a TLS-terminating proxy)")
	fs.BoolVar(&c.InsecureBridge, "insecure-bridge-host-access", c.InsecureBridge, "where sandboxd cannot install its host firewall rules (not root, no iptables, "+
		"a remote engine), start network bridge and internal sessions and HTTP/SSE MCP sidecars anyway, although their code can then reach every host service not bound to loopback; "+
		"without it they are refused there (allow_hosts is refused either way)")
	fs.Var(&c.AllowNetworks, "allow-network", "an engine network that sessions may join by its exact name (\"network\":\"NAME\"), besides none, bridge and internal, repeatable; "+
		"added to the config's allow_networks. sandboxd installs no firewall rules for it: a session there reaches whatever the network reaches. "+
		"Never sandboxd's own networks (sandboxd-*) or the engine's host, bridge and none")
	fs.Var(&c.AllowOrigins, "allow-origin", "browser origin allowed to call the API (scheme://host[:port]), repeatable; '*' allows any")
	fs.Var(&c.AllowHosts, "allow-host", "Host name accepted besides the loopback names (for a remote or proxied server), repeatable; '*' allows any")
	fs.Var(&c.AllowImages, "allow-image", "image pattern (path.Match) clients may ask for, repeatable; default: any image")
	fs.StringVar(&c.Image, "image", c.Image, "default image of sessions that name none")
	fs.StringVar(&c.Runtime, "runtime", c.Runtime, "OCI runtime of every session that names none, as registered with the engine: runsc for gVisor "+
		"(a user-space kernel between sandboxed code and the host's; make runsc installs and registers it; see docs/security.md); "+
		"empty: the engine's default (runc). Refused at start if the engine lacks it; never a fallback")
	fs.StringVar(&c.MCPImage, "mcp-image", c.MCPImage, "image of the sandbox of each MCP session")
	fs.DurationVar(&c.MCPIdle, "mcp-idle-timeout", c.MCPIdle, "end an MCP session (and its sandbox), or close a sandbox opened by handle (MCP 2026-07-28), after this long without a request")
	fs.Var(c.Labels, "label", "KEY=VALUE put on every container, volume and network of this server, repeatable; "+
		"the server lists, adopts and reaps only resources made under exactly its set of labels (label sandboxd.scope), so servers with different labels, or none, share an engine safely")
	fs.StringVar(&c.AgentBinary, "agent-binary", c.AgentBinary, "static sandboxd binary to run as the agent in sandboxes (default: this binary)")
	fs.Var(&c.DiskQuota, "disk-quota", "cap /workspace and the home folder of every session at this size each (10GiB, 512MiB, ...; 0: none), "+
		"on the host's disk: a sparse ext4 file per volume on a loop device (--disk-backend loop)")
	fs.StringVar(&c.DiskBackend, "disk-backend", c.DiskBackend, "how --disk-quota / --disk-mb bound the volumes: loop (ext4 file on a loop device: needs root "+
		"and a local engine; refused at start if unavailable), tmpfs (--disk-mb, charged to memory), none, or auto: "+
		"tmpfs if --disk-mb is set, else loop where available, else none with a warning")
	fs.StringVar(&c.DiskDir, "disk-dir", c.DiskDir, "where the sparse files of --disk-backend loop live (default <state-dir>/disks)")
	fs.IntVar(&c.DiskMB, "disk-mb", c.DiskMB, "cap /workspace and the home folder of every session at this many MiB each, as tmpfs charged to the "+
		"session's memory (they start empty and do not survive an engine restart); 0: no tmpfs (see --disk-quota)")
	fs.Var(&c.Pool, "pool", "warm pool of the default profile (the config's default profile, else the flags' defaults): N keeps N started sandboxes ready; "+
		"MIN:MAX keeps at least MIN and grows toward MAX while creates drain it, back to MIN once idle; each profile of the config has its own (pool: N, or pool: {min, max})")
	fs.IntVar(&c.MaxStarts, "max-concurrent-starts", c.MaxStarts,
		"sandboxes being started at once (client creates go before pool refills); on 2 cores 4 gave the best ready latency")
	fs.DurationVar(&c.MaxStartWait, "max-start-wait", c.MaxStartWait,
		"how long a create may wait for one of the --max-concurrent-starts slots; past it the create fails with \"busy, retry after N s\" (code -32029, data.retry_after)")
	fs.DurationVar(&c.SnapshotRetention, "snapshot-retention", c.SnapshotRetention,
		"how long a session's snapshot is kept unless its request or its profile (snapshot_retention) says otherwise; negative: until deleted (docs/snapshots.md)")
	fs.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "cap on live sessions, WebSocket and MCP together (-1: none)")
	fs.Int64Var(&c.MaxMessage, "max-message-bytes", c.MaxMessage, "largest WebSocket message or MCP request body accepted")
	fs.BoolVar(&c.Direct, "direct", c.Direct, "reach the agent of each sandbox over a unix socket of this server's (under <state-dir>/direct, "+
		"mounted read-only into the sandbox, one per session) instead of the engine's attach stream, which stays as the fallback; local engines only; "+
		"false: every call goes through the engine (docs/security.md, \"The direct path\")")
	fs.BoolVar(&c.KeepSessions, "keep-sessions", c.KeepSessions, "leave sessions running at shutdown; the next start adopts them")
	fs.DurationVar(&c.DrainTimeout, "drain-timeout", c.DrainTimeout, "at shutdown, how long calls in flight may take to finish before they are cancelled")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", c.ShutdownTimeout, "hard limit of the whole shutdown")
	fs.StringVar(&c.LogLevel, "log-level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", c.LogFormat, "text or json")
	fs.StringVar(&c.ConfigPath, "config", c.ConfigPath, "YAML file of session profiles and skill roots (docs/configuration.md); "+
		"a profile named default is what session.create without profile and /mcp get; refused at start with file:line if anything in it is wrong")
	fs.Var(&c.SkillsDirs, "skills-dir", "a root of operator skills: the absolute path of a directory on this host, repeatable; "+
		"added to the config's skills_dirs")
	fs.StringVar(&c.SecretsFile, "secrets-file", c.SecretsFile, "NAME=VALUE lines (mode 600) of the secrets profiles give MCP sidecars (mcp_servers[].secrets) or inject on the way out (inject[].value); "+
		"a name not in it is read from SANDBOXD_SECRET_<NAME> in this environment")
	c.registerKubeFlags(fs)
}

// Validate checks what can be checked without the engine or the files it
// names, and says which flag is at fault (a *UsageError).
func (c *Config) Validate() error {
	switch c.Backend {
	case "", BackendDocker, BackendKubernetes:
	default:
		return usageErrorf("--backend %q: want %s or %s", c.Backend, BackendDocker, BackendKubernetes)
	}
	if err := c.validateKube(); err != nil {
		return err
	}
	if c.DiskMB < 0 {
		return usageErrorf("--disk-mb %d: want 0 (no limit) or a size in MiB", c.DiskMB)
	}
	if err := c.checkDisk(); err != nil {
		return err
	}
	if _, err := (sandbox.SessionOptions{Runtime: c.Runtime}).Resolve(sandbox.SessionOptions{}); err != nil {
		return usageErrorf("--runtime %q: %v", c.Runtime, err)
	}
	if c.MaxMessage < minMaxMessage {
		return usageErrorf("--max-message-bytes %d: want at least %d (1 MiB): tool results and transfer chunks must fit (the Go client moves files in %d MiB chunks; set its ChunkSize below the limit)", c.MaxMessage, minMaxMessage, wsproto.ChunkSize>>20)
	}
	if c.MaxStarts < 1 {
		return usageErrorf("--max-concurrent-starts %d: want 1 or more", c.MaxStarts)
	}
	if c.MaxStartWait < time.Second {
		return usageErrorf("--max-start-wait %v: want 1s or more", c.MaxStartWait)
	}
	if c.Logger == nil {
		if _, err := c.newLogger(); err != nil {
			return err
		}
	}
	if err := server.CheckListen(server.Options{Listen: c.Listen, TLSCert: c.TLSCert, TLSKey: c.TLSKey, InsecureAllowRemote: c.InsecureAllowRemote}); err != nil {
		return usageErrorf("%v", err)
	}
	return nil
}

// newLogger is the logger of LogLevel and LogFormat on LogOutput.
func (c *Config) newLogger() (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", c.LogLevel)
	}
	w := c.LogOutput
	if w == nil {
		w = os.Stderr
	}
	opts := &slog.HandlerOptions{Level: l}
	switch c.LogFormat {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErrorf("--log-format %q: want text or json", c.LogFormat)
}
