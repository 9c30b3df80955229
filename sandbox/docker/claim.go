package docker

import (
	"context"
	"slices"
)

// Claim renames a pooled sandbox's container from sandboxd-pool-<id> to
// sandboxd-<id>. Labels cannot change after create; the name can, and it is
// what tells a restarted daemon "handed out, adopt it" from "still pooled".
//
// The rename names the container by its pooled name: one engine call, no
// listing (the claim runs while the client's first calls do, and a
// container list is the engine's costliest read on a busy host). Only when
// no container has that name (claimed already, or gone) does it look the
// session up, to tell the two apart.
func (r *Runtime) Claim(ctx context.Context, sessionID string) error {
	want := containerName(sessionID, false)
	cctx, cancel := r.call(ctx)
	err := r.cli.ContainerRename(cctx, containerName(sessionID, true), want)
	cancel()
	if !isNotFound(err) {
		return wrap(err, "session %s: renaming claimed container", sessionID)
	}
	c, err := r.findContainer(ctx, sessionID)
	if err != nil {
		return err
	}
	if slices.Contains(c.Names, "/"+want) {
		return nil
	}
	cctx, cancel = r.call(ctx)
	defer cancel()
	return wrap(r.cli.ContainerRename(cctx, c.ID, want), "session %s: renaming claimed container", sessionID)
}
