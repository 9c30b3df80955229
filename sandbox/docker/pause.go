package docker

import "context"

// Pause freezes a session's sandbox with the engine's pause (the cgroup
// freezer): every process of the container stops where it is and keeps its
// memory. Its MCP sidecars are not paused. Pausing a paused sandbox is no
// error.
func (r *Runtime) Pause(ctx context.Context, sessionID string) error {
	return r.setPaused(ctx, sessionID, true)
}

// Unpause thaws a sandbox Pause froze; thawing a running one is no error.
func (r *Runtime) Unpause(ctx context.Context, sessionID string) error {
	return r.setPaused(ctx, sessionID, false)
}

func (r *Runtime) setPaused(ctx context.Context, sessionID string, pause bool) error {
	c, err := r.findContainer(ctx, sessionID)
	if err != nil {
		return err
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	info, err := r.cli.ContainerInspect(cctx, c.ID)
	if err != nil {
		return wrap(err, "session %s: inspecting container", sessionID)
	}
	if info.State != nil && info.State.Paused == pause {
		return nil
	}
	if pause {
		return wrap(r.cli.ContainerPause(cctx, c.ID), "session %s: pausing container", sessionID)
	}
	return wrap(r.cli.ContainerUnpause(cctx, c.ID), "session %s: resuming container", sessionID)
}
