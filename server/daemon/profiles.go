package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/config"
)

// checkProfiles resolves every profile of the config over the sessions'
// defaults, as a create would, and checks the OCI runtimes they name with
// the engine: a profile whose sessions could never start refuses the
// server's start, at the line of the option at fault.
func checkProfiles(ctx context.Context, file *config.File, defaults sandbox.SessionOptions, checkRuntime func(context.Context, string) error,
	checkOptions func(sandbox.SessionOptions) error) error {
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
		// What the runtime cannot do (an *sandbox.UnsupportedError on
		// Kubernetes) refuses the start, not every session of the profile.
		if checkOptions != nil {
			if o, err := file.Profiles[name].Options.Resolve(defaults); err == nil {
				if err := checkOptions(o); err != nil {
					errs = append(errs, fmt.Errorf("profile %s: %w", name, err))
				}
			}
		}
	}
	if _, ok := file.Profiles[config.DefaultProfile]; !ok && checkOptions != nil {
		if o, err := (sandbox.SessionOptions{}).Resolve(defaults); err == nil {
			if err := checkOptions(o); err != nil {
				errs = append(errs, fmt.Errorf("the default session (the flags' defaults): %w", err))
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

// transferTools says whether a profile's MCP endpoint serves the harness
// tools upload and download (`transfer_tools`); "" is /mcp, the default
// profile's when the config defines one.
func transferTools(file *config.File) func(profile string) bool {
	return func(profile string) bool {
		if profile == "" {
			profile = config.DefaultProfile
		}
		p, ok := file.Profiles[profile]
		return ok && p.TransferTools
	}
}

// snapshotTools says whether a profile's MCP endpoint serves the harness
// tools of snapshots (`snapshot_tools`); "" is /mcp.
func snapshotTools(file *config.File) func(profile string) bool {
	return func(profile string) bool {
		if profile == "" {
			profile = config.DefaultProfile
		}
		p, ok := file.Profiles[profile]
		return ok && p.SnapshotTools
	}
}

// snapshotRetention is each profile's `snapshot_retention` that is set.
func snapshotRetention(file *config.File) map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, p := range file.Profiles {
		if p.SnapshotRetention != 0 {
			out[name] = p.SnapshotRetention
		}
	}
	return out
}

// profilePools are the warm pools: each profile's pool of its options, and
// --pool N (or MIN:MAX) the default profile's (the config's "default", else the
// flags' defaults), in place of the one the config gives it.
func profilePools(file *config.File, c Config, log *slog.Logger) []sandbox.PoolOptions {
	var pools []sandbox.PoolOptions
	def, hasDefault := file.Profiles[config.DefaultProfile]
	for _, name := range file.Names() {
		p := file.Profiles[name]
		if max(p.Pool, p.PoolMax) == 0 || (name == config.DefaultProfile && c.Pool.Max > 0) {
			continue
		}
		pools = append(pools, sandbox.PoolOptions{Options: p.Options, Profile: name, Shared: p.PoolShared, Size: p.Pool, Max: p.PoolMax, Idle: p.PoolIdle})
	}
	if c.Pool.Max > 0 {
		var o sandbox.SessionOptions
		if hasDefault {
			o = def.Options
			if max(def.Pool, def.PoolMax) > 0 && (def.Pool != c.Pool.Min || max(def.Pool, def.PoolMax) != c.Pool.Max) {
				log.Info("--pool sets the default profile's warm pool, in place of the config's", "pool", c.Pool.String(),
					"config_pool_min", def.Pool, "config_pool_max", max(def.Pool, def.PoolMax))
			}
		} else if c.MCPImage != c.Image {
			log.Warn("the warm pool (--pool) holds --image; the MCP endpoint /mcp starts --mcp-image sandboxes cold "+
				"(give both the same image, or define a default profile)", "image", c.Image, "mcp_image", c.MCPImage)
		}
		po := c.Pool.options(o)
		if hasDefault {
			po.Idle, po.Profile, po.Shared = def.PoolIdle, config.DefaultProfile, def.PoolShared
		}
		pools = append(pools, po)
	}
	if hasDefault && c.MCPImage != server.DefaultMCPImage {
		log.Warn("--mcp-image is not used: the config's default profile is what /mcp serves", "mcp_image", c.MCPImage)
	}
	return pools
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
