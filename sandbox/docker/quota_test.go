package docker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestDiskNames(t *testing.T) {
	id := "0123abcd-ef"
	dir := "/var/lib/sandboxd/disks/default"
	for _, v := range []string{workspaceVolume(id), homeVolume(id), editableVolume(id, 0), editableVolume(id, 15)} {
		p := diskFile(dir, v)
		assert.Equal(t, id, diskSession(filepath.Base(p)), p)
		assert.True(t, ownDiskFile(p, id), p)
		assert.False(t, ownDiskFile(p, "other"), p)
	}
	for _, bad := range []string{"", "sandboxd-.ext4", "sandboxd--home.ext4", "x-workspace.ext4", "sandboxd-a-workspace.img", "sandboxd-a-data.ext4", "sandboxd-a-edit.ext4", "sandboxd-a-editx.ext4", "sandboxd--edit1.ext4"} {
		assert.Empty(t, diskSession(bad), bad)
	}
	// A label can only name a file sandboxd named for that session.
	for _, bad := range []string{"/etc/passwd", "relative/sandboxd-" + id + "-home.ext4", "/x/../y/sandboxd-" + id + "-home.ext4"} {
		assert.False(t, ownDiskFile(bad, id), bad)
	}
}

func TestSessionDisks(t *testing.T) {
	r := &Runtime{quota: quota{dir: "/d/s"}}
	labelled := []string{"/old/dir/sandboxd-a-workspace.ext4", "/etc/passwd", "/d/s/sandboxd-a-home.ext4", "/d/s/sandboxd-b-home.ext4"}
	assert.Equal(t, []string{"/old/dir/sandboxd-a-workspace.ext4", "/d/s/sandboxd-a-home.ext4", "/d/s/sandboxd-a-workspace.ext4"},
		r.sessionDisks("a", labelled))
	none := &Runtime{quota: quota{err: os.ErrPermission}}
	assert.Equal(t, []string{"/old/dir/sandboxd-a-workspace.ext4"}, none.sessionDisks("a", labelled[:1]))

	// Editable paths' files are found in the directory by name.
	dir := t.TempDir()
	for _, n := range []string{"sandboxd-a-edit0.ext4", "sandboxd-a-edit12.ext4", "sandboxd-b-edit0.ext4", "sandboxd-a-edit.ext4"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o600))
	}
	r = &Runtime{quota: quota{dir: dir}}
	assert.Equal(t, []string{filepath.Join(dir, "sandboxd-a-workspace.ext4"), filepath.Join(dir, "sandboxd-a-home.ext4"),
		filepath.Join(dir, "sandboxd-a-edit0.ext4"), filepath.Join(dir, "sandboxd-a-edit12.ext4")}, r.sessionDisks("a", nil))
}

func TestMkfsArgs(t *testing.T) {
	args := strings.Join(mkfsArgs("/d/f.ext4", 1000, 1001), " ")
	for _, want := range []string{"-m 0", "-i 32768", "root_owner=1000:1001", "lazy_itable_init=1", "lazy_journal_init=1", "nodiscard", "/d/f.ext4"} {
		assert.Contains(t, args, want)
	}
	assert.Equal(t, map[string]string{"type": "ext4", "device": "/dev/loop3", "o": "nosuid,nodev,noatime,discard"}, diskDriverOptions("/dev/loop3"))
}

func TestListDisks(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"sandboxd-s1-workspace.ext4", "sandboxd-s1-home.ext4", "sandboxd-s2-home.ext4", "notes.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), nil, 0o600))
	}
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sandboxd-s3-home.ext4"), 0o700))
	r := &Runtime{quota: quota{dir: dir}}
	res, err := r.listDisks()
	require.NoError(t, err)
	got := map[string]int{}
	for _, x := range res {
		assert.Equal(t, sandbox.KindDisk, x.Kind)
		got[x.SessionID]++
	}
	assert.Equal(t, map[string]int{"s1": 2, "s2": 1}, got)
	gone := &Runtime{quota: quota{dir: filepath.Join(dir, "missing")}}
	res, err = gone.listDisks()
	require.NoError(t, err)
	assert.Empty(t, res)
}

// needLoop skips a test that attaches loop devices where it cannot.
func needLoop(t *testing.T) {
	t.Helper()
	if err := loopSupported(); err != nil {
		t.Skip(err)
	}
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skip(err)
		}
	}
}

// makeDisk makes a sparse ext4 file on a loop device, owned as asked with
// no lost+found; releaseDisk detaches it and deletes the file.
func TestMakeAndReleaseDisk(t *testing.T) {
	needLoop(t)
	dir := t.TempDir()
	p := diskFile(dir, workspaceVolume("unit"))
	dev, err := makeDisk(context.Background(), p, 1<<30, 1000, 1001)
	require.NoError(t, err)
	t.Cleanup(func() { _ = releaseDisk(p) })
	assert.Regexp(t, `^/dev/loop[0-9]+$`, dev)
	devs, err := loopsOf(p)
	require.NoError(t, err)
	assert.Equal(t, []string{dev}, devs)

	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(p, &st))
	assert.Equal(t, int64(1<<30), st.Size)
	assert.Less(t, st.Blocks*512, int64(8<<20), "a new 1 GiB disk should be sparse")

	out, err := exec.Command("debugfs", "-R", "ls -l /", p).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.NotContains(t, string(out), "lost+found")
	assert.Regexp(t, `40755 \(2\)\s+1000\s+1001 .* \.\n`, string(out))
	out, err = exec.Command("dumpe2fs", "-h", p).CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Regexp(t, `Inode count:\s+32768\n`, string(out))
	assert.Regexp(t, `Reserved block count:\s+0\n`, string(out))

	require.NoError(t, releaseDisk(p))
	devs, err = loopsOf(p)
	require.NoError(t, err)
	assert.Empty(t, devs)
	assert.NoFileExists(t, p)
	assert.NoError(t, releaseDisk(p), "releasing twice")
}

// A failed make leaves nothing: no file, no loop device.
func TestMakeDiskFailureLeavesNothing(t *testing.T) {
	needLoop(t)
	dir := t.TempDir()
	p := diskFile(dir, homeVolume("unit"))
	_, err := makeDisk(context.Background(), p, 64<<10, 1000, 1000) // too small for ext4
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mkfs.ext4")
	assert.NoFileExists(t, p)
}

// BenchmarkMakeDisk is the cold-start cost of one quota-bound volume's
// backing filesystem (sparse file, mkfs.ext4, debugfs, loop device) and its
// release, at the default 10 GiB.
func BenchmarkMakeDisk(b *testing.B) {
	if err := loopSupported(); err != nil {
		b.Skip(err)
	}
	dir := b.TempDir()
	p := diskFile(dir, workspaceVolume("bench"))
	var made, released time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := makeDisk(context.Background(), p, 10<<30, 1000, 1000); err != nil {
			b.Fatal(err)
		}
		made += time.Since(start)
		start = time.Now()
		if err := releaseDisk(p); err != nil {
			b.Fatal(err)
		}
		released += time.Since(start)
	}
	b.ReportMetric(float64(made.Microseconds())/1000/float64(b.N), "ms-make/op")
	b.ReportMetric(float64(released.Microseconds())/1000/float64(b.N), "ms-release/op")
}
