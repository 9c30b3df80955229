package docker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/storage"
)

// Seeding by overlay (decision 0040): an editable path or HOME that
// sandboxd would otherwise copy out of the image (seed.go) is, where the
// host allows it, a kernel overlayfs mounted by the daemon for the session:
//
//   - lowerdir: the image's own layers as the engine keeps them (the
//     GraphDriver's UpperDir and LowerDir of an overlay2 or fuse-overlayfs
//     engine), each through an idmapped mount that shows the image's root
//     as the session user (and the session user as root, every other id
//     as itself), read-only, nosuid, nodev;
//   - upperdir and workdir: in <DiskDir>/<scope>/<volume>.overlay, on the
//     volume's own ext4 filesystem with a disk quota (quota.go, mounted
//     there by the daemon) or on the host's disk without one;
//   - metacopy=on and index=on: a change of owner or mode copies an
//     entry's metadata only, and hard links stay linked when a write
//     copies one up.
//
// The session's container bind-mounts the overlay's folder at the path.
// Nothing of the image is read or written to start a session: what the
// session writes lands in the upper layer, and only that is its disk. A
// pass over the folder (overlayFix) then does what the copy does to each
// entry where the idmapping does not: an owner other than the image's root
// is changed to the session user's, setuid and setgid bits of files are
// cleared, file capabilities dropped and device files removed (each a
// metadata copy-up; an image's folder usually needs none).
//
// Everything of it is named after the session's volume, so Remove and the
// reclaim of a restarted daemon find it as they find a disk's backing file
// (sessionDisks, listDisks): the folder is unmounted (overlay first, then
// its quota filesystem) and deleted. An adopted session keeps its mounts:
// they live in the host's mount namespace, not in the daemon.

// overlayExt is the suffix of a volume's overlay folder in the disk
// directory.
const overlayExt = ".overlay"

// Layout of an overlay folder.
const (
	overlayUpper  = "upper"
	overlayWork   = "work"
	overlayMerged = "merged"
)

// overlayDrivers are the engine storage drivers whose image layers a kernel
// overlayfs can stack: overlay2's are the kernel's format; fuse-overlayfs
// writes the same, except that it marks deletions AUFS-style (.wh.<name>
// files, .wh..wh..opq), which overlayFix applies itself.
var overlayDrivers = []string{"overlay2", "fuse-overlayfs"}

// overlaySupport is the runtime's overlay seeding, decided once by New.
type overlaySupport struct {
	err error // why sessions fall back to the copy (seed.go); nil: the overlay route is on
	// userns holds, per session uid:gid, a user namespace whose mapping
	// the idmapped layers use (an open /proc/<pid>/ns/user keeps it alive
	// after its process is gone).
	mu     sync.Mutex
	userns map[[2]int]*os.File
}

// overlayOn says whether sessions are seeded by overlay.
func (q quota) overlayOn() bool { return q.overlay != nil && q.overlay.err == nil }

// OverlaySeeding reports whether editable paths and HOME are seeded by a
// per-session overlay of the image's layers (decision 0040): nil if they
// are, else why they are copied (seed.go).
func (r *Runtime) OverlaySeeding() error {
	if r.quota.overlay == nil {
		return errors.New("not probed")
	}
	return r.quota.overlay.err
}

// overlayLayers returns the image's layer folders, topmost first, when the
// overlay route can stack them; nil otherwise (the session is then seeded
// by the copy). Each must be an absolute, clean path to a folder on this
// host: the GraphDriver data of an overlay2 or fuse-overlayfs engine.
func overlayLayers(gd storage.DriverData) []string {
	if !slices.Contains(overlayDrivers, gd.Name) {
		return nil
	}
	upper := gd.Data["UpperDir"]
	if upper == "" {
		return nil
	}
	layers := []string{upper}
	if lower := gd.Data["LowerDir"]; lower != "" {
		layers = append(layers, strings.Split(lower, ":")...)
	}
	for _, l := range layers {
		if !filepath.IsAbs(l) || filepath.Clean(l) != l {
			return nil
		}
		if fi, err := os.Lstat(l); err != nil || !fi.IsDir() {
			return nil
		}
	}
	return layers
}

// overlayFolder is the overlay folder of a session's volume in dir.
func overlayFolder(dir, volume string) string { return filepath.Join(dir, volume+overlayExt) }

// mountOverlays seeds the session's volumes that layout.go gave the
// overlay route (seedOverlay), at once, and sets their bind sources in l
// (whose vols the container's mounts are made from); it hands over the
// roots of the empty ones (rootOnly). The overlays are mounted when it
// returns; their fix passes run on, and fixed waits for them (call it
// before the container starts; again is no harm). On error the caller's
// rollback (Remove) releases what was made: every folder is named after
// its volume.
func (r *Runtime) mountOverlays(ctx context.Context, id string, l layout, img imageFacts, quota bool) (fixed func() error, err error) {
	start := time.Now()
	mounted := make([]*overlayFixer, len(l.vols))
	errs := make([]error, len(l.vols))
	var wg sync.WaitGroup
	for i, v := range l.vols {
		switch {
		case v.rootOnly:
			wg.Go(func() { errs[i] = r.handOverRoot(ctx, v, l.uid, l.gid, quota) })
		case v.seed == seedOverlay:
			wg.Go(func() {
				fx, err := r.mountOverlay(ctx, v, img.layers, l.uid, l.gid, quota)
				if err != nil {
					errs[i] = err
					return
				}
				l.vols[i].bind = fx.host
				mounted[i] = fx
			})
		}
	}
	wg.Wait()
	// The passes start even when a mount failed, so that each one that was
	// opened is also closed; the error is the start's either way.
	var passes sync.WaitGroup
	perr := make([]error, len(l.vols))
	for i, fx := range mounted {
		if fx != nil {
			passes.Go(func() { perr[i] = fx.pass(ctx) })
		}
	}
	var once sync.Once
	var result error
	fixed = func() error {
		once.Do(func() {
			passes.Wait()
			result = errors.Join(perr...)
			if result == nil && len(mounted) > 0 {
				var entries, changed int64
				for _, fx := range mounted {
					if fx != nil {
						entries += fx.entries.Load()
						changed += fx.fixed.Load()
					}
				}
				r.log.Debug("volumes seeded by overlay of the image's layers", "session", id, "entries", entries, "changed", changed,
					"user", fmt.Sprintf("%d:%d", l.uid, l.gid), "took", time.Since(start).Round(time.Millisecond))
			}
		})
		return result
	}
	if err := errors.Join(errs...); err != nil {
		_ = fixed()
		return nil, err
	}
	return fixed, nil
}

// emptyInLayers reports whether the image's folder rel (one name, at the
// root) is empty in every layer that has it, or in none, and nowhere
// anything but a folder or deleted AUFS-style; mode is the topmost
// layer's (0755 when none has it). Such a folder needs no copy: a volume
// at its path only needs its root handed to the session user.
func emptyInLayers(layers []string, rel string) (mode os.FileMode, ok bool) {
	mode = 0o755
	found := false
	for _, l := range layers {
		if _, err := os.Lstat(filepath.Join(l, whPrefix+rel)); err == nil {
			return 0, false
		}
		fi, err := os.Lstat(filepath.Join(l, rel))
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil, !fi.IsDir():
			return 0, false
		}
		f, err := os.Open(filepath.Join(l, rel))
		if err != nil {
			return 0, false
		}
		names, _ := f.Readdirnames(1)
		f.Close()
		if len(names) > 0 {
			return 0, false
		}
		if !found {
			mode, found = fi.Mode().Perm()|fi.Mode()&(os.ModeSetgid|os.ModeSticky), true
		}
	}
	return mode, true
}

// handOverRoot gives the root of v, an engine volume the image has
// nothing to copy into (vol.rootOnly), to uid:gid with mode, on the host:
// a plain local volume's folder is the engine's, at its mount point; a
// quota-bound one was made the session user's, 0755, by mkfs.
func (r *Runtime) handOverRoot(ctx context.Context, v vol, uid, gid int, quota bool) error {
	if quota {
		return nil // planLayout makes it rootOnly only when 0755 is right
	}
	cctx, cancel := r.call(ctx)
	defer cancel()
	info, err := r.cli.VolumeInspect(cctx, v.name)
	if err != nil {
		return fmt.Errorf("seeding the %s: %w", v.what, err)
	}
	fi, err := os.Lstat(info.Mountpoint)
	if err != nil || !fi.IsDir() || !filepath.IsAbs(info.Mountpoint) {
		return fmt.Errorf("seeding the %s: the volume's folder %q is not a folder on this host (%v)", v.what, info.Mountpoint, err)
	}
	if err := os.Lchown(info.Mountpoint, uid, gid); err != nil {
		return fmt.Errorf("seeding the %s: %w", v.what, err)
	}
	if err := os.Chmod(info.Mountpoint, v.rootMode); err != nil {
		return fmt.Errorf("seeding the %s: %w", v.what, err)
	}
	return nil
}
