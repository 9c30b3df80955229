package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
)

// Remove deletes a session's container (killing its processes), then its
// volumes and networks, all found by the session label, its folder of the
// direct path (direct.go), then the backing
// files of its quota-bound volumes (detaching their loop devices): those
// named by the removed volumes' LabelDiskFile, and those named after the
// session in the disk directory (a start cut off before the volume). A
// file whose volume could not be removed is kept for the next try. What is gone
// already is no error, so Remove is idempotent and safe to repeat after a
// partial failure.
func (r *Runtime) Remove(ctx context.Context, sessionID string) error {
	if sessionID == "" {
		return errors.New("remove: empty session id")
	}
	r.agentLogs.Delete(sessionID)
	f := r.filter(sessionID)
	var errs []error
	cctx, cancel := r.call(ctx)
	defer cancel()

	ctrs, err := r.cli.ContainerList(cctx, container.ListOptions{All: true, Filters: f})
	if err != nil {
		return fmt.Errorf("session %s: listing containers: %w", sessionID, err)
	}
	for _, c := range ctrs {
		if err := r.removeContainer(cctx, c.ID); err != nil {
			errs = append(errs, fmt.Errorf("removing container %s: %w", c.ID[:12], err))
		}
	}
	if len(errs) == 0 { // no container mounts the folder any more
		if err := r.removeDirect(sessionID); err != nil {
			errs = append(errs, err)
		}
	}
	vols, err := r.cli.VolumeList(cctx, volume.ListOptions{Filters: f})
	var disks, keep []string // backing files of removed volumes, of volumes still there
	if err != nil {
		errs = append(errs, fmt.Errorf("listing volumes: %w", err))
	} else {
		for _, v := range vols.Volumes {
			file := v.Labels[LabelDiskFile]
			if err := r.cli.VolumeRemove(cctx, v.Name, true); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("removing volume %s: %w", v.Name, err))
				keep = append(keep, file)
				continue
			}
			if file != "" {
				disks = append(disks, file)
			}
		}
	}
	if err == nil {
		for _, p := range r.sessionDisks(sessionID, disks) {
			if slices.Contains(keep, p) {
				continue
			}
			if err := releaseDisk(p); err != nil {
				errs = append(errs, fmt.Errorf("releasing disk %s: %w", p, err))
			}
		}
	}
	nets, err := r.cli.NetworkList(cctx, network.ListOptions{Filters: f})
	if err != nil {
		errs = append(errs, fmt.Errorf("listing networks: %w", err))
	} else {
		// The rules go first: a network left without them (the daemon
		// stopped in between) is removed at the next start, while rules
		// left without a network would wait for that start's sync.
		if len(nets) > 0 && r.fw != nil {
			if err := r.fw.remove(cctx, sessionID); err != nil {
				errs = append(errs, fmt.Errorf("removing firewall rules: %w", err))
			}
		}
		if r.egress != nil {
			r.egress.StopSession(sessionID) // its egress proxies, its sidecars' too
		}
		for _, n := range nets {
			if err := r.cli.NetworkRemove(cctx, n.ID); err != nil && !isNotFound(err) {
				errs = append(errs, fmt.Errorf("removing network %s: %w", n.Name, err))
			}
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("session %s: %w", sessionID, errors.Join(errs...))
	}
	r.log.Debug("sandbox removed", "session", sessionID, "containers", len(ctrs))
	r.pruneAfterClose(cctx)
	return nil
}

// pruneAfterClose removes the shared volumes no session uses (Prune) when
// the runtime has closed already: a shutdown whose time ran out returns
// while sessions are still being removed, and its Close then found the
// agent volume of writable roots still mounted and kept it (issue 24).
// The last session removed after Close removes it instead; a kept
// session's container (--keep-sessions) still mounts it, so it stays.
// Best effort: a failure is logged.
func (r *Runtime) pruneAfterClose(ctx context.Context) {
	if r.agent == nil || !r.agent.isClosed() {
		return
	}
	if err := r.Prune(ctx); err != nil {
		r.log.Warn("removing the shared volumes no session uses, after a removal that outlasted the close", "err", err)
	}
}

// removeAttempts bounds how often removeContainer asks the engine again
// after an answer that a later try can outlive.
const removeAttempts = 5

// removeContainer force-removes container id with its anonymous volumes.
// Docker 20.10 answers "Could not kill running container ..., cannot
// remove - Container ... is not running" when the container exits on its
// own while the removal kills it (its processes were ending: the session's
// shell exited, the OOM killer struck); the next try succeeds, so such an
// answer is tried again a few times, a moment apart. "Removal already in
// progress" (a `docker rm -f` from outside) is waited out instead: the
// volumes are in use until it is done.
func (r *Runtime) removeContainer(ctx context.Context, id string) error {
	var err error
	for attempt := range removeAttempts {
		err = r.cli.ContainerRemove(ctx, id, container.RemoveOptions{Force: true, RemoveVolumes: true})
		switch {
		case err == nil, isNotFound(err):
			return nil
		case cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "already in progress"):
			if werr := r.waitRemoved(ctx, id); werr != nil {
				return fmt.Errorf("%w (after: %v)", werr, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * r.backoff()):
		}
	}
	return err
}

// backoff is the first pause between removal attempts; each later one is
// longer by as much.
func (r *Runtime) backoff() time.Duration {
	if r.removeBackoff > 0 {
		return r.removeBackoff
	}
	return 100 * time.Millisecond
}

// waitRemoved polls until the engine no longer knows container id.
func (r *Runtime) waitRemoved(ctx context.Context, id string) error {
	for {
		_, err := r.cli.ContainerInspect(ctx, id)
		switch {
		case isNotFound(err):
			return nil
		case err != nil && ctx.Err() == nil:
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for its removal: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
