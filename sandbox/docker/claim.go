package docker

import (
	"context"
	"slices"
)

// Claim renames a pooled sandbox's container from sandboxd-pool-<id> to
// sandboxd-<id>. Labels cannot change after create; the name can, and it is
// what tells a restarted daemon "handed out, adopt it" from "still pooled".
func (r *Runtime) Claim(ctx context.Context, sessionID string) error {
	c, err := r.findContainer(ctx, sessionID)
	if err != nil {
		return err
	}
	want := containerName(sessionID, false)
	if slices.Contains(c.Names, "/"+want) {
		return nil
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	return wrap(r.cli.ContainerRename(cctx, c.ID, want), "session %s: renaming claimed container", sessionID)
}
