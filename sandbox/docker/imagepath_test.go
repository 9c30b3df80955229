package docker

import (
	"context"
	"io/fs"
	"testing"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// fakeImage answers ContainerStatPath from a map of paths (Lstat of the
// last component); a path not in it is missing. It records what was asked.
type fakeImage struct {
	files map[string]container.PathStat
	asked []string
}

func (f *fakeImage) ContainerStatPath(_ context.Context, _ string, p string) (container.PathStat, error) {
	f.asked = append(f.asked, p)
	st, ok := f.files[p]
	if !ok {
		return container.PathStat{}, cerrdefs.ErrNotFound
	}
	return st, nil
}

func TestCheckEditablePaths(t *testing.T) {
	dir := container.PathStat{Mode: fs.ModeDir | 0o755}
	img := map[string]container.PathStat{
		"/opt": dir, "/opt/real": dir, "/opt/real/sub": dir,
		"/opt/rootl": {Mode: fs.ModeSymlink | 0o777, LinkTarget: "/"},
		"/opt/etcl":  {Mode: fs.ModeSymlink | 0o777, LinkTarget: "/etc"},
		"/opt/file":  {Mode: 0o644},
	}
	for _, tc := range []struct {
		name  string
		paths []string
		want  string // "" accepted
		asked []string
	}{
		{"real folders", []string{"/opt/real/sub"}, "", []string{"/opt", "/opt/real", "/opt/real/sub"}},
		{"prefixes stated once", []string{"/opt/real", "/opt/new"}, "", []string{"/opt", "/opt/real", "/opt/new"}},
		{"missing: the engine makes it", []string{"/srv/a/b"}, "", []string{"/srv"}},
		{"a parent links to /", []string{"/opt/rootl/usr/local"},
			`editable_paths: /opt/rootl is a symbolic link in the image (to "/"), so /opt/rootl/usr/local is not where it says`, nil},
		{"a parent links to /etc", []string{"/opt/real", "/opt/etcl/ssl"}, `/opt/etcl is a symbolic link in the image (to "/etc")`, nil},
		{"the path is a link", []string{"/opt/etcl"}, `editable_paths: /opt/etcl is a symbolic link in the image (to "/etc"): name the folder it points to`, nil},
		{"a file", []string{"/opt/file/x"}, "editable_paths: /opt/file is not a folder in the image", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeImage{files: img}
			err := checkEditablePaths(context.Background(), f, "ctr", tc.paths)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, tc.asked, f.asked)
				return
			}
			require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
