package docker

import (
	"context"
	"fmt"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxd/sandboxd/sandbox"
)

// List returns every container, volume and network under this runtime's
// labels, sessions' and shared ones alike, and the backing files of
// quota-bound volumes in its disk directory (sandbox.KindDisk), and the
// sessions' folders of the direct path (sandbox.KindDirect).
func (r *Runtime) List(ctx context.Context) ([]sandbox.Resource, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	f := r.filter("")
	ctrs, err := r.cli.ContainerList(cctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return nil, fmt.Errorf("listing containers: %w", err)
	}
	vols, err := r.cli.VolumeList(cctx, volume.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("listing volumes: %w", err)
	}
	nets, err := r.cli.NetworkList(cctx, network.ListOptions{Filters: f})
	if err != nil {
		return nil, fmt.Errorf("listing networks: %w", err)
	}
	out := make([]sandbox.Resource, 0, len(ctrs)+len(vols.Volumes)+len(nets))
	for _, c := range ctrs {
		name := ""
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, sandbox.Resource{
			Kind: sandbox.KindContainer, ID: c.ID, Name: name,
			SessionID: c.Labels[sandbox.LabelSession], Labels: c.Labels,
			Running:  c.State == container.StateRunning,
			Paused:   c.State == container.StatePaused,
			Pooled:   strings.HasPrefix(name, "sandboxd-pool-"),
			Outdated: outdated(c.Labels),
		})
	}
	for _, v := range vols.Volumes {
		out = append(out, sandbox.Resource{
			Kind: sandbox.KindVolume, ID: v.Name, Name: v.Name,
			SessionID: v.Labels[sandbox.LabelSession], Labels: v.Labels,
		})
	}
	for _, n := range nets {
		out = append(out, sandbox.Resource{
			Kind: sandbox.KindNetwork, ID: n.ID, Name: n.Name,
			SessionID: n.Labels[sandbox.LabelSession], Labels: n.Labels,
		})
	}
	disks, err := r.listDisks()
	if err != nil {
		return nil, err
	}
	out = append(out, disks...)
	dirs, err := r.listDirect()
	if err != nil {
		return nil, err
	}
	return append(out, dirs...), nil
}

// outdated says how a container's labels differ from what this runtime
// would create now; "" if they do not.
func outdated(labels map[string]string) string {
	if got, want := labels[LabelSeccomp], seccompProfileID(); got != want {
		if got == "" {
			return "no " + LabelSeccomp + " label: created before sandboxd applied its own seccomp profile (io_uring allowed)"
		}
		return fmt.Sprintf("seccomp profile %s, not this daemon's %s", got, want)
	}
	return ""
}

// findContainer returns the container of a session, pooled or claimed.
func (r *Runtime) findContainer(ctx context.Context, sessionID string) (container.Summary, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	ctrs, err := r.cli.ContainerList(cctx, container.ListOptions{All: true, Filters: r.filter(sessionID)})
	if err != nil {
		return container.Summary{}, fmt.Errorf("session %s: listing its container: %w", sessionID, err)
	}
	for _, c := range ctrs {
		if c.Labels[sandbox.LabelSidecar] == "" { // not one of its MCP sidecars
			return c, nil
		}
	}
	return container.Summary{}, fmt.Errorf("session %s: no container: %w", sessionID, sandbox.ErrNotFound)
}
