package docker

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"sync"
	"syscall"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/google/uuid"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Bounds of one skill folder copied into a volume (copy mode): a skill is
// instructions and scripts, not a dataset.
const (
	maxSkillFiles = 10_000
	maxSkillBytes = 256 << 20
)

// skillVolumes remembers the skill volumes filled by this runtime (copy
// mode), by volume name.
type skillVolumes struct {
	mu     sync.Mutex
	filled map[string]bool
}

// skillMounts show the session's selected skills read-only at
// SkillsDir/<path>. On a local engine they are binds of the daemon's
// folders (the operator's, or the built-ins the daemon extracted; never a
// client's). In copy mode (a remote engine cannot bind this host's paths)
// each folder is a read-only volume named by its content, filled once.
//
// Each folder is checked now, under its skill root (skillDir): a link or
// a file where a folder was is refused. In bind mode the folders stay
// open and the caller checks them again before and after the container
// starts (the engine resolves a bind's source then), and closes them.
func (r *Runtime) skillMounts(ctx context.Context, image string, skills []sandbox.SkillMount) (_ []mount.Mount, _ skillDirs, err error) {
	ms := make([]mount.Mount, 0, len(skills))
	dirs := make(skillDirs, 0, len(skills))
	defer func() {
		if err != nil || r.opts.CopyAgent {
			dirs.close()
		}
	}()
	for _, s := range skills {
		d, err := openSkillDir(s)
		if err != nil {
			r.log.Warn("skill refused at create", "skill", s.Path, "folder", s.Source, "err", err)
			return nil, nil, err
		}
		dirs = append(dirs, d)
		target := path.Join(sandbox.SkillsDir, s.Path)
		if !r.opts.CopyAgent {
			ms = append(ms, mount.Mount{
				Type: mount.TypeBind, Source: filepath.Join(d.root, filepath.FromSlash(s.Path)), Target: target, ReadOnly: true,
				BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
			})
			continue
		}
		vol, err := r.ensureSkillVolume(ctx, image, d)
		if err != nil {
			return nil, nil, fmt.Errorf("skill %s: %w", s.Path, err)
		}
		ms = append(ms, mount.Mount{
			Type: mount.TypeVolume, Source: vol, Target: target, ReadOnly: true,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true},
		})
	}
	if r.opts.CopyAgent { // the volumes hold copies; no path is bound
		return ms, nil, nil
	}
	return ms, dirs, nil
}

// skillFile is one entry of a skill folder, as it goes into the volume.
type skillFile struct {
	rel  string // slash path relative to the folder
	dir  bool
	exec bool
	size int64
}

// scanSkill lists a skill folder (regular files and folders only: a
// symlink or device is skipped) and hashes its content, paths and modes.
func scanSkill(root *os.Root) ([]skillFile, string, error) {
	var files []skillFile
	var total int64
	h := sha256.New()
	err := fs.WalkDir(root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == "." {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			files = append(files, skillFile{rel: p, dir: true})
		case info.Mode().IsRegular():
			files = append(files, skillFile{rel: p, exec: info.Mode().Perm()&0o111 != 0, size: info.Size()})
			total += info.Size()
		default:
			return nil
		}
		if len(files) > maxSkillFiles || total > maxSkillBytes {
			return fmt.Errorf("more than %d files or %d MiB", maxSkillFiles, maxSkillBytes>>20)
		}
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	sort.Slice(files, func(i, j int) bool { return files[i].rel < files[j].rel })
	for _, f := range files {
		fmt.Fprintf(h, "%s\x00%t\x00%t\x00%d\x00", f.rel, f.dir, f.exec, f.size)
		if f.dir {
			continue
		}
		if err := hashFile(h, root, f.rel); err != nil {
			return nil, "", err
		}
	}
	return files, hex.EncodeToString(h.Sum(nil)), nil
}

func hashFile(w io.Writer, root *os.Root, rel string) error {
	f, err := openRegular(root, rel)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// openRegular opens the regular file rel of root, without blocking: a FIFO
// swapped in since the scan is refused, not waited on.
func openRegular(root *os.Root, rel string) (*os.File, error) {
	f, err := root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		_ = f.Close()
		return nil, fmt.Errorf("%s: not a regular file any more", rel)
	}
	return f, nil
}

// ensureSkillVolume fills (once) the read-only volume of a skill folder's
// content, as ensureAgentVolume does for the agent binary. It reads the
// checked folder through its open root, never by path.
func (r *Runtime) ensureSkillVolume(ctx context.Context, image string, d *skillDir) (string, error) {
	dir := d.mount.Source
	files, sum, err := scanSkill(d.dir)
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", dir, err)
	}
	vol := "sandboxd-skill-" + sum[:16]
	r.skillVols.mu.Lock()
	defer r.skillVols.mu.Unlock()
	if r.skillVols.filled[vol] {
		return vol, nil
	}
	labels := r.labels(map[string]string{sandbox.LabelManaged: "true", LabelAgent: "skill:" + sum})
	cctx, cancel := r.call(ctx)
	defer cancel()
	if _, err := r.cli.VolumeCreate(cctx, volume.CreateOptions{Name: vol, Labels: labels}); err != nil {
		return "", fmt.Errorf("creating skill volume %s: %w", vol, err)
	}
	const target = "/skill"
	helper := "sandboxd-skillcopy-" + uuid.NewString()[:8]
	created, err := r.cli.ContainerCreate(cctx, &container.Config{
		Image: image, Entrypoint: []string{"/nonexistent"}, Labels: labels, User: "65534:65534",
	}, &container.HostConfig{
		NetworkMode: "none",
		Mounts:      []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: target, VolumeOptions: &mount.VolumeOptions{NoCopy: true}}},
	}, nil, nil, helper)
	if err != nil {
		return "", fmt.Errorf("creating skill copy helper: %w", err)
	}
	defer func() {
		rctx, cancel := r.call(context.WithoutCancel(ctx))
		defer cancel()
		if err := r.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true}); err != nil {
			r.log.Warn("removing skill copy helper", "container", helper, "err", err)
		}
	}()
	// A filled volume holds .sandboxd-skill, written last.
	if _, err := r.cli.ContainerStatPath(cctx, created.ID, path.Join(target, ".sandboxd-skill")); err == nil {
		r.markSkillVolume(vol)
		return vol, nil
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeSkillTar(pw, d.dir, files)) }()
	err = r.cli.CopyToContainer(cctx, created.ID, target, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(err)
	if err != nil {
		return "", fmt.Errorf("copying %s into volume %s: %w", dir, vol, err)
	}
	r.markSkillVolume(vol)
	r.log.Info("skill copied into volume", "volume", vol, "from", dir, "files", len(files))
	return vol, nil
}

func (r *Runtime) markSkillVolume(vol string) {
	if r.skillVols.filled == nil {
		r.skillVols.filled = map[string]bool{}
	}
	r.skillVols.filled[vol] = true
}

// writeSkillTar writes a skill folder as a tar of root-owned, read-only
// entries (executables keep their execute bits), then the marker.
func writeSkillTar(w io.Writer, root *os.Root, files []skillFile) error {
	tw := tar.NewWriter(w)
	for _, f := range files {
		hdr := &tar.Header{Name: f.rel, Mode: 0o444, Typeflag: tar.TypeReg, Size: f.size}
		switch {
		case f.dir:
			hdr = &tar.Header{Name: f.rel + "/", Mode: 0o555, Typeflag: tar.TypeDir}
		case f.exec:
			hdr.Mode = 0o555
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if f.dir {
			continue
		}
		if err := copySkillFile(tw, root, f); err != nil {
			return err
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: ".sandboxd-skill", Mode: 0o444, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	return tw.Close()
}

func copySkillFile(w io.Writer, root *os.Root, f skillFile) error {
	rf, err := openRegular(root, filepath.FromSlash(f.rel))
	if err != nil {
		return err
	}
	defer rf.Close()
	_, err = io.CopyN(w, rf, f.size) // a file that changed size since the scan fails the copy
	return err
}
