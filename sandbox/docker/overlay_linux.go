package docker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// maxID is the highest uid or gid a user namespace maps (4294967295 is
// reserved as "no id").
const maxID = 1<<32 - 2

// idMap is the mapping of an idmapped layer for session user id: the
// image's root shows as id and id as root, every other id as itself. A
// file the image gives the session user (id) would show as root's: the
// fix pass hands it back.
func idMap(id int) []syscall.SysProcIDMap {
	if id == 0 {
		return []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: maxID + 1}}
	}
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: id, Size: 1}, {ContainerID: id, HostID: 0, Size: 1}}
	if id > 1 {
		m = append(m, syscall.SysProcIDMap{ContainerID: 1, HostID: 1, Size: id - 1})
	}
	return append(m, syscall.SysProcIDMap{ContainerID: id + 1, HostID: id + 1, Size: maxID - id})
}

// usernsFor returns a user namespace mapped by idMap for uid:gid, made
// once per pair: a short-lived `cat` cloned into a new user namespace
// (the parent writes its maps), whose /proc/<pid>/ns/user stays open. nil
// for 0:0 (no idmapping needed).
func (s *overlaySupport) usernsFor(uid, gid int) (*os.File, error) {
	if uid == 0 && gid == 0 {
		return nil, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.userns[[2]int{uid, gid}]; f != nil {
		return f, nil
	}
	cmd := exec.Command("cat")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: idMap(uid), GidMappings: idMap(gid),
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("making a user namespace for the idmapped layers: %w", err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/ns/user", cmd.Process.Pid))
	_ = stdin.Close()
	_ = cmd.Wait() // cat ends at the end of its input
	if err != nil {
		return nil, fmt.Errorf("making a user namespace for the idmapped layers: %w", err)
	}
	s.userns[[2]int{uid, gid}] = f
	return f, nil
}

// mountOverlayAt mounts at dir/merged an overlay of layers (topmost first),
// each through a read-only, nosuid, nodev idmapped mount for uid:gid, with
// upper and work folders in dir.
func (s *overlaySupport) mountOverlayAt(dir string, layers []string, uid, gid int) error {
	ns, err := s.usernsFor(uid, gid)
	if err != nil {
		return err
	}
	for _, d := range []string{overlayUpper, overlayWork, overlayMerged} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("overlay folder: %w", err)
		}
	}
	lowers := make([]string, 0, len(layers))
	for _, l := range layers {
		fd, err := unix.OpenTree(unix.AT_FDCWD, l, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return fmt.Errorf("cloning the image layer %s: %w", l, err)
		}
		defer unix.Close(fd)
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		if ns != nil {
			attr.Attr_set |= unix.MOUNT_ATTR_IDMAP
			attr.Userns_fd = uint64(ns.Fd())
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr); err != nil {
			return fmt.Errorf("idmapping the image layer %s: %w", l, err)
		}
		// The overlay takes a private clone of each layer as it mounts:
		// the detached mount goes away with its descriptor.
		lowers = append(lowers, "/proc/self/fd/"+strconv.Itoa(fd))
	}
	opts := "lowerdir=" + strings.Join(lowers, ":") +
		",upperdir=" + filepath.Join(dir, overlayUpper) + ",workdir=" + filepath.Join(dir, overlayWork) +
		",redirect_dir=on,metacopy=on,index=on"
	if err := unix.Mount("overlay", filepath.Join(dir, overlayMerged), "overlay", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting the overlay: %w", err)
	}
	return nil
}

// releaseOverlay unmounts a volume's overlay folder (the overlay, then the
// quota filesystem it may be on) and deletes it. Nothing is deleted while
// anything is still mounted under it. Gone already is no error.
func releaseOverlay(dir string) error {
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, m := range []string{filepath.Join(dir, overlayMerged), dir} {
		if err := unix.Unmount(m, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmounting %s: %w", m, err)
		}
	}
	left, err := mountsUnder(dir)
	if err != nil {
		return err
	}
	if len(left) > 0 {
		return fmt.Errorf("%s: still mounted at %v, not deleted", dir, left)
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("deleting %s: %w", dir, err)
	}
	return nil
}

// mountsUnder lists the mount points at or under dir in this process's
// mount namespace.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountinfo(fields[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// probeOverlay decides once whether sessions are seeded by overlay, and
// logs which route they take.
func (r *Runtime) probeOverlay(ctx context.Context, dir string) *overlaySupport {
	s := &overlaySupport{userns: map[[2]int]*os.File{}}
	s.err = r.checkOverlay(ctx, dir, s)
	if s.err != nil {
		r.log.Warn("editable paths are seeded by copying the image's folders (slow for large folders): the overlay route is unavailable", "why", s.err)
	} else {
		r.log.Info("editable paths are seeded by overlay: the image's layers, idmapped, under a per-session upper layer", "dir", dir)
	}
	return s
}

// checkOverlay says why the overlay route cannot be taken here: the
// daemon must be root in the host's mount namespace (its mounts must reach
// the engine), next to a local rootful engine whose storage driver keeps
// image layers as folders a kernel overlay can stack, and the kernel must
// mount an overlay of idmapped layers with metacopy and index (tried in
// dir).
func (r *Runtime) checkOverlay(ctx context.Context, dir string, s *overlaySupport) error {
	switch {
	case r.opts.NoOverlaySeed:
		return errors.New("turned off (NoOverlaySeed)")
	case dir == "":
		return errors.New("no disk directory configured")
	case os.Geteuid() != 0:
		return errors.New("the daemon does not run as root: mounting an overlay needs it")
	case !strings.HasPrefix(r.cli.DaemonHost(), "unix://") || r.opts.CopyAgent:
		return fmt.Errorf("the engine at %s may not be on this host: a mount made here means nothing to it", r.cli.DaemonHost())
	}
	if err := sameMountNS(strings.TrimPrefix(r.cli.DaemonHost(), "unix://")); err != nil {
		return err
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	info, err := r.cli.Info(cctx)
	if err != nil {
		return fmt.Errorf("asking the engine for its storage driver: %w", err)
	}
	if rootless(info) {
		return errors.New("the engine is rootless")
	}
	if !containsString(overlayDrivers, info.Driver) {
		return fmt.Errorf("the engine's storage driver is %s, not one of %v", info.Driver, overlayDrivers)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("disk directory: %w", err)
	}
	return tryOverlay(dir, s)
}

// sameMountNS checks that the process at the other end of the engine's
// socket (the engine, or a proxy before it) sees the mounts this process
// makes: both in one mount namespace.
func sameMountNS(socket string) error {
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		return fmt.Errorf("connecting to the engine's socket: %w", err)
	}
	defer c.Close()
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return errors.New("the engine's socket is not a unix socket")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) { cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED) })
	if err = errors.Join(cerr, err); err != nil {
		return fmt.Errorf("asking who serves the engine's socket: %w", err)
	}
	var self, engine unix.Stat_t
	err1 := unix.Stat("/proc/self/ns/mnt", &self)
	err2 := unix.Stat(fmt.Sprintf("/proc/%d/ns/mnt", cred.Pid), &engine)
	if err := errors.Join(err1, err2); err != nil {
		return fmt.Errorf("comparing the engine's mount namespace with the daemon's: %w", err)
	}
	if self.Dev != engine.Dev || self.Ino != engine.Ino {
		return fmt.Errorf("the engine (pid %d) runs in another mount namespace than the daemon: a mount the daemon makes may not reach it", cred.Pid)
	}
	return nil
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// tryOverlay mounts a small overlay of an idmapped layer in a folder of
// dir, checks that the layer's root-owned setuid file shows as the
// session user's and that a change of its owner keeps its hard link and
// clears the bit, and removes it all again. Leftovers of an earlier probe
// (a daemon killed in the middle) go first.
func tryOverlay(dir string, s *overlaySupport) (err error) {
	if old, _ := filepath.Glob(filepath.Join(dir, ".probe-*")); len(old) > 0 {
		for _, o := range old {
			_ = releaseOverlay(o)
		}
	}
	tmp, err := os.MkdirTemp(dir, ".probe-")
	if err != nil {
		return err
	}
	defer func() {
		if rerr := releaseOverlay(tmp); rerr != nil && err == nil {
			err = rerr
		}
	}()
	layer := filepath.Join(tmp, "layer")
	if err := os.MkdirAll(filepath.Join(layer, "d"), 0o755); err != nil {
		return err
	}
	f := filepath.Join(layer, "d", "f")
	if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
		return err
	}
	if err := os.Chmod(f, 0o4755); err != nil {
		return err
	}
	if err := os.Link(f, filepath.Join(layer, "d", "g")); err != nil {
		return err
	}
	const probeID = 1000
	if err := s.mountOverlayAt(tmp, []string{layer}, probeID, probeID); err != nil {
		return err
	}
	merged := filepath.Join(tmp, overlayMerged, "d")
	var st unix.Stat_t
	if err := unix.Lstat(filepath.Join(merged, "f"), &st); err != nil {
		return err
	}
	if st.Uid != probeID || st.Gid != probeID {
		return fmt.Errorf("the idmapped layer shows its root's file as %d:%d, not %d:%d", st.Uid, st.Gid, probeID, probeID)
	}
	if err := unix.Lchown(filepath.Join(merged, "f"), probeID+1, probeID+1); err != nil {
		return fmt.Errorf("changing an owner in the overlay: %w", err)
	}
	var st2 unix.Stat_t
	if err := unix.Lstat(filepath.Join(merged, "g"), &st2); err != nil {
		return err
	}
	if st2.Uid != probeID+1 || st2.Nlink != 2 || st2.Mode&unix.S_ISUID != 0 {
		return fmt.Errorf("after a change of owner in the overlay the hard link shows %d:%d, %d links, mode %o: want %d, 2 links, no setuid",
			st2.Uid, st2.Gid, st2.Nlink, st2.Mode, probeID+1)
	}
	return nil
}

// mountOverlay makes the overlay of session volume v at
// <dir>/<volume>.overlay: on the volume's quota filesystem when it has one
// (made by makeDisks, mounted there), over layers for uid:gid; and opens
// the folder at v.target inside it (made if the image lacks it). The fix
// pass over it is the returned fixer's (pass); its host path, to bind at
// v.target, is its host.
func (r *Runtime) mountOverlay(ctx context.Context, v vol, layers []string, uid, gid int, quota bool) (*overlayFixer, error) {
	dir := overlayFolder(r.quota.dir, v.name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("seeding the %s: %w", v.what, err)
	}
	if quota {
		devs, err := loopsOf(diskFile(r.quota.dir, v.name))
		if err != nil || len(devs) == 0 {
			return nil, fmt.Errorf("seeding the %s: no loop device for its disk: %v", v.what, err)
		}
		if err := unix.Mount(devs[0], dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOATIME, "discard"); err != nil {
			return nil, fmt.Errorf("seeding the %s: mounting its disk: %w", v.what, err)
		}
	}
	if err := r.quota.overlay.mountOverlayAt(dir, layers, uid, gid); err != nil {
		return nil, fmt.Errorf("seeding the %s: %w", v.what, err)
	}
	fx := &overlayFixer{uid: uid, gid: gid, layers: layers, merged: filepath.Join(dir, overlayMerged), what: v.what}
	if err := fx.open(v); err != nil {
		return nil, err
	}
	return fx, nil
}

// openIn opens rel (relative, clean) under the folder root as the image
// would resolve it: symbolic links followed inside root, never out of it.
func openIn(root int, rel string, flags uint64) (int, error) {
	return unix.Openat2(root, rel, &unix.OpenHow{
		Flags:   flags | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV,
	})
}

// openTarget opens the folder at target in the overlay at root: its
// parents resolved inside the image (a link followed as the engine follows
// it), the folder itself never a link. A folder the image lacks is made
// with its missing parents, 0755, owned by uid:gid. It returns the folder
// and its host path.
func openTarget(root int, rootPath string, v vol, uid, gid int) (*os.File, string, error) {
	rel := strings.TrimPrefix(path.Clean(v.target), "/")
	parts := strings.Split(rel, "/")
	pfd, err := unix.Dup(root)
	if err != nil {
		return nil, "", err
	}
	for i, name := range parts {
		var st unix.Stat_t
		err := unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		switch {
		case errors.Is(err, unix.ENOENT):
			if err := unix.Mkdirat(pfd, name, 0o755); err != nil {
				unix.Close(pfd)
				return nil, "", err
			}
			if err := unix.Fchownat(pfd, name, uid, gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				unix.Close(pfd)
				return nil, "", err
			}
		case err != nil:
			unix.Close(pfd)
			return nil, "", err
		case st.Mode&unix.S_IFMT == unix.S_IFLNK && i == len(parts)-1:
			to, _ := readlinkat(pfd, name)
			unix.Close(pfd)
			return nil, "", seedProblem(v, fmt.Sprintf("%s is a symbolic link in the image (to %q): name the folder it points to", v.target, to))
		case st.Mode&unix.S_IFMT == unix.S_IFLNK && strings.HasPrefix(v.what, "editable"):
			// As checkEditablePaths says it: the engine would put the
			// mount where the link points.
			to, _ := readlinkat(pfd, name)
			unix.Close(pfd)
			return nil, "", editableProblem("%s is a symbolic link in the image (to %q), so %s is not where it says: name the path without links",
				"/"+strings.Join(parts[:i+1], "/"), to, v.target)
		case st.Mode&unix.S_IFMT != unix.S_IFLNK && st.Mode&unix.S_IFMT != unix.S_IFDIR:
			unix.Close(pfd)
			return nil, "", seedProblem(v, fmt.Sprintf("%s is not a folder in the image", "/"+strings.Join(parts[:i+1], "/")))
		}
		unix.Close(pfd)
		// Resolve the prefix again from the root: a link in it is
		// followed inside the image, as in the container.
		pfd, err = openIn(root, strings.Join(parts[:i+1], "/"), unix.O_PATH|unix.O_DIRECTORY)
		if err != nil {
			return nil, "", fmt.Errorf("opening %s in the overlay: %w", "/"+strings.Join(parts[:i+1], "/"), err)
		}
	}
	fd, err := unix.Openat(pfd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	unix.Close(pfd)
	if err != nil {
		return nil, "", err
	}
	host, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !strings.HasPrefix(host, rootPath+"/") {
		unix.Close(fd)
		return nil, "", fmt.Errorf("the overlay's %s resolves to %q, outside %s (%v)", v.target, host, rootPath, err)
	}
	return os.NewFile(uintptr(fd), host), host, nil
}

func readlinkat(dirfd int, name string) (string, error) {
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
