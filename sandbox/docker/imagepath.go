package docker

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	"github.com/docker/docker/api/types/container"

	"github.com/sandboxd/sandboxd/sandbox"
)

// statPather is the engine call checkEditablePaths makes.
type statPather interface {
	ContainerStatPath(ctx context.Context, ctr, path string) (container.PathStat, error)
}

// checkEditablePaths refuses an editable path that runs through a symbolic
// link in the image, at any component, or through something that is not a
// folder. The options' checks are lexical (validate.go), and the engine
// follows a link in a mount's target inside the container: /opt/rootl/usr/local
// with /opt/rootl -> / put a writable volume on /usr/local, and the same
// way on /run/sandboxd/direct, /sys/fs/cgroup or /skills. ctr is the
// session's container, created and not started; each prefix is stated
// once (ContainerStatPath resolves the parents and reads the last
// component without following it). A prefix the image lacks ends the
// walk: the engine makes the rest as folders.
func checkEditablePaths(ctx context.Context, cli statPather, ctr string, paths []string) error {
	checked := map[string]bool{}
	for _, p := range paths {
		prefix := ""
		for _, name := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
			prefix += "/" + name
			if checked[prefix] {
				continue
			}
			st, err := cli.ContainerStatPath(ctx, ctr, prefix)
			if isNotFound(err) {
				break
			}
			if err != nil {
				return fmt.Errorf("checking editable path %s in the image: %s: %w", p, prefix, err)
			}
			switch {
			case st.Mode&fs.ModeSymlink != 0 && prefix == p:
				return editableProblem("%s is a symbolic link in the image (to %q): name the folder it points to", prefix, st.LinkTarget)
			case st.Mode&fs.ModeSymlink != 0:
				return editableProblem("%s is a symbolic link in the image (to %q), so %s is not where it says: name the path without links", prefix, st.LinkTarget, p)
			case !st.Mode.IsDir():
				return editableProblem("%s is not a folder in the image (%v)", prefix, st.Mode)
			}
			checked[prefix] = true
		}
	}
	return nil
}

func editableProblem(format string, args ...any) error {
	return &sandbox.OptionsError{Problems: []string{"editable_paths: " + fmt.Sprintf(format, args...)}}
}
