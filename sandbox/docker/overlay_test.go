package docker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/storage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestOverlayLayers(t *testing.T) {
	top, low := t.TempDir(), t.TempDir()
	tests := []struct {
		name string
		gd   storage.DriverData
		want []string
	}{
		{"overlay2", storage.DriverData{Name: "overlay2", Data: map[string]string{"UpperDir": top, "LowerDir": low}}, []string{top, low}},
		{"fuse-overlayfs, one layer", storage.DriverData{Name: "fuse-overlayfs", Data: map[string]string{"UpperDir": top}}, []string{top}},
		{"another driver", storage.DriverData{Name: "btrfs", Data: map[string]string{"UpperDir": top}}, nil},
		{"containerd's snapshotter: no folders", storage.DriverData{Name: "overlayfs"}, nil},
		{"relative layer", storage.DriverData{Name: "overlay2", Data: map[string]string{"UpperDir": top, "LowerDir": "x/diff"}}, nil},
		{"unclean layer", storage.DriverData{Name: "overlay2", Data: map[string]string{"UpperDir": top + "/../" + filepath.Base(top)}}, nil},
		{"missing layer", storage.DriverData{Name: "overlay2", Data: map[string]string{"UpperDir": top, "LowerDir": filepath.Join(low, "gone")}}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, overlayLayers(tc.gd)) })
	}
}

func TestEmptyInLayers(t *testing.T) {
	layer := func(t *testing.T, build func(root string)) string {
		root := t.TempDir()
		build(root)
		return root
	}
	none := layer(t, func(string) {})
	empty700 := layer(t, func(r string) { require.NoError(t, os.Mkdir(filepath.Join(r, "workspace"), 0o700)) })
	full := layer(t, func(r string) {
		require.NoError(t, os.MkdirAll(filepath.Join(r, "workspace", "src"), 0o755))
	})
	deleted := layer(t, func(r string) { require.NoError(t, os.WriteFile(filepath.Join(r, ".wh.workspace"), nil, 0o644)) })
	file := layer(t, func(r string) { require.NoError(t, os.WriteFile(filepath.Join(r, "workspace"), nil, 0o644)) })
	link := layer(t, func(r string) { require.NoError(t, os.Symlink("/etc", filepath.Join(r, "workspace"))) })
	tests := []struct {
		name   string
		layers []string
		mode   os.FileMode
		ok     bool
	}{
		{"in no layer", []string{none, none}, 0o755, true},
		{"empty, the top layer's mode", []string{empty700, none}, 0o700, true},
		{"content in a lower layer", []string{empty700, full}, 0, false},
		{"deleted AUFS-style in a layer", []string{none, deleted}, 0, false},
		{"a file", []string{file}, 0, false},
		{"a link", []string{link}, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mode, ok := emptyInLayers(tc.layers, "workspace")
			assert.Equal(t, tc.ok, ok)
			if tc.ok {
				assert.Equal(t, tc.mode, mode)
			}
		})
	}
}

func TestDiskSessionOverlay(t *testing.T) {
	for name, want := range map[string]string{
		"sandboxd-abc-edit0.overlay":      "abc",
		"sandboxd-abc-home.overlay":       "abc",
		"sandboxd-a-b-edit12.overlay":     "a-b",
		"sandboxd-abc-edit0.ext4":         "abc",
		"sandboxd-abc-edit0.overlay.ext4": "",
		"other-abc-edit0.overlay":         "",
		".probe-123":                      "",
	} {
		assert.Equal(t, want, diskSession(name), name)
	}
	dir := t.TempDir()
	r := &Runtime{quota: quota{dir: dir}}
	for _, n := range []string{"sandboxd-s1-edit0.ext4", "sandboxd-s1-edit1.ext4"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o600))
	}
	for _, n := range []string{"sandboxd-s1-edit0.overlay", "sandboxd-s1-home.overlay", "sandboxd-s2-edit0.overlay"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, n), 0o700))
	}
	files := r.sessionDisks("s1", nil)
	require.Len(t, files, 6, "%v", files) // workspace and home files by name, though missing
	assert.ElementsMatch(t, []string{filepath.Join(dir, "sandboxd-s1-edit0.overlay"), filepath.Join(dir, "sandboxd-s1-home.overlay")}, files[:2],
		"overlay folders first: unmounted before their quota filesystem's loop device goes")
	res, err := r.listDisks()
	require.NoError(t, err)
	got := map[string]string{}
	for _, x := range res {
		assert.Equal(t, sandbox.KindDisk, x.Kind)
		got[x.Name] = x.SessionID
	}
	assert.Equal(t, map[string]string{
		"sandboxd-s1-edit0.ext4": "s1", "sandboxd-s1-edit1.ext4": "s1",
		"sandboxd-s1-edit0.overlay": "s1", "sandboxd-s1-home.overlay": "s1", "sandboxd-s2-edit0.overlay": "s2",
	}, got, "overlay folders are the reclaim's too")
}

func TestPlanLayoutOverlay(t *testing.T) {
	layers := []string{"/var/lib/docker/overlay2/x/diff"}
	task := imageFacts{home: "/root", layers: layers, emptyWorkspace: true, workspaceMode: 0o755}
	type v struct {
		target   string
		seed     seeding
		rootOnly bool
	}
	tests := []struct {
		name string
		o    sandbox.SessionOptions
		img  imageFacts
		vols []v
	}{
		{"task image: HOME and editable paths by overlay, the empty workspace handed over",
			sandbox.SessionOptions{EditablePaths: []string{"/testbed", "/opt/venv"}}, task,
			[]v{{"/workspace", seedOwned, true}, {"/root", seedOverlay, false}, {"/testbed", seedOverlay, false}, {"/opt/venv", seedOverlay, false}}},
		{"quota: a workspace of another mode is copied",
			sandbox.SessionOptions{Limits: sandbox.Limits{DiskQuota: 1 << 30}}, imageFacts{home: "/root", layers: layers, emptyWorkspace: true, workspaceMode: 0o700},
			[]v{{"/workspace", seedOwned, false}, {"/root", seedOverlay, false}}},
		{"no quota: any mode handed over",
			sandbox.SessionOptions{}, imageFacts{home: "/root", layers: layers, emptyWorkspace: true, workspaceMode: 0o700},
			[]v{{"/workspace", seedOwned, true}, {"/root", seedOverlay, false}}},
		{"a workspace with content is copied",
			sandbox.SessionOptions{}, imageFacts{home: "/root", layers: layers},
			[]v{{"/workspace", seedOwned, false}, {"/root", seedOverlay, false}}},
		{"no layers (another driver, or no overlay here): the copy",
			sandbox.SessionOptions{EditablePaths: []string{"/testbed"}}, imageFacts{home: "/root"},
			[]v{{"/workspace", seedOwned, false}, {"/root", seedOwned, false}, {"/testbed", seedOwned, false}}},
		{"the image's user: the engine's copy-up keeps the owners",
			sandbox.SessionOptions{User: sandbox.UserImage, EditablePaths: []string{"/testbed"}}, task,
			[]v{{"/workspace", seedOwned, true}, {"/root", seedOverlay, false}, {"/testbed", seedEngine, false}}},
		{"tmpfs volumes start empty", sandbox.SessionOptions{Limits: sandbox.Limits{Disk: 1 << 20}, EditablePaths: []string{"/testbed"}}, task,
			[]v{{"/workspace", seedNone, false}, {"/root", seedNone, false}, {"/testbed", seedNone, false}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			l, err := planLayout("s", tc.o, tc.img, 1000, 1000)
			require.NoError(t, err)
			var got []v
			for _, x := range l.vols {
				got = append(got, v{x.target, x.seed, x.rootOnly})
			}
			assert.Equal(t, tc.vols, got)
			for _, x := range l.owned() {
				assert.Equal(t, seedOwned, x.seed)
				assert.False(t, x.rootOnly, "%s: nothing to copy", x.target)
			}
		})
	}
}

func TestVolumeMountOverlay(t *testing.T) {
	m := volumeMount(vol{name: "sandboxd-s-edit0", target: "/testbed", seed: seedOverlay, bind: "/d/sandboxd-s-edit0.overlay/merged/testbed"})
	assert.Equal(t, mount.Mount{Type: mount.TypeBind, Source: "/d/sandboxd-s-edit0.overlay/merged/testbed", Target: "/testbed",
		BindOptions: &mount.BindOptions{NonRecursive: true}}, m)
	m = volumeMount(vol{name: "sandboxd-s-workspace", target: "/workspace", seed: seedOwned, rootOnly: true})
	assert.Equal(t, mount.TypeVolume, m.Type)
	assert.True(t, m.VolumeOptions.NoCopy, "a handed-over root is not the engine's to seed")
}
