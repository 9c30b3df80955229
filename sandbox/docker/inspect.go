package docker

import (
	"context"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/tools/bash"
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
		Paused:     st.Paused,
		ExitCode:   st.ExitCode,
		OOMKilled:  st.OOMKilled,
		Error:      st.Error,
		StartedAt:  started,
		FinishedAt: finished,
	}, nil
}

// imageCommand is what the image runs: its ENTRYPOINT followed by its
// CMD, as Docker runs them.
func imageCommand(entrypoint, cmd []string) []string {
	return append(slices.Clone(entrypoint), cmd...)
}

// imageEnv is what the session's agent is told of the image, in its
// environment, for the options that need it (decision 0042): the image's
// USER and HOME for shell_init: image (the terminal reads that user's rc
// file; the container's own USER and HOME are the session's), and its
// ENTRYPOINT + CMD and WORKDIR for entrypoint: image (the container's
// entrypoint is the agent). Every name starts with SANDBOXD_IMAGE_ (no
// session sets one: sandbox.Validate), and none reaches the session's
// programs.
func imageEnv(o sandbox.SessionOptions, img imageFacts) []string {
	var env []string
	if o.ShellInit == sandbox.ShellInitImage {
		env = append(env, bash.EnvImageUser+"="+img.user)
		if img.home != "" {
			env = append(env, bash.EnvImageHome+"="+img.home)
		}
	}
	if o.Entrypoint == sandbox.EntrypointImage {
		env = append(env, proto.EnvEntrypoint+"="+proto.Entrypoint{Argv: img.command, Dir: img.workdir}.Encode())
	}
	return env
}
