package docker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Start creates the session's network (if it asks for a private one), its
// workspace and home volumes (each on a filesystem of its own with a disk
// quota, see quota.go; handing their roots to the session user when the
// image does not, see layout.go and chown.go) and its container,
// attaches to the container's stdio and only then starts it, so that not a
// byte of the agent's output is missed. On any failure everything of the
// session is removed again.
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

	if r.opts.CopyAgent {
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
	l := planLayout(spec.Options, img)

	netName, pins, err := r.createNetwork(ctx, id, spec.Options, resLabels)
	if err != nil {
		return nil, err
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	vols := map[string]string{workspaceVolume(id): "workspace"}
	if l.home != "" {
		vols[homeVolume(id)] = "home"
	}
	var devs map[string]string
	if spec.Options.Limits.DiskQuota > 0 {
		if devs, err = r.makeDisks(ctx, spec.Options, slices.Collect(maps.Keys(vols))); err != nil {
			return nil, err
		}
	}
	for name, what := range vols {
		labels, opts := resLabels, volumeOptions(spec.Options)
		if dev, ok := devs[name]; ok {
			labels = maps.Clone(resLabels)
			labels[LabelDiskFile] = diskFile(r.quota.dir, name)
			opts = diskDriverOptions(dev)
		}
		if _, err := r.cli.VolumeCreate(cctx, volume.CreateOptions{
			Name: name, Labels: labels, Driver: "local", DriverOpts: opts,
		}); err != nil {
			return nil, fmt.Errorf("creating %s volume: %w", what, err)
		}
	}
	if len(l.fix) > 0 {
		if err := r.fixOwnership(ctx, id, l, img, spec.Options, resLabels); err != nil {
			return nil, err
		}
	}

	skills, err := r.skillMounts(ctx, spec.Options.Image, spec.Skills)
	if err != nil {
		return nil, err
	}
	cs, err := r.buildContainer(spec, netName, l, skills...)
	if err != nil {
		return nil, err
	}
	cs.host.ExtraHosts = pins
	// The create is not cancelled with ctx: an engine finishes a create
	// whose caller gave up, and the rollback would then miss the container
	// (which re-creates its volumes, unlabelled, once they are removed).
	nctx, ncancel := r.call(context.WithoutCancel(ctx))
	defer ncancel()
	created, err := r.cli.ContainerCreate(nctx, cs.config, cs.host, cs.network, nil, cs.name)
	switch {
	case cerrdefs.IsNotFound(err):
		return nil, errImageMissing(spec.Options.Image, err)
	case cerrdefs.IsConflict(err):
		return nil, fmt.Errorf("a container named %s exists already: %w", cs.name, err)
	case cerrdefs.IsInvalidArgument(err):
		// The container is made from the options: a setting the engine
		// refuses (more CPUs than it has) is the client's to change.
		return nil, &sandbox.OptionsError{Problems: []string{"the engine refused the container: " + errdefsMessage(err)}}
	case err != nil:
		return nil, fmt.Errorf("creating container: %w", err)
	}
	for _, w := range created.Warnings {
		log.Warn("engine warning on create", "warning", w)
	}
	if err := r.checkCwd(cctx, created.ID, spec.Options, l); err != nil {
		return nil, err
	}

	hj, err := r.cli.ContainerAttach(cctx, created.ID, container.AttachOptions{
		Stream: true, Stdin: true, Stdout: true, Stderr: true,
	})
	if err != nil {
		return nil, fmt.Errorf("attaching to the container: %w", err)
	}
	if err := r.cli.ContainerStart(cctx, created.ID, container.StartOptions{}); err != nil {
		hj.Close()
		return nil, fmt.Errorf("starting the container: %w", err)
	}
	log.Debug("sandbox started", "container", created.ID[:12], "name", cs.name, "network", netName)
	return newStream(hj, r.agentLog(id).With("stream", "attach")), nil
}

// createNetwork makes the session's private network for the bridge and
// internal modes, with its host firewall rules (firewall.go), and returns
// the network mode for the container and, for allow_hosts, the
// "name:address" pins of its /etc/hosts.
func (r *Runtime) createNetwork(ctx context.Context, id string, o sandbox.SessionOptions, labels map[string]string) (string, []string, error) {
	mode := o.Network
	switch mode {
	case sandbox.NetworkNone:
		return "none", nil, nil
	case sandbox.NetworkBridge, sandbox.NetworkInternal:
	default: // an existing network, not ours
		cctx, cancel := r.call(ctx)
		defer cancel()
		if _, err := r.cli.NetworkInspect(cctx, mode, network.InspectOptions{}); err != nil {
			if cerrdefs.IsNotFound(err) {
				return "", nil, &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
					"network: the engine has no network %q; use %q, %q, %q or the name of an existing network",
					mode, sandbox.NetworkNone, sandbox.NetworkBridge, sandbox.NetworkInternal)}}
			}
			return "", nil, fmt.Errorf("inspecting network %s: %w", mode, err)
		}
		return mode, nil, nil
	}
	if r.fw == nil && (!r.opts.InsecureBridge || len(o.AllowHosts) > 0) {
		return "", nil, r.errNoFirewall(o)
	}
	rules := netRules{sessionID: id, iface: bridgeName(id), internal: mode == sandbox.NetworkInternal}
	var pins []string
	if len(o.AllowHosts) > 0 {
		var err error
		if rules.egress, pins, err = r.resolveEgress(ctx, o.AllowHosts); err != nil {
			return "", nil, err
		}
		labels = maps.Clone(labels)
		labels[LabelEgress] = formatEgress(rules.egress)
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	name := networkName(id)
	_, err := r.cli.NetworkCreate(cctx, name, network.CreateOptions{
		Driver:   "bridge",
		Internal: mode == sandbox.NetworkInternal,
		Labels:   labels,
		Options:  map[string]string{bridgeNameOption: rules.iface},
	})
	if err != nil {
		return "", nil, fmt.Errorf("creating network %s: %w", name, err)
	}
	if r.fw != nil {
		if err := r.fw.install(ctx, rules); err != nil {
			return "", nil, err
		}
	}
	return name, pins, nil
}

// errdefsMessage is an engine error's message without the client's
// "Error response from daemon: " prefix.
func errdefsMessage(err error) string {
	return strings.TrimPrefix(err.Error(), "Error response from daemon: ")
}

// makeDisks makes the backing filesystems of the quota-bound volumes
// (names), at once, and returns their loop devices by volume. On error the
// caller's rollback (Remove) releases what was made: the files are named
// after the session.
func (r *Runtime) makeDisks(ctx context.Context, o sandbox.SessionOptions, names []string) (map[string]string, error) {
	if r.quota.err != nil {
		return nil, fmt.Errorf("limits.disk_quota: this daemon cannot make disk quotas: %w", r.quota.err)
	}
	uid, gid, err := sandbox.ParseUser(o.User)
	if err != nil {
		return nil, fmt.Errorf("user: %w", err)
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
			dev, err := makeDisk(ctx, diskFile(r.quota.dir, name), o.Limits.DiskQuota, uid, gid)
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
	r.log.Debug("disk quotas made", "volumes", devs, "bytes", o.Limits.DiskQuota, "took", time.Since(start).Round(time.Millisecond))
	return devs, nil
}
