package docker

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

func TestIDMap(t *testing.T) {
	for _, id := range []int{1, 1000, 65534} {
		m := idMap(id)
		// Bijective: no inside and no outside id twice, all of 0..maxID.
		var in, out uint64
		for _, e := range m {
			in += uint64(e.Size)
			out += uint64(e.Size)
			for _, f := range m {
				if e != f {
					assert.False(t, e.ContainerID < f.ContainerID+f.Size && f.ContainerID < e.ContainerID+e.Size, "inside ranges overlap: %v %v", e, f)
					assert.False(t, e.HostID < f.HostID+f.Size && f.HostID < e.HostID+e.Size, "outside ranges overlap: %v %v", e, f)
				}
			}
		}
		assert.Equal(t, uint64(maxID+1), in, "id %d", id)
		assert.Contains(t, m, syscall.SysProcIDMap{ContainerID: 0, HostID: id, Size: 1}, "the image's root shows as the session user")
		assert.Contains(t, m, syscall.SysProcIDMap{ContainerID: id, HostID: 0, Size: 1}, "and the session user as root")
	}
	assert.Equal(t, []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: maxID + 1}}, idMap(0))
}

// capV2 is a security.capability value (VFS_CAP_REVISION_2) granting
// CAP_NET_RAW, as setcap writes it.
var capV2 = []byte{0x01, 0x00, 0x00, 0x02, 0x00, 0x20, 0x00, 0x00, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}

// TestOverlayFix mounts a real overlay of two layers as the runtime does
// (needs root and a kernel with idmapped mounts; skipped elsewhere) and
// checks what the session sees: every entry the session user's, no
// setuid, setgid, file capability or device file, hard links kept, the
// fuse-overlayfs layer's AUFS deletions applied; and that releasing it
// leaves nothing.
func TestOverlayFix(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: mounts an overlay")
	}
	const uid, gid = 1000, 1000
	base := t.TempDir()
	lower, upper := filepath.Join(base, "lower"), filepath.Join(base, "upper")
	file := func(p string, mode os.FileMode, owner int) {
		t.Helper()
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(filepath.Base(p)), 0o644))
		require.NoError(t, os.Lchown(p, owner, owner)) // first: a change of owner clears setuid
		require.NoError(t, os.Chmod(p, mode))
	}
	file(filepath.Join(lower, "t/suid"), 0o755|os.ModeSetuid, 0)
	file(filepath.Join(lower, "t/sgid"), 0o644|os.ModeSetgid, 0)
	file(filepath.Join(lower, "t/cap"), 0o755, 0)
	file(filepath.Join(lower, "t/mine"), 0o600, uid) // shows as root's through the idmapping
	file(filepath.Join(lower, "t/other"), 0o644, 2000)
	file(filepath.Join(lower, "t/sub/a"), 0o644, 0)
	file(filepath.Join(lower, "t/old"), 0o644, 0)
	file(filepath.Join(lower, "t/opq/gone"), 0o644, 0)
	file(filepath.Join(lower, "outside"), 0o644, 0)
	require.NoError(t, os.Link(filepath.Join(lower, "t/sub/a"), filepath.Join(lower, "t/b")))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(lower, "t/link")))
	require.NoError(t, unix.Mknod(filepath.Join(lower, "t/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
	require.NoError(t, unix.Setxattr(filepath.Join(lower, "t/cap"), "security.capability", capV2, 0))
	// The upper layer as fuse-overlayfs writes one: AUFS markers.
	file(filepath.Join(upper, "t/.wh.old"), 0o644, 0)
	file(filepath.Join(upper, "t/opq/.wh..wh..opq"), 0o644, 0)
	file(filepath.Join(upper, "t/opq/kept"), 0o644, 0)

	dir := filepath.Join(base, "sandboxd-s-edit0"+overlayExt)
	require.NoError(t, os.Mkdir(dir, 0o700))
	s := &overlaySupport{userns: map[[2]int]*os.File{}}
	t.Cleanup(func() {
		for _, f := range s.userns {
			f.Close()
		}
	})
	layers := []string{upper, lower}
	if err := s.mountOverlayAt(dir, layers, uid, gid); err != nil {
		t.Skipf("this kernel cannot mount an overlay of idmapped layers: %v", err)
	}
	released := false
	t.Cleanup(func() {
		if !released {
			_ = releaseOverlay(dir)
		}
	})
	merged := filepath.Join(dir, overlayMerged)
	fx := &overlayFixer{uid: uid, gid: gid, layers: layers, merged: merged}
	require.NoError(t, fx.open(vol{target: "/t", what: "editable path /t"}))
	require.NoError(t, fx.pass(context.Background()))
	host := fx.host
	assert.Equal(t, filepath.Join(merged, "t"), host)

	st := func(name string) unix.Stat_t {
		t.Helper()
		var s unix.Stat_t
		require.NoError(t, unix.Lstat(filepath.Join(host, name), &s), name)
		return s
	}
	for _, name := range []string{".", "suid", "sgid", "cap", "mine", "other", "sub", "sub/a", "b", "link", "opq", "opq/kept"} {
		s := st(name)
		assert.Equal(t, [2]uint32{uid, gid}, [2]uint32{s.Uid, s.Gid}, "%s is the session user's", name)
	}
	assert.Equal(t, uint32(0o755), st("suid").Mode&0o7777, "setuid cleared")
	assert.Equal(t, uint32(0o644), st("sgid").Mode&0o7777, "setgid cleared")
	assert.Equal(t, uint32(0o600), st("mine").Mode&0o7777, "mode kept")
	_, err := unix.Lgetxattr(filepath.Join(host, "cap"), "security.capability", nil)
	require.ErrorIs(t, err, unix.ENODATA, "file capability dropped")
	_, err = os.Lstat(filepath.Join(host, "null"))
	require.ErrorIs(t, err, os.ErrNotExist, "no device files")
	to, err := os.Readlink(filepath.Join(host, "link"))
	require.NoError(t, err)
	assert.Equal(t, "/etc/passwd", to, "a link is kept as a link")
	for _, name := range []string{"old", ".wh.old", "opq/gone", "opq/.wh..wh..opq"} {
		_, err := os.Lstat(filepath.Join(host, name))
		require.ErrorIs(t, err, os.ErrNotExist, "%s: the AUFS deletion applied, the marker gone", name)
	}

	// Hard links stay linked through a write that copies one up.
	a, b := st("sub/a"), st("b")
	assert.Equal(t, a.Ino, b.Ino)
	require.NoError(t, os.WriteFile(filepath.Join(host, "b"), []byte("changed"), 0o644))
	got, err := os.ReadFile(filepath.Join(host, "sub/a"))
	require.NoError(t, err)
	assert.Equal(t, "changed", string(got), "a write through one link shows through the other")

	// The image's layers are never written.
	var l unix.Stat_t
	require.NoError(t, unix.Lstat(filepath.Join(lower, "t/suid"), &l))
	assert.Equal(t, uint32(0), l.Uid)
	assert.Equal(t, uint32(unix.S_ISUID|0o755), l.Mode&0o7777)
	data, err := os.ReadFile(filepath.Join(lower, "t/sub/a"))
	require.NoError(t, err)
	assert.Equal(t, "a", string(data))

	// What a session did not write costs metadata only: every file of
	// the upper layer but the one written is a metadata copy.
	var copies []string
	require.NoError(t, filepath.Walk(filepath.Join(dir, overlayUpper), func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		if _, err := unix.Lgetxattr(p, "trusted.overlay.metacopy", nil); err != nil {
			rel, _ := filepath.Rel(filepath.Join(dir, overlayUpper), p)
			copies = append(copies, rel)
		}
		return nil
	}))
	assert.Subset(t, []string{"t/b", "t/sub/a"}, copies, "only the written file's data is in the upper layer")

	require.NoError(t, releaseOverlay(dir))
	released = true
	left, err := mountsUnder(base)
	require.NoError(t, err)
	assert.Empty(t, left, "nothing mounted")
	_, err = os.Lstat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "the folder is gone")
	require.NoError(t, releaseOverlay(dir), "releasing twice is no error")
}

// TestOpenTargetLinks: an editable path through a link is refused as
// checkEditablePaths refuses it; HOME through a link in its parents
// follows it inside the image, as the engine does.
func TestOpenTargetLinks(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "var/home/u"), 0o755))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "opt/real"), 0o755))
	require.NoError(t, os.Symlink("/var/home", filepath.Join(root, "home")))
	require.NoError(t, os.Symlink("/", filepath.Join(root, "opt/rootl")))
	require.NoError(t, os.Symlink("/etc", filepath.Join(root, "opt/etcl")))
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY, 0)
	require.NoError(t, err)
	defer unix.Close(fd)
	uid, gid := os.Geteuid(), os.Getegid()
	open := func(v vol) (string, error) {
		f, host, err := openTarget(fd, root, v, uid, gid)
		if f != nil {
			f.Close()
		}
		return host, err
	}
	host, err := open(vol{target: "/home/u", what: "home"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(root, "var/home/u"), host)
	_, err = open(vol{target: "/opt/rootl/usr/local", what: "editable path /opt/rootl/usr/local"})
	require.ErrorContains(t, err, `editable_paths: /opt/rootl is a symbolic link in the image (to "/")`)
	_, err = open(vol{target: "/opt/etcl", what: "editable path /opt/etcl"})
	require.ErrorContains(t, err, `editable_paths: /opt/etcl is a symbolic link in the image (to "/etc")`)
	host, err = open(vol{target: "/opt/new/deep", what: "editable path /opt/new/deep"})
	require.NoError(t, err, "a folder the image lacks is made")
	assert.Equal(t, filepath.Join(root, "opt/new/deep"), host)
	fi, err := os.Stat(host)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o755), fi.Mode().Perm())
}

// TestOverlayProbe: the route is decided once; what rules it out says so
// (the daemon logs it and copies), and the kernel probe leaves nothing.
func TestOverlayProbe(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		dir  string
		want string
	}{
		{"turned off", Options{NoOverlaySeed: true}, t.TempDir(), "NoOverlaySeed"},
		{"no disk directory", Options{}, "", "no disk directory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runtime{opts: tc.opts}
			s := &overlaySupport{userns: map[[2]int]*os.File{}}
			require.ErrorContains(t, r.checkOverlay(context.Background(), tc.dir, s), tc.want)
		})
	}
	if os.Geteuid() != 0 {
		t.Skip("the kernel probe needs root")
	}
	dir := t.TempDir()
	s := &overlaySupport{userns: map[[2]int]*os.File{}}
	t.Cleanup(func() {
		for _, f := range s.userns {
			f.Close()
		}
	})
	if err := tryOverlay(dir, s); err != nil {
		t.Skipf("this kernel cannot: %v", err)
	}
	// A probe's leftovers (a daemon killed in the middle) go at the next.
	left := filepath.Join(dir, ".probe-left")
	require.NoError(t, os.MkdirAll(filepath.Join(left, "layer"), 0o700))
	require.NoError(t, s.mountOverlayAt(left, []string{filepath.Join(left, "layer")}, 1000, 1000))
	require.NoError(t, tryOverlay(dir, s))
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, ents, "nothing left of the probes")
	mounts, err := mountsUnder(dir)
	require.NoError(t, err)
	assert.Empty(t, mounts)
}
