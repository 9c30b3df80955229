package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/system"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Disk quotas (sandbox.Limits.DiskQuota, decision 0022). The engine here
// cannot bound a volume on an ordinary ext4 host (no --storage-opt size on
// overlay or fuse-overlayfs, no xfs project quotas), so each quota-bound
// volume is a filesystem of its own: a sparse file under the runtime's disk
// directory, made an ext4 filesystem owned by the session user, attached to
// a loop device by the daemon, and mounted by the engine's local volume
// driver (type=ext4, device=/dev/loopN; the driver's own o=loop is refused
// by the kernel for a mount made on the engine's behalf). A write past the
// size fails with ENOSPC, the inodes are bounded by the filesystem, and the
// host pays only for the blocks written (the volume is mounted with
// discard, so deleted files give theirs back).
//
// The record is the volume's labels, as for everything else: LabelDiskFile
// names the backing file, whose loop device is found from the kernel
// (/sys/block/loop*/loop/backing_file), so Remove needs no memory of the
// start. A file is named after its session and volume
// (<DiskDir>/<scope>/sandboxd-<id>-workspace.ext4), so a start cut off
// between the file and its volume leaves a file that List reports as the
// session's (sandbox.KindDisk) and Remove finds by name.

// LabelDiskFile is the label of a quota-bound volume naming its backing file.
const LabelDiskFile = "sandboxd.disk.file"

// DiskBytesPerInode is the bytes of quota per inode of a quota-bound volume
// (mkfs.ext4 -i): 10 GiB hold 327,680 files, 64 MiB 2,048. ext4's own
// default is 16 KiB; one per 32 KiB halves the inode tables and still
// leaves room for source trees of small files (a node_modules averages
// 10-20 KiB per file).
const DiskBytesPerInode = 32 << 10

// diskExt is the suffix of a backing file.
const diskExt = ".ext4"

// diskMountOptions are the mount options of a quota-bound volume: no
// setuid or device files (as the read-only root and the tmpfs mounts), no
// access-time writes, and discard so the blocks of deleted files go back to
// the host (the loop device punches holes in the sparse file).
const diskMountOptions = "nosuid,nodev,noatime,discard"

// quota is the runtime's disk-quota support, decided once by New.
type quota struct {
	dir string // <DiskDir>/<scope>: this runtime's backing files and overlay folders
	err error  // why quota-bound volumes cannot be made here; nil if they can
	// overlay is the seeding of editable paths by overlay (overlay.go),
	// whose folders live in dir too.
	overlay *overlaySupport
}

// DiskQuota reports whether this runtime can make quota-bound volumes
// (sandbox.Limits.DiskQuota): nil if it can, else why not (not root, a
// remote or rootless engine, no loop devices, no mkfs.ext4, no DiskDir).
// A server says so at start and falls back to tmpfs or no quota.
func (r *Runtime) DiskQuota() error { return r.quota.err }

// DiskDir is where this runtime keeps the backing files of its quota-bound
// volumes ("" when it cannot make them).
func (r *Runtime) DiskDir() string {
	if r.quota.err != nil {
		return ""
	}
	return r.quota.dir
}

// probeQuota decides whether quota-bound volumes can be made (probeLoop),
// and whether editable paths are seeded by overlay (probeOverlay).
func (r *Runtime) probeQuota(ctx context.Context) quota {
	q := r.probeLoop(ctx)
	q.overlay = r.probeOverlay(ctx, q.dir)
	return q
}

// probeLoop decides whether quota-bound volumes can be made: root (loop
// devices), an engine on this host that mounts as root (a remote engine
// sees other devices; a rootless one cannot mount ext4), the tools
// (mkfs.ext4 and debugfs, e2fsprogs), /dev/loop-control, and DiskDir.
func (r *Runtime) probeLoop(ctx context.Context) quota {
	q := quota{}
	if r.opts.DiskDir == "" {
		q.err = errors.New("no disk directory configured")
		return q
	}
	q.dir = filepath.Join(r.opts.DiskDir, ScopeOf(r.opts.Labels))
	if err := loopSupported(); err != nil {
		q.err = err
		return q
	}
	if !strings.HasPrefix(r.cli.DaemonHost(), "unix://") || r.opts.CopyAgent {
		q.err = fmt.Errorf("the engine at %s may not be on this host: a loop device made here means nothing to it", r.cli.DaemonHost())
		return q
	}
	for _, tool := range []string{"mkfs.ext4", "debugfs"} {
		if _, err := exec.LookPath(tool); err != nil {
			q.err = fmt.Errorf("%s not found (install e2fsprogs): %w", tool, err)
			return q
		}
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	info, err := r.cli.Info(cctx)
	if err != nil {
		q.err = fmt.Errorf("asking the engine whether it is rootless: %w", err)
		return q
	}
	if rootless(info) {
		q.err = errors.New("the engine is rootless: it cannot mount an ext4 filesystem")
		return q
	}
	if err := os.MkdirAll(q.dir, 0o700); err != nil {
		q.err = fmt.Errorf("disk directory: %w", err)
	}
	return q
}

func rootless(info system.Info) bool {
	return slices.ContainsFunc(info.SecurityOptions, func(o string) bool { return strings.Contains(o, "name=rootless") })
}

// diskFile is the backing file of a session's volume in dir.
func diskFile(dir, volume string) string { return filepath.Join(dir, volume+diskExt) }

// diskSession is the session id of a backing file's or an overlay
// folder's base name, "" if the name is not one sandboxd makes.
func diskSession(base string) string {
	name, ok := strings.CutSuffix(base, diskExt)
	if !ok {
		if name, ok = strings.CutSuffix(base, overlayExt); !ok {
			return ""
		}
	}
	name, ok = strings.CutPrefix(name, "sandboxd-")
	if !ok {
		return ""
	}
	for _, suffix := range []string{"-workspace", "-home"} {
		if id, ok := strings.CutSuffix(name, suffix); ok && id != "" {
			return id
		}
	}
	// An editable path's: -edit<n>.
	if i := strings.LastIndex(name, "-edit"); i > 0 {
		if n := name[i+len("-edit"):]; n != "" && strings.Trim(n, "0123456789") == "" {
			return name[:i]
		}
	}
	return ""
}

// ownDiskFile reports whether path may be released for session id: a
// backing file sandboxd named for that session. A label pointing anywhere
// else is ignored, so no label can make Remove delete another file.
func ownDiskFile(path, id string) bool {
	return filepath.IsAbs(path) && filepath.Clean(path) == path && diskSession(filepath.Base(path)) == id
}

// mkfsArgs are mkfs.ext4's arguments for a backing file (its size is the
// filesystem's) whose root belongs to uid:gid. No reserved blocks (the session user is never
// root), one inode per DiskBytesPerInode, lazy inode-table and journal
// initialization (the file stays sparse: ~4 MiB written for 10 GiB), and no
// discard of a file that is all holes already.
func mkfsArgs(path string, uid, gid int) []string {
	return []string{
		"-q", "-F", "-t", "ext4", "-m", "0", "-i", strconv.Itoa(DiskBytesPerInode),
		"-E", fmt.Sprintf("root_owner=%d:%d,lazy_itable_init=1,lazy_journal_init=1,nodiscard", uid, gid),
		path,
	}
}

// debugfsArgs remove lost+found from a new filesystem: the volume's root is
// then empty, so the engine seeds it from the image like any volume (it
// copies only into an empty one), and the session sees no root-owned
// folder in /workspace. e2fsck makes a new one when it needs it.
func debugfsArgs(path string) []string {
	return []string{"-w", "-R", "rmdir lost+found", path}
}

// makeDisk creates the sparse backing file at path, makes it an ext4
// filesystem of size bytes owned by uid:gid and attaches it to a free loop
// device, whose path it returns. On error nothing is left.
func makeDisk(ctx context.Context, path string, size int64, uid, gid int) (dev string, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("disk quota: %w", err)
	}
	defer func() {
		if err != nil {
			_ = releaseDisk(path)
		}
	}()
	terr := f.Truncate(size)
	if cerr := f.Close(); terr == nil {
		terr = cerr
	}
	if terr != nil {
		return "", fmt.Errorf("disk quota: sizing %s: %w", path, terr)
	}
	// Not cancelled with the start: both take milliseconds, and a killed
	// mkfs would only leave a file to remove.
	tctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	for _, c := range [][]string{append([]string{"mkfs.ext4"}, mkfsArgs(path, uid, gid)...), append([]string{"debugfs"}, debugfsArgs(path)...)} {
		if out, err := exec.CommandContext(tctx, c[0], c[1:]...).CombinedOutput(); err != nil {
			return "", fmt.Errorf("disk quota: %s: %w: %s", c[0], err, strings.TrimSpace(string(out)))
		}
	}
	dev, err = loopAttach(path)
	if err != nil {
		return "", fmt.Errorf("disk quota: attaching %s to a loop device: %w", path, err)
	}
	return dev, nil
}

// releaseDisk detaches every loop device backed by path and deletes path.
// What is gone already is no error. A device still mounted (a container
// being removed) is detached by the kernel once it is unmounted. An
// overlay folder (overlay.go) is unmounted and deleted.
func releaseDisk(path string) error {
	if strings.HasSuffix(path, overlayExt) {
		return releaseOverlay(path)
	}
	var errs []error
	devs, err := loopsOf(path)
	if err != nil {
		errs = append(errs, err)
	}
	for _, d := range devs {
		if err := loopDetach(d); err != nil {
			errs = append(errs, fmt.Errorf("detaching %s: %w", d, err))
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// diskDriverOptions are the local driver's options of a quota-bound volume
// on loop device dev.
func diskDriverOptions(dev string) map[string]string {
	return map[string]string{"type": "ext4", "device": dev, "o": diskMountOptions}
}

// listDisks returns the backing files and overlay folders in this
// runtime's disk directory as resources of their sessions.
func (r *Runtime) listDisks() ([]sandbox.Resource, error) {
	if r.quota.dir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(r.quota.dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing disks: %w", err)
	}
	var out []sandbox.Resource
	for _, e := range ents {
		id := diskSession(e.Name())
		overlay := e.IsDir() && strings.HasSuffix(e.Name(), overlayExt)
		if id == "" || !e.Type().IsRegular() && !overlay {
			continue
		}
		p := filepath.Join(r.quota.dir, e.Name())
		out = append(out, sandbox.Resource{Kind: sandbox.KindDisk, ID: p, Name: e.Name(), SessionID: id})
	}
	return out, nil
}

// sessionDisks are the backing files that Remove releases for session id:
// those named by the labels of its removed volumes, and those named after
// it in the disk directory (a start cut off before the volume).
func (r *Runtime) sessionDisks(id string, labelled []string) []string {
	var files []string
	for _, p := range labelled {
		if ownDiskFile(p, id) && !slices.Contains(files, p) {
			files = append(files, p)
		}
	}
	if r.quota.dir != "" {
		for _, v := range []string{workspaceVolume(id), homeVolume(id)} {
			if p := diskFile(r.quota.dir, v); !slices.Contains(files, p) {
				files = append(files, p)
			}
		}
		// The editable paths': as many as the session had, found by name.
		if ents, err := os.ReadDir(r.quota.dir); err == nil {
			for _, e := range ents {
				if p := filepath.Join(r.quota.dir, e.Name()); diskSession(e.Name()) == id && !slices.Contains(files, p) {
					files = append(files, p)
				}
			}
		}
	}
	// Overlay folders first: one on a quota filesystem is unmounted before
	// that filesystem's loop device is detached and its file deleted.
	slices.SortStableFunc(files, func(a, b string) int {
		return boolRank(strings.HasSuffix(b, overlayExt)) - boolRank(strings.HasSuffix(a, overlayExt))
	})
	return files
}

func boolRank(b bool) int {
	if b {
		return 1
	}
	return 0
}
