package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandboxd/sandboxd/sandbox"
)

// LabelHelper marks a short-lived helper container of a session (value: what
// it is for). It carries the session's labels too, so a crash in the middle
// leaves nothing that Remove and the manager's reclaim do not find.
const LabelHelper = "sandboxd.helper"

func helperName(id string) string { return "sandboxd-" + id + "-chown" }

// fixOwnership hands the roots of the session's volumes at l.fix to the
// session user, keeping their mode, before the session's container exists.
//
// No process runs for it, in the image or anywhere else. A helper container
// of the session's image is created with the volumes at their mount points
// and never started: creating it makes the engine seed each new volume with
// the image's folder (content, owner, mode), as it would for the session's
// container. The engine then extracts, as part of CopyToContainer, a tar
// holding one directory entry per mount point with the session's uid:gid and
// the mode read back with ContainerStatPath; extracting a directory over an
// existing one applies the entry's owner, mode and time to it and leaves its
// content alone. The helper is removed; the session's container mounts the
// volumes with NoCopy, so the engine does not copy the image's owner over
// the fixed one again (it does that for every container that mounts an
// empty volume). Only the roots change: files the image put in them keep
// their owners.
func (r *Runtime) fixOwnership(ctx context.Context, id string, l layout, img imageFacts, o sandbox.SessionOptions, labels map[string]string) (err error) {
	start := time.Now()
	uid, gid, err := sandbox.ParseUser(o.User)
	if err != nil {
		return fmt.Errorf("user: %w", err)
	}
	hl := maps.Clone(labels)
	hl[LabelHelper] = "chown"
	mounts := make([]mount.Mount, 0, len(l.fix))
	for _, target := range l.fix {
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: volumeAt(id, target, l), Target: target})
	}
	// Not cancelled with ctx: an engine finishes a create whose caller gave
	// up, and a helper made behind our back would hold the volumes (and
	// re-create them, unlabelled, if the rollback removed them first).
	nctx, ncancel := r.call(context.WithoutCancel(ctx))
	defer ncancel()
	created, err := r.cli.ContainerCreate(nctx, &container.Config{
		Image:      img.id,
		Entrypoint: []string{sandbox.AgentPath}, // never started; an image may have no command
		WorkingDir: "/",                         // a missing WORKDIR is made root-owned, and seeding copies that
		Labels:     hl,
	}, &container.HostConfig{
		NetworkMode: "none",
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges:true"},
		LogConfig:   container.LogConfig{Type: "none"},
		Mounts:      mounts,
	}, nil, nil, helperName(id))
	if err != nil {
		return fmt.Errorf("ownership fix: creating helper container: %w", err)
	}
	defer func() {
		rctx, cancel := r.call(context.WithoutCancel(ctx))
		defer cancel()
		rerr := r.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true})
		if rerr != nil && !isNotFound(rerr) && err == nil {
			// A helper left next to the session's container would confuse
			// the reclaim of a restarted daemon; fail the start instead.
			err = fmt.Errorf("ownership fix: removing helper container: %w", rerr)
		}
	}()

	cctx, cancel := r.call(ctx)
	defer cancel()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, target := range l.fix {
		st, err := r.statDir(cctx, created.ID, target)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: strings.TrimPrefix(target, "/") + "/",
			Mode: tarMode(st.Mode), Uid: uid, Gid: gid, ModTime: st.Mtime,
		}); err != nil {
			return fmt.Errorf("ownership fix: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("ownership fix: %w", err)
	}
	if err := r.cli.CopyToContainer(cctx, created.ID, "/", &buf, container.CopyToContainerOptions{}); err != nil {
		return fmt.Errorf("ownership fix: handing %v to %d:%d: %w", l.fix, uid, gid, err)
	}
	r.log.Debug("volume roots handed to the session user", "session", id, "paths", l.fix,
		"user", o.User, "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// statDir stats a volume's mount point in the helper (the engine has made
// it a directory, whatever the image had there).
func (r *Runtime) statDir(ctx context.Context, ctr, p string) (container.PathStat, error) {
	st, err := r.cli.ContainerStatPath(ctx, ctr, p)
	if err != nil {
		return st, fmt.Errorf("ownership fix: stat %s: %w", p, err)
	}
	if !st.Mode.IsDir() {
		return st, fmt.Errorf("ownership fix: %s is not a directory in the helper (%v)", p, st.Mode)
	}
	return st, nil
}

// tarMode is the tar header mode of a directory's fs.FileMode.
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
