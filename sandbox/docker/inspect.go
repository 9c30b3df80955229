package docker

import (
	"context"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Inspect reports the state of a session's container.
func (r *Runtime) Inspect(ctx context.Context, sessionID string) (sandbox.Status, error) {
	c, err := r.findContainer(ctx, sessionID)
	if err != nil {
		return sandbox.Status{}, err
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	info, err := r.cli.ContainerInspect(cctx, c.ID)
	if err != nil {
		return sandbox.Status{}, wrap(err, "session %s: inspecting container", sessionID)
	}
	st := info.State
	if st == nil {
		return sandbox.Status{}, nil
	}
	started, _ := time.Parse(time.RFC3339Nano, st.StartedAt)
	finished, _ := time.Parse(time.RFC3339Nano, st.FinishedAt)
	return sandbox.Status{
		Running:    st.Running && !st.Paused && !st.Restarting,
		ExitCode:   st.ExitCode,
		OOMKilled:  st.OOMKilled,
		Error:      st.Error,
		StartedAt:  started,
		FinishedAt: finished,
	}, nil
}
