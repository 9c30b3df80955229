package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/auth"
	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/internal/mcpapi"
	"github.com/sandboxd/sandboxd/internal/sandboxmgr"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
)

func init() {
	register(&command{
		name:    "serve",
		summary: "run the API server: sessions over WebSocket (/v1/ws) and MCP (/mcp), on Docker",
		run:     runServe,
	})
}

const serveHelp = `
Serves sandboxd's APIs on one address: the WebSocket JSON-RPC API at /v1/ws,
MCP (streamable HTTP) at /mcp, /metrics (Prometheus) and /healthz. Every
request but /healthz needs "Authorization: Bearer <token>" with the operator
token: SANDBOXD_TOKEN, or else the token in <state-dir>/token, generated on
first start (0600). Sessions run in Docker containers; the agent inside them
is this binary (it must be static: build with CGO_ENABLED=0).

The server binds loopback by default and refuses a non-loopback address
without TLS (--tls-cert/--tls-key) or --insecure-allow-remote.

SIGTERM or SIGINT shuts down gracefully: no new work, calls in flight get
--drain-timeout to finish, WebSockets close with 1001, then sessions are
removed (or kept running with --keep-sessions, for the next start to adopt).

--config FILE names a YAML file of session profiles (named kinds of
session: image, env, cwd, limits, network, idle timeout, warm pool, skills),
skill roots and the engine networks sessions may join (allow_networks); session.create takes "profile", /mcp/NAME serves profile
NAME, and a profile named "default" is what a create without profile and
/mcp get. A bad file refuses to start, naming file:line and the option.
Without it, every session takes the flags' defaults.

Every flag can also be set in the environment: SANDBOXD_<FLAG> with dashes
as underscores (SANDBOXD_LISTEN, SANDBOXD_MCP_IMAGE, ...); flags win.`

type serveConfig struct {
	secretsFile                         string
	listen, stateDir, tlsCert, tlsKey   string
	insecureRemote, keepSessions        bool
	insecureBridge, direct              bool
	allowOrigins, allowHosts, allowImgs listFlag
	allowNetworks                       listFlag
	image, mcpImage, agentBinary        string
	runtime                             string
	mcpIdle, drainTimeout, shutdownTime time.Duration
	maxSessions, maxStarts              int
	pool                                poolFlag
	diskMB                              int
	diskQuota                           sizeFlag
	diskBackend, diskDir                string
	maxMessage                          int64
	logLevel, logFormat                 string
	labels                              envList
	configPath                          string
	skillsDirs                          pathList
}

// pathList is a repeatable flag of paths (not comma-separated: a path may
// hold a comma).
type pathList []string

func (l *pathList) String() string { return strings.Join(*l, ":") }
func (l *pathList) Set(v string) error {
	if v == "" {
		return errors.New("empty path")
	}
	*l = append(*l, v)
	return nil
}

// listFlag is a repeatable, comma-separable string flag.
// poolFlag is --pool: N (a fixed pool) or MIN:MAX (one that follows demand).
type poolFlag struct{ min, max int }

func (p *poolFlag) String() string {
	if p.max > p.min {
		return fmt.Sprintf("%d:%d", p.min, p.max)
	}
	return strconv.Itoa(p.min)
}

func (p *poolFlag) Set(v string) error {
	lo, hi, elastic := strings.Cut(v, ":")
	minN, err := strconv.Atoi(strings.TrimSpace(lo))
	maxN := minN
	if err == nil && elastic {
		maxN, err = strconv.Atoi(strings.TrimSpace(hi))
	}
	switch {
	case err != nil:
		return fmt.Errorf("%q: want N (a fixed pool) or MIN:MAX", v)
	case minN < 0 || maxN > config.MaxPool:
		return fmt.Errorf("%q: want sizes from 0 (no warm pool) to %d", v, config.MaxPool)
	case maxN < minN:
		return fmt.Errorf("%q: MAX is below MIN", v)
	}
	p.min, p.max = minN, maxN
	return nil
}

// options are the pool's size as sandbox.PoolOptions (Size is its min).
func (p poolFlag) options(o sandbox.SessionOptions) sandbox.PoolOptions {
	po := sandbox.PoolOptions{Options: o, Size: p.min}
	if p.max > p.min {
		po.Max = p.max
	}
	return po
}

type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}

func runServe(ctx context.Context, std stdio, args []string) error {
	var cfg serveConfig
	fs := newFlagSet("serve", std, "[flags]", serveHelp)
	fs.StringVar(&cfg.listen, "listen", server.DefaultListen, "address to listen on: host:port, or unix:/path for a unix socket (mode 0600)")
	fs.StringVar(&cfg.stateDir, "state-dir", "", "where the operator token and session records live (default $XDG_STATE_HOME/sandboxd or ~/.local/state/sandboxd)")
	fs.StringVar(&cfg.tlsCert, "tls-cert", "", "serve HTTPS/WSS with this certificate (PEM)")
	fs.StringVar(&cfg.tlsKey, "tls-key", "", "the key of --tls-cert (PEM)")
	fs.BoolVar(&cfg.insecureRemote, "insecure-allow-remote", false, "allow a non-loopback --listen without TLS (only behind a TLS-terminating proxy)")
	fs.BoolVar(&cfg.insecureBridge, "insecure-bridge-host-access", false, "where sandboxd cannot install its host firewall rules (not root, no iptables, "+
		"a remote engine), start network bridge and internal sessions and HTTP/SSE MCP sidecars anyway, although their code can then reach every host service not bound to loopback; "+
		"without it they are refused there (allow_hosts is refused either way)")
	fs.Var(&cfg.allowNetworks, "allow-network", "an engine network that sessions may join by its exact name (\"network\":\"NAME\"), besides none, bridge and internal, repeatable; "+
		"added to the config's allow_networks. sandboxd installs no firewall rules for it: a session there reaches whatever the network reaches. "+
		"Never sandboxd's own networks (sandboxd-*) or the engine's host, bridge and none")
	fs.Var(&cfg.allowOrigins, "allow-origin", "browser origin allowed to call the API (scheme://host[:port]), repeatable; '*' allows any")
	fs.Var(&cfg.allowHosts, "allow-host", "Host name accepted besides the loopback names (for a remote or proxied server), repeatable; '*' allows any")
	fs.Var(&cfg.allowImgs, "allow-image", "image pattern (path.Match) clients may ask for, repeatable; default: any image")
	fs.StringVar(&cfg.image, "image", sandbox.DefaultImage, "default image of sessions that name none")
	fs.StringVar(&cfg.runtime, "runtime", "", "OCI runtime of every session that names none, as registered with the engine: runsc for gVisor "+
		"(a user-space kernel between sandboxed code and the host's; make runsc installs and registers it; see docs/security.md); "+
		"empty: the engine's default (runc). Refused at start if the engine lacks it; never a fallback")
	fs.StringVar(&cfg.mcpImage, "mcp-image", server.DefaultMCPImage, "image of the sandbox of each MCP session")
	fs.DurationVar(&cfg.mcpIdle, "mcp-idle-timeout", 30*time.Minute, "end an MCP session (and its sandbox), or close a sandbox opened by handle (MCP 2026-07-28), after this long without a request")
	cfg.labels = envList{}
	fs.Var(cfg.labels, "label", "KEY=VALUE put on every container, volume and network of this server, repeatable; "+
		"the server lists, adopts and reaps only resources made under exactly its set of labels (label sandboxd.scope), so servers with different labels, or none, share an engine safely")
	fs.StringVar(&cfg.agentBinary, "agent-binary", "", "static sandboxd binary to run as the agent in sandboxes (default: this binary)")
	cfg.diskQuota = defaultDiskQuota
	fs.Var(&cfg.diskQuota, "disk-quota", "cap /workspace and the home folder of every session at this size each (10GiB, 512MiB, ...; 0: none), "+
		"on the host's disk: a sparse ext4 file per volume on a loop device (--disk-backend loop)")
	fs.StringVar(&cfg.diskBackend, "disk-backend", "auto", "how --disk-quota / --disk-mb bound the volumes: loop (ext4 file on a loop device: needs root "+
		"and a local engine; refused at start if unavailable), tmpfs (--disk-mb, charged to memory), none, or auto: "+
		"tmpfs if --disk-mb is set, else loop where available, else none with a warning")
	fs.StringVar(&cfg.diskDir, "disk-dir", "", "where the sparse files of --disk-backend loop live (default <state-dir>/disks)")
	fs.IntVar(&cfg.diskMB, "disk-mb", 0, "cap /workspace and the home folder of every session at this many MiB each, as tmpfs charged to the "+
		"session's memory (they start empty and do not survive an engine restart); 0: no tmpfs (see --disk-quota)")
	fs.Var(&cfg.pool, "pool", "warm pool of the default profile (the config's default profile, else the flags' defaults): N keeps N started sandboxes ready; "+
		"MIN:MAX keeps at least MIN and grows toward MAX while creates drain it, back to MIN once idle; each profile of the config has its own (pool: N, or pool: {min, max})")
	fs.IntVar(&cfg.maxStarts, "max-concurrent-starts", sandbox.DefaultMaxConcurrentStarts,
		"sandboxes being started at once (client creates go before pool refills); on 2 cores 4 gave the best ready latency")
	fs.IntVar(&cfg.maxSessions, "max-sessions", server.DefaultMaxSessions, "cap on live sessions, WebSocket and MCP together (-1: none)")
	fs.Int64Var(&cfg.maxMessage, "max-message-bytes", server.DefaultMaxMessageBytes, "largest WebSocket message or MCP request body accepted")
	fs.BoolVar(&cfg.direct, "direct", true, "reach the agent of each sandbox over a unix socket of this server's (under <state-dir>/direct, "+
		"mounted read-only into the sandbox, one per session) instead of the engine's attach stream, which stays as the fallback; local engines only; "+
		"false: every call goes through the engine (docs/security.md, \"The direct path\")")
	fs.BoolVar(&cfg.keepSessions, "keep-sessions", false, "leave sessions running at shutdown; the next start adopts them")
	fs.DurationVar(&cfg.drainTimeout, "drain-timeout", server.DefaultDrainTimeout, "at shutdown, how long calls in flight may take to finish before they are cancelled")
	fs.DurationVar(&cfg.shutdownTime, "shutdown-timeout", 60*time.Second, "hard limit of the whole shutdown")
	fs.StringVar(&cfg.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&cfg.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&cfg.configPath, "config", "", "YAML file of session profiles and skill roots (README.md, \"Profiles\"); "+
		"a profile named default is what session.create without profile and /mcp get; refused at start with file:line if anything in it is wrong")
	fs.Var(&cfg.skillsDirs, "skills-dir", "a root of operator skills: the absolute path of a directory on this host, repeatable; "+
		"added to the config's skills_dirs")
	fs.StringVar(&cfg.secretsFile, "secrets-file", "", "NAME=VALUE lines (mode 600) of the secrets profiles give MCP sidecars (mcp_servers[].secrets); "+
		"a name not in it is read from SANDBOXD_SECRET_<NAME> in this environment")
	if err := envDefaults(fs, "SANDBOXD_"); err != nil {
		return err
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.diskMB < 0 {
		return usageErrorf("--disk-mb %d: want 0 (no limit) or a size in MiB", cfg.diskMB)
	}
	if err := checkDiskFlags(&cfg); err != nil {
		return err
	}
	if _, err := (sandbox.SessionOptions{Runtime: cfg.runtime}).Resolve(sandbox.SessionOptions{}); err != nil {
		return usageErrorf("--runtime %q: %v", cfg.runtime, err)
	}
	if cfg.maxMessage < minMaxMessage {
		return usageErrorf("--max-message-bytes %d: want at least %d (1 MiB): tool results and transfer chunks must fit (the Go client moves files in %d MiB chunks; set its ChunkSize below the limit)", cfg.maxMessage, minMaxMessage, client.ChunkSize>>20)
	}
	if cfg.maxStarts < 1 {
		return usageErrorf("--max-concurrent-starts %d: want 1 or more", cfg.maxStarts)
	}
	log, err := newServeLogger(std.err, cfg.logLevel, cfg.logFormat)
	if err != nil {
		return err
	}
	// A bad config refuses to start before anything touches Docker.
	file := &config.File{Profiles: map[string]*config.Profile{}}
	if cfg.configPath != "" {
		if file, err = config.Load(cfg.configPath); err != nil {
			return err
		}
	}
	skillRoots, err := skillRoots(file.SkillsDirs, cfg.skillsDirs)
	if err != nil {
		return err
	}
	if file.AllowNetworks, err = allowNetworks(file.AllowNetworks, cfg.allowNetworks); err != nil {
		return err
	}
	if cfg.stateDir == "" {
		if cfg.stateDir, err = auth.DefaultStateDir(); err != nil {
			return err
		}
	}
	token, tokenPath, created, err := auth.OperatorToken(os.Getenv("SANDBOXD_TOKEN"), cfg.stateDir)
	if err != nil {
		return err
	}
	// Refuse a bad address before touching Docker.
	if err := server.CheckListen(server.Options{Listen: cfg.listen, TLSCert: cfg.tlsCert, TLSKey: cfg.tlsKey, InsecureAllowRemote: cfg.insecureRemote}); err != nil {
		return usageErrorf("%v", err)
	}

	if cfg.diskDir == "" {
		cfg.diskDir = filepath.Join(cfg.stateDir, "disks")
	}
	// The disk directory is given whatever the backend, so that a server
	// started with tmpfs or none still releases the disks of an earlier one.
	// The direct path's folder likewise: with --direct=false, the folders
	// of an earlier server are still removed with their sessions.
	rt, err := docker.New(ctx, docker.Options{AgentBinary: cfg.agentBinary, Labels: cfg.labels, Logger: log, DiskDir: cfg.diskDir,
		InsecureBridge: cfg.insecureBridge, DirectDir: filepath.Join(cfg.stateDir, "direct"), NoDirect: !cfg.direct})
	if err != nil {
		return err
	}
	defer rt.Close()
	// Fail closed: a server asked for a runtime the engine lacks does not
	// start (its sessions would otherwise all fail, or worse, run elsewhere).
	if err := rt.CheckRuntime(ctx, cfg.runtime); err != nil {
		return fmt.Errorf("--runtime %s: %w", cfg.runtime, err)
	}
	limits, err := diskLimits(cfg, rt.DiskQuota(), log)
	if err != nil {
		return err
	}
	defaults := sandbox.SessionOptions{Image: cfg.image, Limits: limits, Runtime: cfg.runtime}
	if err := checkProfiles(ctx, file, defaults, rt.CheckRuntime); err != nil {
		return err
	}
	skillSrc, err := loadSkills(ctx, cfg.stateDir, skillRoots, log)
	if err != nil {
		return err
	}
	if err := checkProfileSkills(file, skillSrc); err != nil {
		return err
	}
	secrets, err := loadSecrets(cfg.secretsFile)
	if err != nil {
		return err
	}
	mopts := sandbox.ManagerOptions{Defaults: defaults, MaxConcurrentStarts: cfg.maxStarts, Logger: log,
		Pools: profilePools(file, cfg, log), Skills: skillSrc, Secrets: secrets, Networks: file.AllowNetworks}
	if len(file.AllowNetworks) > 0 {
		log.Info("sessions may join these engine networks, which sandboxd does not firewall", "networks", strings.Join(file.AllowNetworks, ", "))
	}
	m, err := sandbox.NewManager(ctx, rt, mopts)
	if err != nil {
		return err
	}
	learnSidecarTools(ctx, m, file, log)
	srv, err := server.New(server.Options{
		Listen: cfg.listen, TLSCert: cfg.tlsCert, TLSKey: cfg.tlsKey, InsecureAllowRemote: cfg.insecureRemote,
		AllowOrigins: cfg.allowOrigins, AllowHosts: cfg.allowHosts,
		Backend: sandboxmgr.New(m), OperatorToken: token, StateDir: cfg.stateDir,
		AllowedImages: cfg.allowImgs, MaxSessions: cfg.maxSessions, MaxMessageBytes: cfg.maxMessage,
		Profiles: profileOptions(file), MCPImage: cfg.mcpImage, MCPSessionTimeout: cfg.mcpIdle,
		MCPTools: func(profile string, o sandbox.SessionOptions) []tools.Definition {
			defs := append(mcpapi.BuiltinTools(profile, o), skillSrc.Definitions(o.Skills)...)
			return append(defs, m.SidecarTools(o.MCPServers)...)
		},
		MCPToolsVersion: m.SidecarToolsVersion,
		KeepSessions:    cfg.keepSessions, DrainTimeout: cfg.drainTimeout,
		Logger: log, Version: version(),
	})
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), cfg.shutdownTime)
		defer cancel()
		_ = m.Shutdown(sctx, cfg.keepSessions)
		return err
	}
	return srv.Run(ctx, cfg.shutdownTime, func(addr net.Addr) {
		base := baseURL(cfg, addr)
		where := "from SANDBOXD_TOKEN"
		if tokenPath != "" {
			where = "in " + tokenPath
			if created {
				where = "generated, in " + tokenPath
			}
		}
		log.Info("sandboxd serving", "addr", addr.String(), "websocket", wsURL(base), "mcp", base+"/mcp", "token", where)
		if names := file.Names(); len(names) > 0 {
			log.Info("session profiles", "config", cfg.configPath, "profiles", strings.Join(names, ", "), "mcp", base+"/mcp/NAME")
		}
		// The client commands need the flags that differ from their defaults.
		var flags string
		if u := wsURL(base); u != "ws://"+server.DefaultListen+"/v1/ws" {
			flags += " --server " + shellQuote(u)
		}
		if def, _ := auth.DefaultStateDir(); tokenPath != "" && cfg.stateDir != def {
			flags += " --state-dir " + shellQuote(cfg.stateDir)
		}
		who := "same user"
		if tokenPath == "" {
			who = "with the same SANDBOXD_TOKEN: no token file is written"
		}
		fmt.Fprintf(std.err, "sandboxd %s serving on %s\n  WebSocket: %s\n  MCP:       %s/mcp\n  token:     %s\n"+
			"try, in another terminal (%s):\n  sandboxd run%s -- 'uname -a; id'   # a command in a fresh sandbox\n  sandboxd shell%s                    # an interactive terminal\n"+
			"  MCP clients: %s/mcp with the header \"Authorization: Bearer <token>\"\n",
			version(), addr, wsURL(base), base, where, who, flags, flags, base)
	})
}

// checkProfiles resolves every profile of the config over the sessions'
// defaults, as a create would, and checks the OCI runtimes they name with
// the engine: a profile whose sessions could never start refuses the
// server's start, at the line of the option at fault.
func checkProfiles(ctx context.Context, file *config.File, defaults sandbox.SessionOptions, checkRuntime func(context.Context, string) error) error {
	if err := file.Check(defaults); err != nil {
		return err
	}
	var errs []error
	for _, name := range file.Names() {
		if rt := file.Profiles[name].Options.Runtime; rt != "" && rt != defaults.Runtime {
			if err := checkRuntime(ctx, rt); err != nil {
				errs = append(errs, file.Errorf(name, "runtime", "%v", err))
			}
		}
	}
	return errors.Join(errs...)
}

// profileOptions are the config's profiles as the server takes them.
func profileOptions(file *config.File) map[string]sandbox.SessionOptions {
	out := make(map[string]sandbox.SessionOptions, len(file.Profiles))
	for name, p := range file.Profiles {
		out[name] = p.Options
	}
	return out
}

// profilePools are the warm pools: each profile's pool of its options, and
// --pool N (or MIN:MAX) the default profile's (the config's "default", else the
// flags' defaults), in place of the one the config gives it.
func profilePools(file *config.File, cfg serveConfig, log *slog.Logger) []sandbox.PoolOptions {
	var pools []sandbox.PoolOptions
	def, hasDefault := file.Profiles[config.DefaultProfile]
	for _, name := range file.Names() {
		p := file.Profiles[name]
		if max(p.Pool, p.PoolMax) == 0 || (name == config.DefaultProfile && cfg.pool.max > 0) {
			continue
		}
		pools = append(pools, sandbox.PoolOptions{Options: p.Options, Size: p.Pool, Max: p.PoolMax, Idle: p.PoolIdle})
	}
	if cfg.pool.max > 0 {
		var o sandbox.SessionOptions
		if hasDefault {
			o = def.Options
			if max(def.Pool, def.PoolMax) > 0 && (def.Pool != cfg.pool.min || max(def.Pool, def.PoolMax) != cfg.pool.max) {
				log.Info("--pool sets the default profile's warm pool, in place of the config's", "pool", cfg.pool.String(),
					"config_pool_min", def.Pool, "config_pool_max", max(def.Pool, def.PoolMax))
			}
		} else if cfg.mcpImage != cfg.image {
			log.Warn("the warm pool (--pool) holds --image; the MCP endpoint /mcp starts --mcp-image sandboxes cold "+
				"(give both the same image, or define a default profile)", "image", cfg.image, "mcp_image", cfg.mcpImage)
		}
		po := cfg.pool.options(o)
		if hasDefault {
			po.Idle = def.PoolIdle
		}
		pools = append(pools, po)
	}
	if hasDefault && cfg.mcpImage != server.DefaultMCPImage {
		log.Warn("--mcp-image is not used: the config's default profile is what /mcp serves", "mcp_image", cfg.mcpImage)
	}
	return pools
}

// loadSkills loads the skills sessions can select: the operator's roots,
// then the built-in skills, written (content-addressed, read-only) under
// the state directory so that sandboxes can mount them. What a root holds
// that cannot be used is logged with the reason; it never stops the server.
// SIGINT and SIGTERM (ctx) end a load that is stuck.
func loadSkills(ctx context.Context, stateDir string, operatorRoots []string, log *slog.Logger) (sandboxmgr.Skills, error) {
	builtinDir, err := skills.ExtractBuiltin(filepath.Join(stateDir, "skills"))
	if err != nil {
		return sandboxmgr.Skills{}, fmt.Errorf("writing the built-in skills under %s: %w", stateDir, err)
	}
	roots := make([]skills.Root, 0, len(operatorRoots)+1)
	for _, d := range operatorRoots {
		roots = append(roots, skills.Root{Dir: d})
	}
	lib, err := loadLibrary(ctx, append(roots, skills.BuiltinRoot(builtinDir))...)
	if err != nil {
		return sandboxmgr.Skills{}, err
	}
	for _, sk := range lib.Skipped() {
		log.Warn("skill not loaded", "path", sk.Path, "root", sk.Root, "reason", sk.Reason)
	}
	for _, sk := range lib.Skills() {
		for _, w := range sk.Warnings {
			log.Debug("skill loaded with a warning", "path", sk.Path, "root", sk.Root, "warning", w)
		}
	}
	log.Info("skills", "loaded", len(lib.Skills()), "skipped", len(lib.Skipped()), "roots", strings.Join(append(slices.Clone(operatorRoots), "built-in"), ", "))
	return sandboxmgr.Skills{Lib: lib, Log: log}, nil
}

// checkProfileSkills refuses a profile whose skills select nothing loaded,
// at the line of its skills option.
func checkProfileSkills(file *config.File, src sandboxmgr.Skills) error {
	var errs []error
	for _, name := range file.Names() {
		if sel := file.Profiles[name].Options.Skills; len(sel) > 0 {
			if _, err := src.Mounts(sel); err != nil {
				errs = append(errs, file.Errorf(name, "skills", "%v", err))
			}
		}
	}
	return errors.Join(errs...)
}

// skillRoots are the operator's skill roots: the config's skills_dirs,
// then --skills-dir, each an absolute path of a directory, once.
func skillRoots(fromConfig, fromFlags []string) ([]string, error) {
	roots := slices.Clone(fromConfig)
	for _, d := range fromFlags {
		if err := config.CheckSkillsDir(d); err != nil {
			return nil, usageErrorf("--skills-dir %v", err)
		}
		if !slices.Contains(roots, d) {
			roots = append(roots, d)
		}
	}
	return roots, nil
}

// allowNetworks are the networks sessions may join: the config's
// allow_networks, then --allow-network's.
func allowNetworks(fromConfig, fromFlags []string) ([]string, error) {
	nets := slices.Clone(fromConfig)
	for _, n := range fromFlags {
		if err := sandbox.CheckNetworkName(n); err != nil {
			return nil, usageErrorf("--allow-network %v", err)
		}
		if !slices.Contains(nets, n) {
			nets = append(nets, n)
		}
	}
	return nets, nil
}

// Disk backends (--disk-backend).
const (
	diskAuto  = "auto"
	diskLoop  = "loop"
	diskTmpfs = "tmpfs"
	diskNone  = "none"
)

// defaultDiskQuota is --disk-quota's default.
const defaultDiskQuota = 10 << 30

// checkDiskFlags refuses disk flags that contradict each other, before
// anything starts.
func checkDiskFlags(cfg *serveConfig) error {
	q := int64(cfg.diskQuota)
	switch cfg.diskBackend {
	case diskAuto:
	case diskLoop:
		if cfg.diskMB != 0 {
			return usageErrorf("--disk-backend loop with --disk-mb %d: --disk-mb sizes tmpfs volumes; give the size with --disk-quota", cfg.diskMB)
		}
		if q == 0 {
			return usageErrorf("--disk-backend loop with --disk-quota 0: give a size, or --disk-backend none")
		}
	case diskTmpfs:
		if cfg.diskMB == 0 {
			return usageErrorf("--disk-backend tmpfs needs --disk-mb N (the size of each volume in MiB)")
		}
	case diskNone:
		if cfg.diskMB != 0 {
			return usageErrorf("--disk-backend none with --disk-mb %d: drop one of them", cfg.diskMB)
		}
	default:
		return usageErrorf("--disk-backend %q: want auto, loop, tmpfs or none", cfg.diskBackend)
	}
	if q != 0 && (q < sandbox.MinDiskQuota || q > sandbox.MaxDiskQuota) {
		return usageErrorf("--disk-quota %s: want 0 (none) or %d MiB to %d GiB", cfg.diskQuota.String(), sandbox.MinDiskQuota>>20, sandbox.MaxDiskQuota>>30)
	}
	return nil
}

// diskLimits are the sessions' default disk limits for the checked flags,
// given whether the runtime can make quota-bound volumes (loopErr). auto
// says at start what it chose when it is not the quota asked for.
func diskLimits(cfg serveConfig, loopErr error, log *slog.Logger) (sandbox.Limits, error) {
	q := int64(cfg.diskQuota)
	tmpfs := sandbox.Limits{Disk: int64(cfg.diskMB) << 20}
	switch {
	case cfg.diskBackend == diskTmpfs, cfg.diskBackend == diskAuto && cfg.diskMB != 0:
		log.Info("disk limit: tmpfs volumes charged to memory", "disk_mb", cfg.diskMB)
		return tmpfs, nil
	case cfg.diskBackend == diskNone, q == 0:
		log.Warn("no disk quota: /workspace and the home folder are bounded only by the engine's disk", "disk_backend", cfg.diskBackend)
		return sandbox.Limits{}, nil
	case loopErr == nil:
		log.Info("disk quota: an ext4 file on a loop device per volume", "disk_quota", cfg.diskQuota.String(), "disk_dir", cfg.diskDir)
		return sandbox.Limits{DiskQuota: q}, nil
	case cfg.diskBackend == diskLoop:
		return sandbox.Limits{}, fmt.Errorf("--disk-backend loop: disk quotas are unavailable here: %w", loopErr)
	}
	log.Warn("no disk quota: this daemon cannot make one, so /workspace and the home folder are bounded only by the engine's disk; "+
		"--disk-backend tmpfs --disk-mb N caps them as tmpfs charged to memory, --disk-backend none silences this",
		"reason", loopErr.Error())
	return sandbox.Limits{}, nil
}

// minMaxMessage is the smallest --max-message-bytes: below it ordinary
// tool results would close the connection.
const minMaxMessage = 1 << 20

func baseURL(cfg serveConfig, addr net.Addr) string {
	scheme := "http"
	if cfg.tlsCert != "" {
		scheme = "https"
	}
	if addr.Network() == "unix" {
		return "unix:" + addr.String()
	}
	return scheme + "://" + addr.String()
}

func wsURL(base string) string {
	if strings.HasPrefix(base, "unix:") {
		return base + " (path /v1/ws)"
	}
	return "ws" + strings.TrimPrefix(base, "http") + "/v1/ws"
}

// envDefaults sets every flag from prefix+NAME (upper case, dashes as
// underscores) before the command line is parsed, so flags win.
func envDefaults(fs *flag.FlagSet, prefix string) error {
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		name := prefix + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok && err == nil {
			if e := fs.Set(f.Name, v); e != nil {
				err = usageErrorf("%s=%q: %v", name, v, e)
			}
		}
	})
	return err
}

func newServeLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageErrorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: l}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageErrorf("--log-format %q: want text or json", format)
}

// version is the module version of the binary, "dev" when built from a
// work tree.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// shellQuote quotes s for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/:._-+=@%,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// learnSidecarTools starts each profile's MCP sidecars once, in a probe,
// to learn their tools for stateless MCP clients' lists (made without a
// sandbox). A failure is logged: that profile's list lacks those tools
// until one of its sessions starts them.
func learnSidecarTools(ctx context.Context, m *sandbox.Manager, file *config.File, log *slog.Logger) {
	if file == nil {
		return
	}
	for _, name := range file.Names() {
		servers := file.Profiles[name].Options.MCPServers
		if len(servers) == 0 {
			continue
		}
		if err := m.LearnSidecarTools(ctx, servers); err != nil {
			log.Warn("learning a profile's MCP sidecar tools failed; its stateless tool list lacks them", "profile", name, "err", err)
		}
	}
}
