package docker

import (
	"context"
	"errors"
	"fmt"
	"time"

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

// closePruneTimeout bounds the prune at Close: a few engine calls, and a
// shutdown must not wait on a stuck engine for long.
const closePruneTimeout = 10 * time.Second

// pruneAtClose is Prune when the runtime closes, at the daemon's shutdown:
// a clean shutdown leaves nothing of sandboxd on the engine, and the agent
// volume of writable roots (and copy mode's agent and skill volumes) would
// otherwise outlive it. What a session kept for adoption (--keep-sessions)
// still mounts stays, in use, for the next start, which reuses it. Best
// effort: a failure is logged, and the next start's pruneStaleAgentVolumes
// or Prune removes what is left.
func (r *Runtime) pruneAtClose() {
	if r.cli == nil {
		return
	}
	if r.agent != nil {
		r.agent.markClosed() // a session still being removed prunes again when it is gone
	}
	ctx, cancel := context.WithTimeout(context.Background(), min(closePruneTimeout, r.opts.CallTimeout))
	defer cancel()
	if err := r.Prune(ctx); err != nil {
		r.log.Warn("removing the shared volumes no session uses, at close", "err", err)
	}
}
