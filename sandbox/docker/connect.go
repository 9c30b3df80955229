package docker

import (
	"context"
	"fmt"
	"io"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Connect reaches the agent of a running sandbox through its unix socket:
// `docker exec -i <ctr>` of sandbox.ProxyCommand (`/.sandboxd/sandboxd
// agent-proxy --socket ...`), as the container's user. Used after a daemon restart (the first daemon's
// attach stream died with it) and when a stream breaks.
func (r *Runtime) Connect(ctx context.Context, sessionID string) (io.ReadWriteCloser, error) {
	c, err := r.findContainer(ctx, sessionID)
	if err != nil {
		return nil, err
	}
	if c.State != container.StateRunning {
		return nil, fmt.Errorf("session %s: container %s is %s, not running", sessionID, c.Names, c.State)
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	ex, err := r.cli.ContainerExecCreate(cctx, c.ID, container.ExecOptions{
		Cmd:          sandbox.ProxyCommand(),
		AttachStdin:  true,
		AttachStdout: true,
		AttachStderr: true,
	})
	if err != nil {
		return nil, wrap(err, "session %s: creating agent-proxy exec", sessionID)
	}
	hj, err := r.cli.ContainerExecAttach(cctx, ex.ID, container.ExecAttachOptions{})
	if err != nil {
		return nil, wrap(err, "session %s: starting agent-proxy exec", sessionID)
	}
	return newStream(hj, r.agentLog(sessionID).With("stream", "agent-proxy")), nil
}
