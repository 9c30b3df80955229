package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// overlayFixWorkers bounds the folders the fix pass reads at once.
const overlayFixWorkers = 4

// AUFS-style deletion markers, as fuse-overlayfs leaves them in layers.
const (
	whPrefix = ".wh."
	whOpaque = ".wh..wh..opq"
)

// overlayFixer is the fix pass over an overlay's folder (overlay.go): it
// makes every entry what the copy would (seed.go, ownEntry) where the
// idmapped layers do not already: owned by uid:gid, no setuid or setgid bit
// on a file, no file capabilities, no device files. It also applies the
// deletions a fuse-overlayfs layer marks AUFS-style, which a kernel overlay
// shows as plain files. Each change is a metadata copy-up.
type overlayFixer struct {
	uid, gid int
	layers   []string // the image's layer folders, topmost first
	merged   string   // the overlay's mount point
	what     string   // for messages: "editable path /testbed"
	dir      *os.File // the folder (open)
	host     string   // its host path
	lfds     []int    // the layers, opened

	sem     chan struct{}
	wg      sync.WaitGroup
	mu      sync.Mutex
	err     error
	markers [][2]string // AUFS markers met: folder (relative to merged), name
	entries atomic.Int64
	fixed   atomic.Int64
}

// open opens v's folder in the overlay (openTarget) and the image's
// layers, for pass, which closes them.
func (fx *overlayFixer) open(v vol) error {
	root, err := unix.Open(fx.merged, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("seeding the %s: %w", v.what, err)
	}
	defer unix.Close(root)
	if fx.dir, fx.host, err = openTarget(root, fx.merged, v, fx.uid, fx.gid); err != nil {
		return err
	}
	for _, l := range fx.layers {
		fd, err := unix.Open(l, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			fx.close()
			return fmt.Errorf("seeding the %s: opening the image layer %s: %w", v.what, l, err)
		}
		fx.lfds = append(fx.lfds, fd)
	}
	return nil
}

func (fx *overlayFixer) close() {
	if fx.dir != nil {
		fx.dir.Close()
	}
	for _, fd := range fx.lfds {
		unix.Close(fd)
	}
	fx.dir, fx.lfds = nil, nil
}

// pass fixes the folder open opened, and closes it.
func (fx *overlayFixer) pass(ctx context.Context) error {
	defer fx.close()
	if err := fx.passErr(ctx); err != nil {
		return fmt.Errorf("seeding the %s: %w", fx.what, err)
	}
	return nil
}

func (fx *overlayFixer) passErr(ctx context.Context) error {
	rel := strings.TrimPrefix(fx.host, fx.merged+"/")
	if k := fx.hiddenFrom(rel); k >= 0 {
		if err := fx.hideBelow(rel, k); err != nil {
			return err
		}
	}
	fx.sem = make(chan struct{}, overlayFixWorkers)
	sub, err := unix.Dup(int(fx.dir.Fd()))
	if err != nil {
		return err
	}
	fx.wg.Add(1)
	fx.walk(ctx, sub, rel)
	fx.wg.Wait()
	if err := fx.failed(); err != nil {
		return err
	}
	if err := fx.applyMarkers(); err != nil {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(fx.dir.Fd()), &st); err != nil {
		return err
	}
	if int(st.Uid) != fx.uid || int(st.Gid) != fx.gid {
		return unix.Fchown(int(fx.dir.Fd()), fx.uid, fx.gid)
	}
	return nil
}

func (fx *overlayFixer) fail(err error) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	if fx.err == nil {
		fx.err = err
	}
}

func (fx *overlayFixer) failed() error {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return fx.err
}

// walk fixes the entries of the folder dirfd (rel to merged), which it
// closes, and descends into its folders, on another goroutine while one
// is free.
func (fx *overlayFixer) walk(ctx context.Context, dirfd int, rel string) {
	defer fx.wg.Done()
	f := os.NewFile(uintptr(dirfd), rel)
	defer f.Close()
	if fx.failed() != nil {
		return
	}
	if err := ctx.Err(); err != nil {
		fx.fail(err)
		return
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		fx.fail(fmt.Errorf("reading %s: %w", rel, err))
		return
	}
	for _, name := range names {
		child, err := fx.fixEntry(dirfd, rel, name)
		if err != nil {
			fx.fail(fmt.Errorf("%s/%s: %w", rel, name, err))
			return
		}
		if child < 0 {
			continue
		}
		fx.wg.Add(1)
		select {
		case fx.sem <- struct{}{}:
			go func() {
				defer func() { <-fx.sem }()
				fx.walk(ctx, child, rel+"/"+name)
			}()
		default:
			fx.walk(ctx, child, rel+"/"+name)
		}
	}
}

// fixEntry fixes one entry of the folder dirfd and returns it opened when
// it is a folder to walk (else -1).
func (fx *overlayFixer) fixEntry(dirfd int, rel, name string) (int, error) {
	if strings.HasPrefix(name, whPrefix) {
		fx.mu.Lock()
		fx.markers = append(fx.markers, [2]string{rel, name})
		fx.mu.Unlock()
		return -1, nil
	}
	fx.entries.Add(1)
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return -1, err
	}
	typ := st.Mode & unix.S_IFMT
	if typ == unix.S_IFCHR || typ == unix.S_IFBLK {
		fx.fixed.Add(1)
		return -1, unix.Unlinkat(dirfd, name, 0)
	}
	chowned := false
	if int(st.Uid) != fx.uid || int(st.Gid) != fx.gid {
		if err := unix.Fchownat(dirfd, name, fx.uid, fx.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return -1, err
		}
		chowned = true
		fx.fixed.Add(1)
	}
	switch typ {
	case unix.S_IFREG:
		if st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0 {
			// A change of owner clears setuid, and setgid only with group
			// execute: clear both whatever happened.
			if err := unix.Fchmodat(dirfd, name, st.Mode&0o1777, 0); err != nil {
				return -1, err
			}
			fx.fixed.Add(1)
		}
		if !chowned { // a change of owner drops file capabilities
			p := "/proc/self/fd/" + strconv.Itoa(dirfd) + "/" + name
			if _, err := unix.Lgetxattr(p, "security.capability", nil); err == nil {
				if err := unix.Lremovexattr(p, "security.capability"); err != nil && !errors.Is(err, unix.ENODATA) {
					return -1, err
				}
				fx.fixed.Add(1)
			}
		}
	case unix.S_IFDIR:
		return unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	return -1, nil
}

// inLayer reports whether layer i has rel (relative to its root), its
// parents real folders.
func (fx *overlayFixer) inLayer(i int, rel string) bool {
	fd, err := unix.Openat2(fx.lfds[i], rel, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// provider is the topmost layer that has rel; -1 if none does (made in
// the upper layer).
func (fx *overlayFixer) provider(rel string) int {
	for i := range fx.lfds {
		if fx.inLayer(i, rel) {
			return i
		}
	}
	return -1
}

// hiddenFrom is the topmost layer whose AUFS marker deletes rel or one of
// its parents, or makes one of its parents opaque; -1 if none does. The
// layers below it must not show through at rel.
func (fx *overlayFixer) hiddenFrom(rel string) int {
	parts := strings.Split(rel, "/")
	for i := range fx.lfds {
		dir := ""
		for _, name := range parts {
			if fx.inLayer(i, filepath.Join(dir, whPrefix+name)) || (dir != "" && fx.inLayer(i, filepath.Join(dir, whOpaque))) {
				return i
			}
			dir = filepath.Join(dir, name)
		}
	}
	return -1
}

// hideBelow removes from the overlay's folder rel everything that only
// layers below layer k give it: k marked the folder opaque, or deleted it
// before a layer above made it again.
func (fx *overlayFixer) hideBelow(rel string, k int) error {
	f, err := os.Open(filepath.Join(fx.merged, rel))
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, name := range names {
		if strings.HasPrefix(name, whPrefix) {
			continue
		}
		r := filepath.Join(rel, name)
		switch p := fx.provider(r); {
		case p < 0:
		case p > k:
			if err := os.RemoveAll(filepath.Join(fx.merged, r)); err != nil {
				return err
			}
		default:
			fi, err := os.Lstat(filepath.Join(fx.merged, r))
			if err == nil && fi.IsDir() && fx.belowHas(r, k) {
				if err := fx.hideBelow(r, k); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// belowHas reports whether a layer below k has rel.
func (fx *overlayFixer) belowHas(rel string, k int) bool {
	for i := k + 1; i < len(fx.lfds); i++ {
		if fx.inLayer(i, rel) {
			return true
		}
	}
	return false
}

// applyMarkers applies the AUFS markers the walk met (fuse-overlayfs
// layers): a deleted entry that a lower layer still shows is removed, an
// opaque folder loses what lower layers give it, and the markers go.
func (fx *overlayFixer) applyMarkers() error {
	for _, m := range fx.markers {
		rel, name := m[0], m[1]
		k := fx.provider(filepath.Join(rel, name))
		if k >= 0 {
			if name == whOpaque {
				if err := fx.hideBelow(rel, k); err != nil {
					return err
				}
			} else {
				target := filepath.Join(rel, strings.TrimPrefix(name, whPrefix))
				switch p := fx.provider(target); {
				case p > k:
					if err := os.RemoveAll(filepath.Join(fx.merged, target)); err != nil {
						return err
					}
				case p >= 0:
					fi, err := os.Lstat(filepath.Join(fx.merged, target))
					if err == nil && fi.IsDir() && fx.belowHas(target, k) {
						if err := fx.hideBelow(target, k); err != nil {
							return err
						}
					}
				}
			}
		}
		if err := os.Remove(filepath.Join(fx.merged, rel, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}
