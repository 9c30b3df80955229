package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/config"
	"github.com/sandboxd/sandboxd/server/internal/mcpapi"
	"github.com/sandboxd/sandboxd/server/internal/sandboxmgr"
	"github.com/sandboxd/sandboxd/tools"
)

// Daemon is an assembled sandboxd: its runtime, session manager and
// server. Run serves it on Config.Listen; in-process callers serve
// Handler themselves and call Shutdown.
type Daemon struct {
	Server  *server.Server
	Manager *sandbox.Manager
	Runtime sandbox.Runtime
	Log     *slog.Logger
	// Token is the operator token; TokenPath its file ("" when it came
	// from Config.Token or SANDBOXD_TOKEN), TokenCreated whether this
	// start generated it.
	Token        string
	TokenPath    string
	TokenCreated bool
	// StateDir is Config.StateDir, or its default.
	StateDir string
	// Profiles are the config file's profile names.
	Profiles []string

	cfg          Config
	closeRuntime func()
	scope        *scopeLock // held while it runs (scopelock.go)
}

// runtime is a built runtime and what the assembly asks of it beside
// sandbox.Runtime.
type runtime struct {
	rt           sandbox.Runtime
	checkRuntime func(context.Context, string) error // an OCI runtime the engine must have
	checkOptions func(sandbox.SessionOptions) error  // what the runtime cannot do (nil: it does all)
	diskQuota    error                               // why quota-bound volumes cannot be made (nil: they can)
	close        func()
}

// newRuntime makes the sessions' runtime named by c.Backend.
func newRuntime(ctx context.Context, c Config, stateDir string, inj *injection, log *slog.Logger) (*runtime, error) {
	switch c.Backend {
	case "", BackendDocker:
		// The disk directory is given whatever the backend, so that a
		// server started with tmpfs or none still releases the disks of
		// an earlier one. The direct path's folder likewise: with
		// --direct=false, the folders of an earlier server are still
		// removed with their sessions.
		dopts := docker.Options{Client: c.DockerClient, AgentBinary: c.AgentBinary, Labels: c.Labels, Logger: log,
			DiskDir: c.DiskDir, InsecureBridge: c.InsecureBridge, DirectDir: filepath.Join(stateDir, "direct"), NoDirect: !c.Direct,
			InjectTrust: inj.trust(stateDir)}
		if inj != nil {
			dopts.EgressInterceptor = inj.interceptor // secret injection at the session's egress proxy (0051)
		}
		rt, err := docker.New(ctx, dopts)
		if err != nil {
			return nil, err
		}
		return &runtime{rt: rt, checkRuntime: rt.CheckRuntime, diskQuota: rt.DiskQuota(), close: func() { _ = rt.Close() }}, nil
	case BackendKubernetes:
		return newKubeRuntime(ctx, c, log)
	}
	return nil, usageErrorf("--backend %q: want %s or %s", c.Backend, BackendDocker, BackendKubernetes)
}

// New assembles a daemon from c: it validates c, reads the config file,
// the skill roots and the secrets, makes the runtime and the manager,
// learns the profiles' sidecar tools and makes the server. Nothing listens
// yet. A bad config file refuses to start before anything touches the
// engine.
func New(ctx context.Context, c Config) (d *Daemon, err error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	log := c.Logger
	if log == nil {
		if log, err = c.newLogger(); err != nil {
			return nil, err
		}
	}
	file := &config.File{Profiles: map[string]*config.Profile{}}
	if c.ConfigPath != "" {
		if file, err = config.Load(c.ConfigPath); err != nil {
			return nil, err
		}
	}
	roots, err := SkillRoots(file.SkillsDirs, c.SkillsDirs)
	if err != nil {
		return nil, err
	}
	if file.AllowNetworks, err = allowNetworks(file.AllowNetworks, c.AllowNetworks); err != nil {
		return nil, err
	}
	stateDir := c.StateDir
	if stateDir == "" {
		if stateDir, err = auth.DefaultStateDir(); err != nil {
			return nil, err
		}
	}
	d = &Daemon{Log: log, StateDir: stateDir, Token: c.Token, Profiles: file.Names(), cfg: c}
	if d.Token == "" {
		if d.Token, d.TokenPath, d.TokenCreated, err = auth.OperatorToken(os.Getenv("SANDBOXD_TOKEN"), stateDir); err != nil {
			return nil, err
		}
	}
	if c.DiskDir == "" {
		c.DiskDir = filepath.Join(stateDir, "disks")
	}
	if c.Backend == "" || c.Backend == BackendDocker {
		var lock *scopeLock
		if lock, err = lockScope(c, fmt.Sprintf("sandboxd pid %d (state dir %s, listening on %s)", os.Getpid(), stateDir, c.Listen)); err != nil {
			return nil, err
		}
		d.scope = lock
		defer func() {
			if err != nil { // d is nil by now: the lock is released through its own name
				lock.release()
			}
		}()
	}
	// Secrets and injection before the engine: a profile naming a secret
	// the daemon lacks refuses the start at its line.
	secrets, err := loadSecrets(c.SecretsFile)
	if err != nil {
		return nil, err
	}
	inj, err := setupInjection(file, stateDir, secrets, c.InjectRoots, log)
	if err != nil {
		return nil, err
	}
	rt, err := newRuntime(ctx, c, stateDir, inj, log)
	if err != nil {
		return nil, err
	}
	d.Runtime, d.closeRuntime = rt.rt, rt.close
	defer func() {
		if err != nil {
			rt.close()
		}
	}()
	// Fail closed: a server asked for a runtime the engine lacks does not
	// start (its sessions would otherwise all fail, or worse, run elsewhere).
	if err := rt.checkRuntime(ctx, c.Runtime); err != nil {
		return nil, fmt.Errorf("--runtime %s: %w", c.Runtime, err)
	}
	limits, err := c.diskLimits(rt.diskQuota, log)
	if err != nil {
		return nil, err
	}
	defaults := sandbox.SessionOptions{Image: c.Image, Limits: limits, Runtime: c.Runtime}
	if err := checkProfiles(ctx, file, defaults, rt.checkRuntime, rt.checkOptions); err != nil {
		return nil, err
	}
	skillSrc, err := loadSkills(ctx, stateDir, roots, log)
	if err != nil {
		return nil, err
	}
	if err := checkProfileSkills(file, skillSrc); err != nil {
		return nil, err
	}
	mopts := sandbox.ManagerOptions{Defaults: defaults, MaxConcurrentStarts: c.MaxStarts, MaxStartWait: c.MaxStartWait, Logger: log,
		SnapshotRetention: c.SnapshotRetention,
		Pools:             profilePools(file, c, log), Skills: skillSrc, Secrets: secrets, Networks: file.AllowNetworks}
	if len(file.AllowNetworks) > 0 {
		log.Info("sessions may join these engine networks, which sandboxd does not firewall", "networks", strings.Join(file.AllowNetworks, ", "))
	}
	if c.ManagerHook != nil {
		c.ManagerHook(&mopts)
	}
	m, err := sandbox.NewManager(ctx, rt.rt, mopts)
	if err != nil {
		return nil, err
	}
	d.Manager = m
	learnSidecarTools(ctx, m, file, log)
	sopts := server.Options{
		Listen: c.Listen, TLSCert: c.TLSCert, TLSKey: c.TLSKey, InsecureAllowRemote: c.InsecureAllowRemote,
		AllowOrigins: c.AllowOrigins, AllowHosts: c.AllowHosts,
		Backend: sandboxmgr.New(m), OperatorToken: d.Token, StateDir: stateDir,
		AllowedImages: c.AllowImages, MaxSessions: c.MaxSessions, MaxMessageBytes: c.MaxMessage,
		Profiles: profileOptions(file), MCPImage: c.MCPImage, MCPSessionTimeout: c.MCPIdle,
		MCPTools: func(profile string, o sandbox.SessionOptions) []tools.Definition {
			defs := append(mcpapi.BuiltinTools(profile, o), skillSrc.Definitions(o.Skills)...)
			return append(defs, m.SidecarTools(o.MCPServers)...)
		},
		MCPToolsVersion:   m.SidecarToolsVersion,
		MCPTransferTools:  transferTools(file),
		MCPSnapshotTools:  snapshotTools(file),
		SnapshotRetention: snapshotRetention(file),
		KeepSessions:      c.KeepSessions, DrainTimeout: c.DrainTimeout,
		Logger: log, Version: c.Version,
	}
	if c.ServerHook != nil {
		c.ServerHook(&sopts)
	}
	if d.Server, err = server.New(sopts); err != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.ShutdownTimeout)
		defer cancel()
		_ = m.Shutdown(sctx, c.KeepSessions)
		return nil, err
	}
	return d, nil
}

// Handler is the daemon's HTTP handler, for a caller that serves it.
func (d *Daemon) Handler() http.Handler { return d.Server.Handler() }

// Run listens on Config.Listen and serves until ctx ends, then shuts down
// within Config.ShutdownTimeout and closes the runtime. ready (may be nil)
// is called with the bound address once listening.
func (d *Daemon) Run(ctx context.Context, ready func(addr net.Addr)) error {
	defer d.closeRuntime()
	return d.Server.Run(ctx, d.cfg.ShutdownTimeout, ready)
}

// Shutdown shuts the server (and with it the manager) down within ctx,
// then closes the runtime; for callers that serve Handler themselves.
func (d *Daemon) Shutdown(ctx context.Context) error {
	err := d.Server.Shutdown(ctx)
	d.closeRuntime()
	d.scope.release()
	return err
}
