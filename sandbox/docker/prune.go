package docker

import (
	"context"
	"errors"
	"fmt"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/volume"
)

// Prune removes the runtime's shared resources that no sandbox uses: agent
// volumes (copy mode) and leftover copy helpers of a crashed run. A volume
// still mounted by a sandbox is kept. Session resources are the Manager's
// business (its reclaim), not Prune's.
func (r *Runtime) Prune(ctx context.Context) error {
	cctx, cancel := r.call(ctx)
	defer cancel()
	f := r.filter("")
	f.Add("label", LabelAgent)
	var errs []error
	ctrs, err := r.cli.ContainerList(cctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return fmt.Errorf("prune: listing helpers: %w", err)
	}
	for _, c := range ctrs {
		if err := r.cli.ContainerRemove(cctx, c.ID, container.RemoveOptions{Force: true}); err != nil && !isNotFound(err) {
			errs = append(errs, err)
		}
	}
	vols, err := r.cli.VolumeList(cctx, volume.ListOptions{Filters: f})
	if err != nil {
		return fmt.Errorf("prune: listing agent volumes: %w", err)
	}
	for _, v := range vols.Volumes {
		err := r.cli.VolumeRemove(cctx, v.Name, false)
		switch {
		case err == nil:
			r.skillVols.mu.Lock()
			delete(r.skillVols.filled, v.Name)
			r.skillVols.mu.Unlock()
			if v.Name == r.agent.volume() {
				r.agent.mu.Lock()
				r.agent.copied = false
				r.agent.mu.Unlock()
			}
		case cerrdefs.IsConflict(err), isNotFound(err): // in use, or gone
		default:
			errs = append(errs, fmt.Errorf("removing %s: %w", v.Name, err))
		}
	}
	return errors.Join(errs...)
}
