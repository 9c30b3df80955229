package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
)

// quotaRuntime is a runtime that can make quota-bound volumes; the test is
// skipped where it cannot (not root, no loop devices), with why.
func quotaRuntime(t *testing.T, change ...func(*sdocker.Options)) *sdocker.Runtime {
	t.Helper()
	rt := newRuntime(t, change...)
	if err := rt.DiskQuota(); err != nil {
		t.Skipf("disk quotas are unavailable here: %v", err)
	}
	return rt
}

// hostFree is the free space of the host filesystem holding dir, in bytes.
func hostFree(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	require.NoError(t, syscall.Statfs(dir, &st))
	return int64(st.Bavail) * st.Bsize
}

// allocated is what a file takes on the host's disk.
func allocated(t *testing.T, path string) int64 {
	t.Helper()
	var st syscall.Stat_t
	require.NoError(t, syscall.Stat(path, &st))
	return st.Blocks * 512
}

// quotaDisks are the backing files of a session, with their loop devices.
func quotaDisks(t *testing.T, rt *sdocker.Runtime, id string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, v := range []string{"workspace", "home"} {
		p := filepath.Join(rt.DiskDir(), "sandboxd-"+id+"-"+v+".ext4")
		if _, err := os.Stat(p); err == nil {
			out[p] = loopsOf(p)
		}
	}
	return out
}

func loopsOf(path string) []string {
	var devs []string
	for _, dev := range testenv.LoopsUnder(filepath.Dir(path)) {
		b, err := os.ReadFile("/sys/block/" + filepath.Base(dev) + "/loop/backing_file")
		if err == nil && strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == path {
			devs = append(devs, dev)
		}
	}
	return devs
}

// assertReleased checks that nothing of a session is left: no container,
// volume or network, no backing file, no loop device.
func assertReleased(t *testing.T, rt *sdocker.Runtime, id string) {
	t.Helper()
	assert.Zero(t, sessionResources(t, id))
	assert.Empty(t, quotaDisks(t, rt, id), "backing files")
	out, err := exec.Command("losetup", "-a").CombinedOutput()
	require.NoError(t, err, string(out))
	assert.NotContains(t, string(out), id, "losetup -a")
}

// ownDiskDir is a filesystem of the test's own (a 256 MiB tmpfs) for a
// runtime's disk dir, so that its free space moves only with what this
// test's sessions write: on the suite's disk the other packages' tests,
// run at the same time, moved it by more than the quota (seen in CI).
// It is unmounted after everything on it is released.
func ownDiskDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256m,mode=0700", "sandboxd-e2e-disks", dir).CombinedOutput()
	require.NoError(t, err, "mount: %s", out)
	t.Cleanup(func() { // registered first, so it runs after the manager's and runtime's cleanups
		assert.Empty(t, testenv.DiskLeftovers(dir), "left on the test's disk dir")
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// Writing twice the quota into /workspace fails with ENOSPC and the free
// space of the filesystem holding the backing files moves by at most the
// quota; the inodes are bounded; files persist across calls; deleted files
// give their blocks back to the host; Close leaves no volume, loop device
// or file.
func TestQuotaWorkspaceENOSPC(t *testing.T) {
	const quota = 64 << 20
	own := ownDiskDir(t)
	rt := quotaRuntime(t, func(o *sdocker.Options) { o.DiskDir = own })
	m := newManager(t, rt, sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Limits: sandbox.Limits{DiskQuota: quota}}})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	disks := quotaDisks(t, rt, s.ID())
	require.Len(t, disks, 2, "a backing file for /workspace and one for home")
	var ws string
	for p, devs := range disks {
		require.Len(t, devs, 1, "%s: one loop device", p)
		assert.Less(t, allocated(t, p), int64(4<<20), "%s: an empty session costs nearly nothing", p)
		if strings.HasSuffix(p, "-workspace.ext4") {
			ws = p
		}
	}

	out := sh(t, s, `grep -E ' (/workspace|'"$HOME"') ' /proc/mounts; df -k /workspace ~ | tail -n +2; stat -c 'owner=%u:%g %n' /workspace ~; ls -A /workspace; echo listed`)
	t.Log(out)
	assert.Regexp(t, `/dev/loop\d+ /workspace ext4 rw,nosuid,nodev,noatime,discard`, out)
	assert.Equal(t, 2, strings.Count(out, " ext4 rw,nosuid,nodev"), "home is quota-bound too")
	assert.Contains(t, out, "owner=1000:1000 /workspace")
	assert.NotContains(t, out, "lost+found")
	sizes := regexp.MustCompile(`(?m)^/dev/loop\d+\s+(\d+)`).FindAllStringSubmatch(out, -1)
	require.Len(t, sizes, 2)
	for _, sz := range sizes {
		kb, _ := strconv.ParseInt(sz[1], 10, 64)
		assert.InDelta(t, quota>>10, kb, float64(quota>>10)/10, "df inside: about the quota")
	}

	// 2x the quota.
	before := hostFree(t, own)
	out = sh(t, s, "dd if=/dev/urandom of=/workspace/big bs=1M count=128 2>&1; echo dd=$?; sync")
	after := hostFree(t, own)
	t.Logf("%s\nhost free space moved by %d KiB; backing file %d KiB", out, (before-after)>>10, allocated(t, ws)>>10)
	assert.Contains(t, out, "No space left on device")
	assert.NotContains(t, out, "dd=0")
	assert.LessOrEqual(t, before-after, int64(quota), "the host's free space moves by at most the quota")
	assert.LessOrEqual(t, allocated(t, ws), int64(quota), "the backing file holds at most the quota")

	// Files persist across calls.
	sh(t, s, "echo kept > /workspace/keep")
	assert.Contains(t, sh(t, s, "cat /workspace/keep"), "kept")

	// Deleting gives the blocks back to the host (discard punches holes).
	full := allocated(t, ws)
	sh(t, s, "rm /workspace/big; sync")
	require.Eventually(t, func() bool { return allocated(t, ws) < full/2 }, 2*time.Minute, 100*time.Millisecond,
		"backing file still %d KiB after rm (was %d KiB)", allocated(t, ws)>>10, full>>10)

	// Inodes: one per 32 KiB of quota, 2048 here.
	out = sh(t, s, `mkdir /workspace/many && cd /workspace/many && i=0; while [ $i -lt 5000 ]; do : > f$i 2>/tmp/err || break; i=$((i+1)); done; echo files=$i; cat /tmp/err; df -i . | tail -1`)
	t.Log(out)
	assert.Contains(t, out, "No space left on device")
	n := abuseInt(t, out, "files")
	assert.Greater(t, n, 1900)
	assert.Less(t, n, 2048)

	require.NoError(t, s.Close(ctxT(t)))
	assertReleased(t, rt, s.ID())
}

// A session adopted after a restart keeps its quota-bound volumes: the
// loop devices stay attached across the daemon's restart, the files and
// the quota are still there, and Close then releases everything.
func TestQuotaAdoptedAfterRestart(t *testing.T) {
	t.Parallel()
	const quota = 32 << 20
	rt := quotaRuntime(t)
	ctx := ctxT(t)
	defaults := sandbox.SessionOptions{Image: testImage, Runtime: e2eRuntime, Limits: sandbox.Limits{DiskQuota: quota}}
	m1, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{Defaults: defaults, Logger: logger()})
	require.NoError(t, err)
	s1, err := m1.Create(ctx, sandbox.SessionOptions{IdleTimeout: time.Hour})
	require.NoError(t, err)
	sh(t, s1, "echo before > /workspace/f")
	disks := quotaDisks(t, rt, s1.ID())
	require.Len(t, disks, 2)
	require.NoError(t, m1.Shutdown(ctx, true))

	m2 := newManager(t, newRuntime(t), sandbox.ManagerOptions{Defaults: defaults})
	s, err := m2.Get(s1.ID())
	require.NoError(t, err, "adopted")
	assert.Equal(t, int64(quota), s.Options().Limits.DiskQuota)
	assert.Equal(t, disks, quotaDisks(t, rt, s.ID()), "the same files on the same loop devices")
	out := sh(t, s, "cat /workspace/f; dd if=/dev/zero of=/workspace/big bs=1M count=64 2>&1; echo dd=$?")
	assert.Contains(t, out, "before")
	assert.Contains(t, out, "No space left on device")

	require.NoError(t, s.Close(ctx))
	assertReleased(t, rt, s.ID())
}

// A backing file left by a start cut off before its volume existed (on a
// loop device, no label anywhere) is found by name and released at the
// next start.
func TestQuotaReclaimsOrphanDisk(t *testing.T) {
	t.Parallel()
	rt := quotaRuntime(t)
	id := "orphan-disk-" + runID
	p := filepath.Join(rt.DiskDir(), "sandboxd-"+id+"-workspace.ext4")
	require.NoError(t, os.WriteFile(p, nil, 0o600))
	require.NoError(t, os.Truncate(p, 16<<20))
	out, err := exec.Command("losetup", "--find", "--show", p).CombinedOutput()
	require.NoError(t, err, string(out))
	require.Len(t, loopsOf(p), 1)

	newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	assert.NoFileExists(t, p)
	assert.Empty(t, loopsOf(p), "loop device detached")
}

// A warm pool of quota-bound sandboxes hands them out like any other; the
// quota is part of the pool key.
func TestQuotaWarmPool(t *testing.T) {
	t.Parallel()
	rt := quotaRuntime(t)
	m := newManager(t, rt, sandbox.ManagerOptions{
		Defaults: sandbox.SessionOptions{Limits: sandbox.Limits{DiskQuota: 32 << 20}},
		Pools:    []sandbox.PoolOptions{{Size: 1}},
	})
	require.Eventually(t, func() bool { return m.Pools()[0].Ready == 1 }, time.Minute, 20*time.Millisecond)
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, 0, m.Pools()[0].Ready, "handed out from the pool")
	assert.Contains(t, sh(t, s, "df -k /workspace | tail -1"), "/dev/loop")
	other, err := m.Create(ctxT(t), sandbox.SessionOptions{Limits: sandbox.Limits{DiskQuota: 64 << 20}})
	require.NoError(t, err)
	assert.NotEqual(t, s.Options().Key(), other.Options().Key())
	require.NoError(t, other.Close(ctxT(t)))
	require.NoError(t, s.Close(ctxT(t)))
	assertReleased(t, rt, s.ID())
	assertReleased(t, rt, other.ID())
}

// BenchmarkColdStartQuota is a cold session create (until the agent
// answers) without and with 10 GiB quota-bound volumes, alternated.
// go test ./e2e -run '^$' -bench ColdStartQuota -benchtime 10x
func BenchmarkColdStartQuota(b *testing.B) {
	rt, err := sdocker.New(context.Background(), sdocker.Options{AgentBinary: agentBinary,
		Labels: map[string]string{labelRun: runID, labelTest: "bench"}, Logger: logger(), DiskDir: diskDir})
	require.NoError(b, err)
	defer rt.Close()
	if err := rt.DiskQuota(); err != nil {
		b.Skip(err)
	}
	m, err := sandbox.NewManager(context.Background(), rt, sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: testImage, Runtime: e2eRuntime}, Logger: logger()})
	require.NoError(b, err)
	defer func() { _ = m.Shutdown(context.Background(), false) }()
	var plain, quota []time.Duration
	for b.Loop() {
		for i, o := range []sandbox.SessionOptions{{}, {Limits: sandbox.Limits{DiskQuota: 10 << 30}}} {
			start := time.Now()
			s, err := m.Create(context.Background(), o)
			require.NoError(b, err)
			took := time.Since(start)
			if i == 0 {
				plain = append(plain, took)
			} else {
				quota = append(quota, took)
			}
			require.NoError(b, s.Close(context.Background()))
		}
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	b.ReportMetric(p50(plain), "ms-plain-p50")
	b.ReportMetric(p50(quota), "ms-quota-p50")
}
