package docker

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox"
)

// checkCwd refuses a session whose Cwd does not exist in its created (not
// yet started) container. The container's WorkingDir is the workspace, not
// Cwd: the engine would make a missing WorkingDir, owned by root, so a
// typo would silently give the session a folder it cannot write to. A Cwd
// inside the workspace needs no check (the agent, as the session user,
// creates it); nor do the mount points the runtime makes (/tmp, RunDir,
// the home volume). Everything else is looked up with ContainerStatPath,
// which sees the image's files and the session's volumes.
func (r *Runtime) checkCwd(ctx context.Context, ctr string, o sandbox.SessionOptions, l layout) error {
	cwd := o.Cwd
	if cwd == "" || cwd == sandbox.WorkspaceDir || strings.HasPrefix(cwd, sandbox.WorkspaceDir+"/") ||
		cwd == "/tmp" || cwd == sandbox.RunDir || (l.home != "" && cwd == l.home) {
		return nil
	}
	missing := &sandbox.OptionsError{Problems: []string{fmt.Sprintf(
		"cwd: %q does not exist in image %s (only a cwd under %s is created; elsewhere it must exist)",
		cwd, o.Image, sandbox.WorkspaceDir)}}
	st, err := r.cli.ContainerStatPath(ctx, ctr, cwd)
	if err == nil && st.Mode&os.ModeSymlink != 0 && st.LinkTarget != "" {
		// The engine gives the link's target fully evaluated, as a path
		// in the container.
		st, err = r.cli.ContainerStatPath(ctx, ctr, st.LinkTarget)
	}
	switch {
	case isNotFound(err):
		return missing
	case err != nil:
		return fmt.Errorf("looking up cwd %s: %w", cwd, err)
	case !st.Mode.IsDir():
		return &sandbox.OptionsError{Problems: []string{fmt.Sprintf("cwd: %q is not a directory in image %s", cwd, o.Image)}}
	}
	return nil
}
