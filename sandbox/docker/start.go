package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/egress"
)

// Start creates the session's network (if it asks for a private one), its
// volumes (the workspace, the home folder and the editable paths, each on a
// filesystem of its own with a disk quota, see quota.go) and its container,
// seeds the volumes that layout.go says the engine cannot seed right
// (seed.go), attaches to the container's stdio and only then starts it, so
// that not a byte of the agent's output is missed. On any failure
// everything of the session is removed again.
func (r *Runtime) Start(ctx context.Context, spec sandbox.Spec) (_ io.ReadWriteCloser, err error) {
	id := spec.SessionID
	log := r.log.With("session", id)
	// Before anything is made: a runtime the engine lacks is refused, never
	// replaced by the default (decision 0024).
	if err := r.checkRuntime(ctx, spec.Options.Runtime, spec.Options.Network); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			rctx, cancel := r.call(context.WithoutCancel(ctx))
			defer cancel()
			if rerr := r.Remove(rctx, id); rerr != nil {
				log.Error("rolling back a failed start", "err", rerr)
			}
		}
	}()

	if r.agentInVolume(spec.Options) {
		if err := r.ensureAgentVolume(ctx, spec.Options.Image); err != nil {
			return nil, err
		}
	}
	// Volumes and networks carry the session's labels but not the options
	// JSON, which only the container needs.
	resLabels := maps.Clone(r.labels(spec.Labels))
	delete(resLabels, sandbox.LabelOptions)
	delete(resLabels, sandbox.LabelPool)

	img, err := r.inspectImage(ctx, spec.Options.Image)
	if err != nil {
		return nil, err
	}
	uid, gid, err := r.sessionUser(ctx, id, spec.Options, img, resLabels)
	if err != nil {
		return nil, err
	}
	l, err := planLayout(id, spec.Options, img, uid, gid)
	if err != nil {
		return nil, err
	}

	netName, proxy, err := r.createNetwork(ctx, id, spec.Options, resLabels)
	if err != nil {
		return nil, err
	}
	if err := r.createVolumes(ctx, spec.Options, l, resLabels); err != nil {
		return nil, err
	}
	// The overlays' fix passes run on while the containers are made;
	// joined before the start, and before a rollback removes their folders.
	fixed, err := r.mountOverlays(ctx, id, l, img, spec.Options.Limits.DiskQuota > 0)
	if err != nil {
		return nil, err
	}
	defer func() { _ = fixed() }()
	// The seeding helper is made while the container is: both are creates
	// of the same image, and the seeding needs both.
	var (
		helper       string
		removeHelper func() error
		helperErr    = make(chan error, 1)
	)
	if owned := l.owned(); len(owned) > 0 {
		go func() {
			var err error
			helper, removeHelper, err = r.createHelper(ctx, id, "seed", img, seedHelperMounts(owned), resLabels)
			helperErr <- err
		}()
	} else {
		helperErr <- nil
	}
	var created string
	skills, skillDirs, cerr := r.skillMounts(ctx, spec.Options.Image, spec.Skills)
	defer skillDirs.close()
	if cerr == nil {
		var direct []mount.Mount
		direct, cerr = r.directMount(id)
		skills = append(skills, direct...)
	}
	var trustDir string
	if cerr == nil {
		var trust []mount.Mount
		trust, trustDir, cerr = r.trustMount(spec.Options, img.id)
		skills = append(skills, trust...)
	}
	if cerr == nil {
		created, cerr = r.createContainer(ctx, spec, netName, proxy, l, skills)
	}
	if cerr == nil && trustDir != "" {
		cerr = r.writeTrust(ctx, created, trustDir)
	}
	if herr := <-helperErr; herr != nil || cerr != nil {
		if removeHelper != nil {
			_ = removeHelper() // the rollback (Remove) would find it too
		}
		return nil, errors.Join(cerr, herr)
	}
	if removeHelper != nil {
		err := r.seed(ctx, id, helper, created, l, spec.Options.Limits.DiskQuota > 0)
		if rerr := removeHelper(); err == nil {
			err = rerr
		}
		if err != nil {
			return nil, err
		}
	}

	if err := fixed(); err != nil {
		return nil, err
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	hj, err := r.cli.ContainerAttach(cctx, created, container.AttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("attaching to the container: %w", err)
	}
	// The engine resolves the skill binds' sources as it starts: they are
	// checked right before and right after (decision 0039).
	if err := skillDirs.check(); err != nil {
		hj.Close()
		return nil, err
	}
	if err := r.cli.ContainerStart(cctx, created, container.StartOptions{}); err != nil {
		hj.Close()
		return nil, fmt.Errorf("starting the container: %w", err)
	}
	if err := skillDirs.check(); err != nil {
		hj.Close()
		return nil, err
	}
	log.Debug("sandbox started", "container", created[:12], "network", netName, "cwd", l.cwd, "user", fmt.Sprintf("%d:%d", l.uid, l.gid))
	return newStream(hj, r.agentLog(id).With("stream", "attach")), nil
}

// createVolumes makes the session's volumes: each on a filesystem of its
// own with a disk quota (quota.go, all at once), else an engine volume,
// tmpfs with Limits.Disk.
func (r *Runtime) createVolumes(ctx context.Context, o sandbox.SessionOptions, l layout, labels map[string]string) error {
	var devs map[string]string
	if o.Limits.DiskQuota > 0 {
		names := make([]string, len(l.vols))
		for i, v := range l.vols {
			names[i] = v.name
		}
		var err error
		if devs, err = r.makeDisks(ctx, o.Limits.DiskQuota, l.uid, l.gid, names); err != nil {
			return err
		}
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	for _, v := range l.vols {
		if v.seed == seedOverlay {
			continue // a folder of the daemon's (overlay.go)
		}
		vl, opts := labels, volumeOptions(o, l)
		if dev, ok := devs[v.name]; ok {
			vl = maps.Clone(labels)
			vl[LabelDiskFile] = diskFile(r.quota.dir, v.name)
			opts = diskDriverOptions(dev)
		}
		if _, err := r.cli.VolumeCreate(cctx, volume.CreateOptions{
			Name: v.name, Labels: vl, Driver: "local", DriverOpts: opts,
		}); err != nil {
			return fmt.Errorf("creating the %s volume: %w", v.what, err)
		}
	}
	return nil
}

// createContainer creates the session's container (not started) and
// returns its id.
func (r *Runtime) createContainer(ctx context.Context, spec sandbox.Spec, netName string, proxy netip.AddrPort, l layout, extra []mount.Mount) (string, error) {
	cs, err := r.buildContainer(spec, netName, l, extra...)
	if err != nil {
		return "", err
	}
	if proxy.IsValid() { // allow_hosts names hosts: the egress proxy (firewall_egress.go)
		cs.config.Env = withProxy(cs.config.Env, proxy)
		cs.host.DNS = []string{proxy.Addr().String()}
	}
	if len(spec.Options.Inject) > 0 {
		cs.config.Env = withTrustEnv(cs.config.Env)
	}
	// The create is not cancelled with ctx: an engine finishes a create
	// whose caller gave up, and the rollback would then miss the container
	// (which re-creates its volumes, unlabelled, once they are removed).
	nctx, ncancel := r.call(context.WithoutCancel(ctx))
	if sandbox.IsSnapshotImage(spec.Options.Image) {
		// The engine copies a fork's workspace out of its snapshot in the
		// create (copy-up): a gigabyte, eight forks at once, outlasts an
		// engine call's bound (decision 0052).
		ncancel()
		nctx, ncancel = context.WithTimeout(context.WithoutCancel(ctx), seedTimeout)
	}
	defer ncancel()
	created, err := r.cli.ContainerCreate(nctx, cs.config, cs.host, cs.network, nil, cs.name)
	switch {
	case cerrdefs.IsNotFound(err):
		return "", errImageMissing(spec.Options.Image, err)
	case cerrdefs.IsConflict(err):
		return "", fmt.Errorf("a container named %s exists already: %w", cs.name, err)
	case cerrdefs.IsInvalidArgument(err):
		// The container is made from the options: a setting the engine
		// refuses (more CPUs than it has) is the client's to change.
		return "", &sandbox.OptionsError{Problems: []string{"the engine refused the container: " + errdefsMessage(err)}}
	case err != nil:
		return "", fmt.Errorf("creating container: %w", err)
	}
	for _, w := range created.Warnings {
		r.log.Warn("engine warning on create", "session", spec.SessionID, "warning", w)
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	if err := r.checkCwd(cctx, created.ID, spec.Options, l); err != nil {
		return created.ID, err
	}
	if err := checkEditablePaths(cctx, r.cli, created.ID, spec.Options.EditablePaths); err != nil {
		return created.ID, err
	}
	return created.ID, nil
}

// createNetwork makes the session's private network for the bridge and
// internal modes, with its host firewall rules (firewall.go), or checks
// that a network the operator listed is what its name says
// (checkJoinable; it gets no firewall rules), and returns the network
// mode for the container and, when allow_hosts names hosts, the address
// of its egress proxy.
func (r *Runtime) createNetwork(ctx context.Context, id string, o sandbox.SessionOptions, labels map[string]string) (string, netip.AddrPort, error) {
	mode := o.Network
	switch mode {
	case sandbox.NetworkNone:
		return "none", netip.AddrPort{}, nil
	case sandbox.NetworkBridge, sandbox.NetworkInternal:
	default: // a network the operator listed (sandbox.ManagerOptions.Networks)
		cctx, cancel := r.call(ctx)
		defer cancel()
		n, err := r.cli.NetworkInspect(cctx, mode, network.InspectOptions{})
		if err != nil {
			if cerrdefs.IsNotFound(err) {
				return "", netip.AddrPort{}, &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
					"network: the engine has no network named %q (the operator allows it, but it does not exist); use %q, %q or %q",
					mode, sandbox.NetworkNone, sandbox.NetworkBridge, sandbox.NetworkInternal)}}
			}
			return "", netip.AddrPort{}, fmt.Errorf("inspecting network %s: %w", mode, err)
		}
		if err := checkJoinable(mode, n); err != nil {
			return "", netip.AddrPort{}, err
		}
		return mode, netip.AddrPort{}, nil
	}
	name := networkName(id)
	var ic egress.Interceptor
	if r.opts.EgressInterceptor != nil && len(o.AllowHosts) > 0 {
		ic = r.opts.EgressInterceptor(o)
	}
	proxy, err := r.makeBridge(ctx, id, name, o.Network, o.AllowHosts, ic, labels)
	if err != nil {
		return "", netip.AddrPort{}, err
	}
	return name, proxy, nil
}

// predefinedNetworks are the engine's own networks (default is an alias of
// bridge on Linux).
var predefinedNetworks = []string{"bridge", "host", "none", "default"}

// checkJoinable checks the engine's network n, inspected by the name a
// session asked for, before the session joins it: the engine's inspect
// also matches an ID or a prefix of one, so n must be named exactly so,
// and it must be neither one of the engine's predefined networks nor one
// of sandboxd's (any label of sandboxd's: another runtime's session or
// sidecar network), whatever the operator listed.
func checkJoinable(name string, n network.Inspect) error {
	refuse := func(format string, args ...any) error {
		return &sandbox.OptionsError{Problems: []string{"network: " + fmt.Sprintf(format, args...)}}
	}
	if n.Name != name {
		return refuse("%q is not the name of an engine network (a network is joined by its exact name, never by an ID or a prefix of one)", name)
	}
	if slices.Contains(predefinedNetworks, n.Name) || n.Driver == "host" || n.Driver == "null" {
		return refuse("%q is one of the engine's predefined networks: never allowed", name)
	}
	for k := range n.Labels {
		if strings.HasPrefix(k, sandbox.ReservedLabelPrefix) {
			return refuse("%q is one of sandboxd's own networks (label %s): never allowed", name, k)
		}
	}
	return nil
}

// makeBridge makes a private network, name, in mode NetworkBridge or
// NetworkInternal (allowHosts narrowing a bridge's egress), with its host
// firewall rules keyed by key (a session's id, or sidecarEgressKey), and,
// when allowHosts names hosts, its egress proxy (with ic, nil for none),
// whose address it returns. A session's network and a sidecar's egress
// network are made the same way.
func (r *Runtime) makeBridge(ctx context.Context, key, name, mode string, allowHosts []string, ic egress.Interceptor, labels map[string]string) (netip.AddrPort, error) {
	if r.fw == nil && (!r.opts.InsecureBridge || len(allowHosts) > 0) {
		return netip.AddrPort{}, r.errNoFirewall(sandbox.SessionOptions{Network: mode, AllowHosts: allowHosts})
	}
	rules := netRules{sessionID: key, iface: bridgeName(key), internal: mode == sandbox.NetworkInternal}
	var plan egressPlan
	if len(allowHosts) > 0 {
		var err error
		if plan, err = planEgress(allowHosts); err != nil {
			return netip.AddrPort{}, err
		}
		rules.egress = plan.prefixes
		labels = maps.Clone(labels)
		labels[LabelEgress] = formatEgress(rules.egress)
		if len(plan.names) > 0 {
			labels[LabelEgressNames] = strings.Join(plan.names, ",")
		}
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	created, err := r.cli.NetworkCreate(cctx, name, network.CreateOptions{
		Driver:   "bridge",
		Internal: mode == sandbox.NetworkInternal,
		Labels:   labels,
		Options:  map[string]string{bridgeNameOption: rules.iface},
	})
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("creating network %s: %w", name, err)
	}
	if plan.policy.HasNames() {
		// The proxy listens before the rules send anything to it.
		plan.policy.Interceptor = ic
		if rules.proxy, err = r.startProxy(ctx, key, created.ID, plan.policy); err != nil {
			return netip.AddrPort{}, err
		}
	}
	if r.fw != nil {
		if err := r.fw.install(ctx, rules); err != nil {
			return netip.AddrPort{}, err
		}
		if err := r.fw.keepOnTop(ctx); err != nil {
			return netip.AddrPort{}, err
		}
	}
	return rules.proxy, nil
}

// errdefsMessage is an engine error's message without the client's
// "Error response from daemon: " prefix.
func errdefsMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "Error response from daemon: ")
}

// makeDisks makes the backing filesystems of the quota-bound volumes
// (names), of size bytes each with their roots owned by uid:gid, at once,
// and returns their loop devices by volume. On error the caller's rollback
// (Remove) releases what was made: the files are named after the session.
func (r *Runtime) makeDisks(ctx context.Context, size int64, uid, gid int, names []string) (map[string]string, error) {
	if r.quota.err != nil {
		return nil, fmt.Errorf("limits.disk_quota: this daemon cannot make disk quotas: %w", r.quota.err)
	}
	start := time.Now()
	devs := make(map[string]string, len(names))
	errs := make([]error, len(names))
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for i, name := range names {
		wg.Go(func() {
			dev, err := makeDisk(ctx, diskFile(r.quota.dir, name), size, uid, gid)
			if err != nil {
				errs[i] = fmt.Errorf("%s volume: %w", name, err)
				return
			}
			mu.Lock()
			devs[name] = dev
			mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	r.log.Debug("disk quotas made", "volumes", devs, "bytes", size, "took", time.Since(start).Round(time.Millisecond))
	return devs, nil
}
