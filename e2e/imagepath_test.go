package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
)

// linkImage is the test image with links over folders, as a task image may
// hold them: /opt/rootl -> /, /opt/etcl -> /etc, and a real /opt/real.
// Built once for the suite.
var linkImage = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return buildImage(ctx, "links", "FROM "+testImage+"\nUSER 0\n"+
		"RUN mkdir -p /opt/real && echo seed > /opt/real/f && ln -s / /opt/rootl && ln -s /etc /opt/etcl\nUSER 1000:1000\n")
})

// TestEditablePathThroughLink (T3): an editable path with a symbolic link
// in the image among its parents is refused, naming the link and its
// target, whoever the session user is; the checks were lexical, and a
// writable volume landed on the link's target (/usr/local, /etc/ssl). A
// path of real folders is still accepted and seeded.
func TestEditablePathThroughLink(t *testing.T) {
	t.Parallel()
	img, err := linkImage()
	require.NoError(t, err)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	for _, tc := range []struct {
		name, path, want string
		user             string
	}{
		{"root link, hardened", "/opt/rootl/usr/local", `/opt/rootl is a symbolic link in the image (to "/")`, ""},
		{"etc link, hardened", "/opt/etcl/ssl", `/opt/etcl is a symbolic link in the image (to "/etc")`, ""},
		{"root link, image user", "/opt/rootl/usr/local", `/opt/rootl is a symbolic link in the image (to "/")`, sandbox.UserImage},
		{"the link itself, image user", "/opt/etcl", `/opt/etcl is a symbolic link in the image (to "/etc")`, sandbox.UserImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: img, User: tc.user, EditablePaths: []string{tc.path}})
			if err == nil {
				out := sh(t, s, "grep ' /usr/local \\| /etc/ssl \\| /etc ' /proc/self/mountinfo | cut -d' ' -f5,6")
				_ = s.Close(context.Background())
				t.Fatalf("editable path %s accepted; mounts in the sandbox: %q", tc.path, out)
			}
			require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
			assert.ErrorContains(t, err, "editable_paths: "+tc.want)
		})
	}
	t.Run("real folders", func(t *testing.T) {
		s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: img, EditablePaths: []string{"/opt/real"}})
		require.NoError(t, err)
		defer s.Close(context.Background())
		assert.Contains(t, sh(t, s, "cat /opt/real/f && echo more >> /opt/real/f && echo written"), "seed\nwritten")
	})
}

// seedImage is the test image with what the seeding must not carry over
// into an editable folder as the image has it: a setuid-root file, a
// setgid file, a hard link, a file of another user, a device file, a
// link out of the folder; built once for the suite.
var seedImage = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return buildImage(ctx, "seed", "FROM "+testImage+"\nUSER 0\n"+
		"RUN mkdir -p /t/sub && echo one > /t/sub/f && chmod 4755 /t/sub/f && ln /t/sub/f /t/hl && "+
		"echo g > /t/g && chmod 2755 /t/g && echo o > /t/o && chown 2000:2000 /t/o && "+
		"mknod /t/null c 1 3 && ln -s /etc/passwd /t/pw\nUSER 1000:1000\n")
})

// overlayFolders lists the host folders of a session's overlays and the
// mounts under them.
func overlayFolders(t *testing.T, rt *sdocker.Runtime, id string) (folders, mounts []string) {
	t.Helper()
	folders, err := filepath.Glob(filepath.Join(rt.DiskDir(), "sandboxd-"+id+"-*.overlay"))
	require.NoError(t, err)
	b, err := os.ReadFile("/proc/self/mountinfo")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[4], "sandboxd-"+id+"-") {
			mounts = append(mounts, f[4])
		}
	}
	return folders, mounts
}

// needOverlay skips t where the runtime seeds by copying (not root, another
// storage driver): the copy's own tests cover that route.
func needOverlay(t *testing.T, rt *sdocker.Runtime) {
	t.Helper()
	if err := rt.OverlaySeeding(); err != nil {
		t.Skipf("editable paths are copied here: %v", err)
	}
}

// TestEditablePathOverlay (decision 0040): an editable folder seeded by an
// overlay of the image's layers is what the copy made it: every entry the
// session user's, no setuid or setgid bit, no device file, hard links
// kept, a link kept as a link; the mount is nosuid and nodev; the image is
// not changed; and closing the session leaves no folder and no mount.
func TestEditablePathOverlay(t *testing.T) {
	t.Parallel()
	img, err := seedImage()
	require.NoError(t, err)
	rt := newRuntime(t)
	needOverlay(t, rt)
	m := newManager(t, rt, sandbox.ManagerOptions{})
	for _, quota := range []int64{0, 64 << 20} {
		t.Run(fmt.Sprintf("quota %d", quota), func(t *testing.T) {
			s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: img, EditablePaths: []string{"/t"}, Limits: sandbox.Limits{DiskQuota: quota}})
			require.NoError(t, err)
			folders, mounts := overlayFolders(t, rt, s.ID())
			assert.Len(t, folders, 1, "one overlay folder: /t")
			assert.NotEmpty(t, mounts, "mounted while the session lives")

			out := sh(t, s, `cd /t; find . ! -user 1000 -o ! -group 1000 | wc -l; find . -perm /6000 | wc -l; ls null 2>&1; `+
				`stat -c '%i %h' sub/f hl; readlink pw; grep ' /t ' /proc/self/mountinfo | cut -d' ' -f6; grep ' /t ' /proc/self/mountinfo | sed 's/.* - //' | cut -d' ' -f1; `+
				`echo two >> hl && cat sub/f && stat -c '%i %h' sub/f hl; mkdir new && echo ok > new/f && rm g && echo written`)
			t.Log(out)
			lines := strings.Split(out, "\n")
			require.GreaterOrEqual(t, len(lines), 12, out)
			assert.Equal(t, "0", lines[0], "every entry the session user's")
			assert.Equal(t, "0", lines[1], "no setuid or setgid bit")
			assert.Contains(t, lines[2], "No such file", "no device file")
			assert.Equal(t, lines[3], lines[4], "a hard link is one file")
			assert.True(t, strings.HasSuffix(lines[3], " 2"), "two links: %q", lines[3])
			assert.Equal(t, "/etc/passwd", lines[5], "a link stays a link")
			assert.Contains(t, lines[6], "nosuid")
			assert.Contains(t, lines[6], "nodev")
			assert.Equal(t, "overlay", lines[7])
			assert.Equal(t, "one\ntwo", strings.Join(lines[8:10], "\n"), "a write through one link shows through the other")
			assert.Equal(t, lines[10], lines[11], "still one file after the write: %s", out)
			assert.Contains(t, out, "written")
			if quota > 0 {
				out := sh(t, s, `dd if=/dev/zero of=/t/big bs=1M count=128 2>&1; rm -f /t/big; echo done`)
				assert.Contains(t, out, "No space left on device", "the upper layer is on the quota filesystem")
			}

			// The image is as it was.
			orig, err := exec.CommandContext(ctxT(t), "docker", "run", "--rm", "--network", "none", "--user", "0", img,
				"sh", "-c", "stat -c '%u %a' /t/sub/f; cat /t/sub/f; ls /t").CombinedOutput()
			require.NoError(t, err, "%s", orig)
			assert.Equal(t, "0 4755\none\ng\nhl\nnull\no\npw\nsub\n", string(orig))

			require.NoError(t, s.Close(ctxT(t)))
			folders, mounts = overlayFolders(t, rt, s.ID())
			assert.Empty(t, folders, "no overlay folder after close")
			assert.Empty(t, mounts, "no mount after close")
			assert.Zero(t, sessionResources(t, s.ID()))
		})
	}
}

// TestEditablePathOverlayRestart: a daemon that stops keeping its sessions
// leaves their overlays mounted; the next one adopts a live session (its
// editable folder as it was left) and reclaims a dead one's (unmounted,
// deleted); closing the adopted session leaves nothing.
func TestEditablePathOverlayRestart(t *testing.T) {
	t.Parallel()
	img, err := seedImage()
	require.NoError(t, err)
	rt := newRuntime(t)
	needOverlay(t, rt)
	ctx := ctxT(t)
	m1, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: img}, Logger: logger()})
	require.NoError(t, err)
	live, err := m1.Create(ctx, sandbox.SessionOptions{EditablePaths: []string{"/t"}, IdleTimeout: time.Hour})
	require.NoError(t, err)
	dead, err := m1.Create(ctx, sandbox.SessionOptions{EditablePaths: []string{"/t"}, Limits: sandbox.Limits{DiskQuota: 64 << 20}})
	require.NoError(t, err)
	assert.Contains(t, sh(t, live, "echo kept > /t/note && echo ok"), "ok")

	require.NoError(t, m1.Shutdown(ctx, true)) // as if the daemon stopped
	require.NoError(t, docker.ContainerRemove(ctx, containerOf(t, dead.ID()).ID, container.RemoveOptions{Force: true}))
	folders, mounts := overlayFolders(t, rt, dead.ID())
	require.Len(t, folders, 1, "a dead session's overlay outlives the daemon")
	require.NotEmpty(t, mounts)

	m2 := newManager(t, newRuntime(t), sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: img}})
	s, err := m2.Get(live.ID())
	require.NoError(t, err, "adopted")
	assert.Contains(t, sh(t, s, "cat /t/note; echo more >> /t/note && echo ok"), "kept\nok")
	folders, mounts = overlayFolders(t, rt, dead.ID())
	assert.Empty(t, folders, "the dead session's overlay folder is reclaimed")
	assert.Empty(t, mounts, "and unmounted")

	require.NoError(t, s.Close(ctx))
	folders, mounts = overlayFolders(t, rt, live.ID())
	assert.Empty(t, folders)
	assert.Empty(t, mounts)
	assert.Zero(t, sessionResources(t, live.ID()))
}

// TestEditablePathCopyFallback: a runtime that cannot (here: may not) seed
// by overlay says why and copies, as decision 0028 does: the same folder,
// on engine volumes.
func TestEditablePathCopyFallback(t *testing.T) {
	t.Parallel()
	img, err := seedImage()
	require.NoError(t, err)
	rt := newRuntime(t, func(o *sdocker.Options) { o.NoOverlaySeed = true })
	require.ErrorContains(t, rt.OverlaySeeding(), "NoOverlaySeed")
	m := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: img, EditablePaths: []string{"/t"}})
	require.NoError(t, err)
	// (Hard links: the engine's archive of the image's folder gave this
	// fuse-overlayfs engine's two names as two files, so they are not
	// checked here.)
	out := sh(t, s, `cd /t; find . ! -user 1000 | wc -l; find . -perm /6000 | wc -l; grep ' /t ' /proc/self/mountinfo | sed 's/.* - //' | cut -d' ' -f1`)
	assert.True(t, strings.HasPrefix(out, "0\n0\n"), out)
	assert.NotContains(t, out, "overlay", "an engine volume")
	assert.Contains(t, volumesOf(t, s.ID()), "sandboxd-"+s.ID()+"-edit0")
	folders, _ := overlayFolders(t, rt, s.ID())
	assert.Empty(t, folders)
	require.NoError(t, s.Close(ctxT(t)))
	assert.Zero(t, sessionResources(t, s.ID()))
}
