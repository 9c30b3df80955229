package docker

import (
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	dockerspec "github.com/moby/docker-image-spec/specs-go/v1"
	"github.com/stretchr/testify/assert"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestSnapshotEntryName(t *testing.T) {
	for _, tc := range []struct {
		parent, base, name, want string
		ok                       bool
	}{
		{"", "workspace", "workspace/", "workspace/", true},
		{"", "workspace", "workspace/a/b.txt", "workspace/a/b.txt", true},
		{"home", "agent", "agent/.local/bin/x", "home/agent/.local/bin/x", true},
		{"home", "agent", "agent", "home/agent", true},
		{"", "workspace", "etc/passwd", "", false},
		{"", "workspace", "workspace/../etc/passwd", "", false},
		{"", "workspace", "workspace/.wh.x", "", false},
		{"", "workspace", "workspace/d/.wh..wh..opq", "", false},
	} {
		got, ok := snapshotEntryName(tc.parent, tc.base, tc.name)
		assert.Equal(t, tc.ok, ok, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
	}
}

func TestSnapshotTargets(t *testing.T) {
	info := container.InspectResponse{
		Config: &container.Config{Env: []string{"HOME=/home/agent", "PATH=/bin"}},
		Mounts: []container.MountPoint{
			{Type: mount.TypeVolume, Destination: "/workspace"},
			{Type: mount.TypeBind, Destination: "/home/agent"},
			{Type: mount.TypeBind, Destination: "/home/agent/proj"},
			{Type: mount.TypeBind, Destination: "/.sandboxd"},
			{Type: mount.TypeBind, Destination: "/skills/x"},
			{Type: mount.TypeTmpfs, Destination: "/tmp"},
			{Type: mount.TypeVolume, Destination: "/testbed"},
		},
	}
	o := sandbox.SessionOptions{EditablePaths: []string{"/testbed", "/home/agent/proj", "/opt/missing"}}
	assert.Equal(t, []string{"/testbed", "/workspace", "/home/agent"}, snapshotTargets(info, o),
		"the session's own mounts, outermost first, a nested one carried by its parent")
}

func TestSnapshotConfig(t *testing.T) {
	base := image.InspectResponse{Config: &dockerspec.DockerOCIImageConfig{}}
	base.Config.User = "root"
	base.Config.Env = []string{"PATH=/usr/bin"}
	base.Config.Entrypoint = []string{"/entry"}
	base.Config.Labels = map[string]string{LabelImageKind: "task", "x": "y"}
	cfg := snapshotConfig(base, map[string]string{sandbox.LabelSnapshot: "id", sandbox.LabelSession: "s", sandbox.LabelPool: "p", sandbox.LabelManaged: "true"})
	assert.Equal(t, "root", cfg.User, "the image's user, not the sandbox's")
	assert.Equal(t, []string{"/entry"}, []string(cfg.Entrypoint))
	assert.Equal(t, map[string]string{LabelImageKind: "task", "x": "y", sandbox.LabelSnapshot: "id", sandbox.LabelManaged: "true"}, cfg.Labels,
		"the image's labels and the snapshot's; none that only a session's container carries")
}
