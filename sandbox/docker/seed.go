package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Seeding volumes with the image's content, owned by the session user
// (layout.go decides which volumes, decision 0028), by copying: the route
// of every volume where the overlay of the image's layers (overlay.go,
// decision 0040) cannot be taken, and of a workspace with content.
//
// No process runs for it, in the image or anywhere else, and no capability
// is granted to anything. A helper container of the session's image is
// created and never started, with the volumes to seed mounted under
// seedDir (without the engine's copy-up). For each volume, the engine
// archives the image's folder from the helper (whose rootfs has the
// image's content at the volume's path) and sandboxd rewrites the entries
// (every one owned by the session user; no device files, no setuid or
// setgid bits, no file capabilities). A large folder streams on into the
// session's container, created but not started, whose mount of the volume
// makes the write land in the volume: the stream runs between two
// containers because the engine locks a container for the whole of an
// archive read. The small ones (HOME, an empty workspace) are kept in
// memory and written with one last tar into the helper under seedDir/<i>,
// with a directory entry per volume that hands its root to the session
// user with the mode of the image's folder (a folder the image lacks gets
// 0755). The helper is then removed; the session's container mounts the
// volumes with NoCopy, so the engine does not copy the image's owners back
// over them. The engine's own copy-up of the same folder costs about the
// same (decision 0028 has the figures).

// LabelHelper marks a short-lived helper container of a session (value: what
// it is for). It carries the session's labels too, so a crash in the middle
// leaves nothing that Remove and the manager's reclaim do not find.
const LabelHelper = "sandboxd.helper"

// seedDir is where the seeding helper mounts the volumes it hands over.
const seedDir = "/.sandboxd-seed"

// seedTimeout bounds the seeding of a session's volumes (a repository of
// 10,000 files takes seconds; the engine's own copy-up of it as long).
const seedTimeout = 10 * time.Minute

// maxUserDBBytes bounds the image's /etc/passwd or /etc/group read to
// resolve its USER.
const maxUserDBBytes = 4 << 20

func helperName(id, what string) string { return "sandboxd-" + id + "-" + what }

// seedMount is the helper's mount point of the i-th volume it seeds.
func seedMount(i int) string { return seedDir + "/" + strconv.Itoa(i) }

// createHelper creates (never starts) a helper container of the image for
// session id with mounts, labelled as the session's with LabelHelper=what.
// remove removes it; an error of the removal is the start's (a helper left
// next to the session's container would confuse the reclaim of a
// restarted daemon).
func (r *Runtime) createHelper(ctx context.Context, id, what string, img imageFacts, mounts []mount.Mount, labels map[string]string) (ctr string, remove func() error, err error) {
	hl := maps.Clone(labels)
	hl[LabelHelper] = what
	// Not cancelled with ctx: an engine finishes a create whose caller gave
	// up, and a helper made behind our back would hold the volumes (and
	// re-create them, unlabelled, if the rollback removed them first).
	nctx, ncancel := r.call(context.WithoutCancel(ctx))
	defer ncancel()
	created, err := r.cli.ContainerCreate(nctx, &container.Config{
		Image:      img.id,
		Entrypoint: []string{sandbox.AgentPath}, // never started; an image may have no command
		WorkingDir: "/",                         // a missing WORKDIR would be made in the helper, for nothing
		Labels:     hl,
	}, &container.HostConfig{
		NetworkMode: "none",
		CapDrop:     []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges:true"},
		LogConfig:   container.LogConfig{Type: "none"},
		Mounts:      mounts,
	}, nil, nil, helperName(id, what))
	if err != nil {
		return "", nil, fmt.Errorf("creating the %s helper container: %w", what, err)
	}
	return created.ID, func() error {
		rctx, cancel := r.call(context.WithoutCancel(ctx))
		defer cancel()
		if err := r.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true}); err != nil && !isNotFound(err) {
			return fmt.Errorf("removing the %s helper container: %w", what, err)
		}
		return nil
	}, nil
}

// seedHelperMounts are the mounts of the seeding helper: each volume to
// seed at seedMount(i), without copy-up.
func seedHelperMounts(owned []vol) []mount.Mount {
	mounts := make([]mount.Mount, len(owned))
	for i, v := range owned {
		mounts[i] = mount.Mount{Type: mount.TypeVolume, Source: v.name, Target: seedMount(i), VolumeOptions: &mount.VolumeOptions{NoCopy: true}}
	}
	return mounts
}

// smallSeedBytes bounds the archive of a folder that seed keeps in memory
// to write with the others in one engine call (HOME, an empty workspace);
// a larger one streams into the session's container.
const smallSeedBytes = 8 << 20

// seed fills the volumes of l.owned() from helper (created with
// seedHelperMounts) and hands their roots to the session user. A large
// folder streams into ctr, the session's container (created, not
// started); the small ones and the roots go into the helper's mounts in
// one last write. quota says the volumes are quota-bound filesystems,
// whose roots mkfs made the session user's with mode 0755; a plain
// volume's root is root's, 0755; a root that is right already is left
// alone. For a foreign image's workspace and HOME that is three engine
// calls: two reads and one write.
func (r *Runtime) seed(ctx context.Context, id, helper, ctr string, l layout, quota bool) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, seedTimeout)
	defer cancel()
	owned := l.owned()
	var small bytes.Buffer
	tw := tar.NewWriter(&small)
	entries, inHelper := 0, 0
	for i, v := range owned {
		prefix := strings.TrimPrefix(seedMount(i), "/")
		root, n, buffered, err := r.copyOwned(ctx, helper, ctr, v, l.uid, l.gid, tw, prefix)
		if err != nil {
			return err
		}
		entries += n
		if buffered {
			inHelper += n
		}
		mode := root.Mode & 0o7777
		if mode == 0o755 && (quota || l.uid == 0 && l.gid == 0) {
			continue
		}
		inHelper++
		if err := tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeDir, Name: prefix + "/", Mode: mode, Uid: l.uid, Gid: l.gid, ModTime: root.ModTime,
		}); err != nil {
			return fmt.Errorf("seeding: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("seeding: %w", err)
	}
	if inHelper > 0 {
		cctx, ccancel := r.call(ctx)
		defer ccancel()
		if err := r.cli.CopyToContainer(cctx, helper, "/", &small, container.CopyToContainerOptions{}); err != nil {
			return fmt.Errorf("seeding: writing the small folders and the volume roots, owned by %d:%d: %w", l.uid, l.gid, err)
		}
	}
	targets := make([]string, len(owned))
	for i, v := range owned {
		targets[i] = v.target
	}
	r.log.Debug("volumes seeded from the image, owned by the session user", "session", id, "paths", targets,
		"entries", entries, "written_in_helper", inHelper, "user", fmt.Sprintf("%d:%d", l.uid, l.gid), "took", time.Since(start).Round(time.Millisecond))
	return nil
}

// seedEntry is an entry of a folder's archive kept in memory.
type seedEntry struct {
	hdr  *tar.Header
	body []byte
}

// copyOwned reads the image's folder at v.target from the helper, owned by
// uid:gid (see ownEntry), and returns the header of the folder itself (its
// mode and time, for the root) and how many entries went in. A folder
// whose archive stays under smallSeedBytes is written to small, under
// prefix (the helper's mount of the volume; buffered is set); a larger one
// streams into the session's container ctr at v.target. A folder the image
// lacks gives an empty volume with mode 0755.
func (r *Runtime) copyOwned(ctx context.Context, helper, ctr string, v vol, uid, gid int, small *tar.Writer, prefix string) (root *tar.Header, n int, buffered bool, err error) {
	rc, st, err := r.cli.CopyFromContainer(ctx, helper, v.target)
	if isNotFound(err) {
		return &tar.Header{Mode: 0o755, ModTime: time.Now()}, 0, false, nil
	}
	if err != nil {
		return nil, 0, false, fmt.Errorf("seeding the %s: reading %s from the image: %w", v.what, v.target, err)
	}
	defer rc.Close()
	switch {
	case st.Mode&fs.ModeSymlink != 0:
		return nil, 0, false, seedProblem(v, fmt.Sprintf("%s is a symbolic link in the image (to %q): name the folder it points to", v.target, st.LinkTarget))
	case !st.Mode.IsDir():
		return nil, 0, false, seedProblem(v, fmt.Sprintf("%s is not a folder in the image (%v)", v.target, st.Mode))
	}
	readErr := func(err error) error {
		return fmt.Errorf("seeding the %s: reading %s from the image: %w", v.what, v.target, err)
	}
	tr := tar.NewReader(rc)
	root, err = tr.Next()
	if err != nil {
		return nil, 0, false, readErr(err)
	}
	base := path.Base(v.target)
	if strings.TrimSuffix(root.Name, "/") != base || root.Typeflag != tar.TypeDir {
		return nil, 0, false, fmt.Errorf("seeding the %s: the engine's archive of %s starts with %q, not the folder", v.what, v.target, root.Name)
	}

	// Keep the archive in memory while it is small.
	var pending []seedEntry
	size := 0
	var next *tar.Header
	for {
		hdr, err := nextOwned(tr, base, uid, gid)
		if errors.Is(err, io.EOF) {
			if err := writeEntries(small, pending, prefix+"/"); err != nil {
				return nil, 0, false, fmt.Errorf("seeding the %s: %w", v.what, err)
			}
			return root, len(pending), true, nil
		}
		if err != nil {
			return nil, 0, false, readErr(err)
		}
		if size+512+int(hdr.Size) > smallSeedBytes {
			next = hdr
			break
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			return nil, 0, false, readErr(err)
		}
		pending = append(pending, seedEntry{hdr, body})
		size += 512 + len(body)
	}

	// Large: what was kept, then the rest of the stream, into the
	// session's container.
	pr, pw := io.Pipe()
	done := make(chan result, 1)
	go func() {
		tw := tar.NewWriter(pw)
		err := writeEntries(tw, pending, "")
		n, hdr := len(pending), next
		for err == nil {
			if err = tw.WriteHeader(hdr); err != nil {
				break
			}
			if _, err = io.Copy(tw, tr); err != nil {
				break
			}
			n++
			hdr, err = nextOwned(tr, base, uid, gid)
		}
		if errors.Is(err, io.EOF) {
			err = tw.Close()
		}
		pw.CloseWithError(err) // nil: EOF for the engine
		done <- result{n, err}
	}()
	err = r.cli.CopyToContainer(ctx, ctr, v.target, pr, container.CopyToContainerOptions{})
	_ = pr.CloseWithError(errors.New("the engine stopped reading")) // unblocks the rewrite if the engine gave up early
	_ = rc.Close()                                                  // and the engine's archive of the helper
	res := <-done
	switch {
	case res.err != nil && err == nil:
		return nil, 0, false, fmt.Errorf("seeding the %s from %s: %w", v.what, v.target, res.err)
	case err != nil:
		return nil, 0, false, fmt.Errorf("seeding the %s: writing %s: %w", v.what, v.target, err)
	}
	return root, res.n, false, nil
}

type result struct {
	n   int
	err error
}

// writeEntries writes kept entries to tw, their names (and hard links'
// targets) under prefix.
func writeEntries(tw *tar.Writer, entries []seedEntry, prefix string) error {
	for _, e := range entries {
		e.hdr.Name = prefix + e.hdr.Name
		if e.hdr.Typeflag == tar.TypeLink {
			e.hdr.Linkname = prefix + e.hdr.Linkname
		}
		if err := tw.WriteHeader(e.hdr); err != nil {
			return err
		}
		if _, err := tw.Write(e.body); err != nil {
			return err
		}
	}
	return nil
}

// seedProblem is an invalid-options error for a volume's folder the image
// has in a shape that cannot be seeded.
func seedProblem(v vol, msg string) error {
	field := "editable_paths"
	if !strings.HasPrefix(v.what, "editable") {
		field = "env.HOME" // the workspace is always a folder or missing; HOME is the only other
	}
	return &sandbox.OptionsError{Problems: []string{field + ": " + msg}}
}

// nextOwned reads the next entry of the engine's archive of a folder (its
// entries named base/..., the folder's own read already) that goes into
// the volume, rewritten by ownEntry; io.EOF at the end.
func nextOwned(tr *tar.Reader, base string, uid, gid int) (*tar.Header, error) {
	for {
		hdr, err := tr.Next()
		if err != nil {
			return nil, err
		}
		keep, err := ownEntry(hdr, base, uid, gid)
		if err != nil || keep {
			return hdr, err
		}
	}
}

// ownEntry rewrites an entry of the engine's archive of a folder (named
// base/...) in place: named relative to the folder, owned by uid:gid,
// setuid and setgid bits of files cleared and file capabilities dropped,
// so that what was root's in the image becomes the session user's, never
// a way to become someone else. Device files are not kept (a volume is no
// place for them).
func ownEntry(hdr *tar.Header, base string, uid, gid int) (keep bool, err error) {
	strip := func(name string) (string, bool) {
		rest, ok := strings.CutPrefix(strings.TrimSuffix(name, "/"), base+"/")
		return rest, ok && rest != ""
	}
	name, ok := strip(hdr.Name)
	if !ok {
		return false, fmt.Errorf("the image's archive has an entry %q outside %s", hdr.Name, base)
	}
	switch hdr.Typeflag {
	case tar.TypeChar, tar.TypeBlock:
		return false, nil
	case tar.TypeLink:
		if hdr.Linkname, ok = strip(hdr.Linkname); !ok {
			return false, fmt.Errorf("the image's archive has a hard link %q to %q, outside %s", hdr.Name, hdr.Linkname, base)
		}
	}
	if hdr.Typeflag == tar.TypeDir {
		name += "/"
	} else {
		hdr.Mode &^= 0o6000
	}
	hdr.Name = name
	hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = uid, gid, "", ""
	for k := range hdr.PAXRecords {
		if strings.HasPrefix(k, "SCHILY.xattr.security.capability") {
			delete(hdr.PAXRecords, k)
		}
	}
	delete(hdr.Xattrs, "security.capability") //nolint:staticcheck // the reader fills it beside PAXRecords; the writer reads both
	return true, nil
}

// sessionUser is the uid:gid the session runs as: the options' User, or
// with sandbox.UserImage the image's USER as the engine would resolve it
// ("" is root; a name, or a uid without a group, is looked up in the
// image's /etc/passwd and /etc/group through a helper container).
func (r *Runtime) sessionUser(ctx context.Context, id string, o sandbox.SessionOptions, img imageFacts, labels map[string]string) (uid, gid int, err error) {
	if o.User != sandbox.UserImage {
		return sandbox.ParseUser(o.User)
	}
	if uid, gid, ok := numericUser(img.user); ok {
		return uid, gid, nil
	}
	ctr, remove, err := r.createHelper(ctx, id, "user", img, nil, labels)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if rerr := remove(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	passwd, err := r.readImageFile(ctx, ctr, "/etc/passwd")
	if err != nil {
		return 0, 0, err
	}
	group, err := r.readImageFile(ctx, ctr, "/etc/group")
	if err != nil {
		return 0, 0, err
	}
	return lookupUser(img.user, passwd, group)
}

// numericUser parses an image's USER that needs no lookup: "" (root),
// "root", "0", or numeric "uid:gid".
func numericUser(user string) (uid, gid int, ok bool) {
	switch user {
	case "", "root", "0", "root:root", "0:0":
		return 0, 0, true
	}
	u, g, hasGid := strings.Cut(user, ":")
	iu, err1 := strconv.Atoi(u)
	ig, err2 := strconv.Atoi(g)
	if !hasGid || err1 != nil || err2 != nil || iu < 0 || ig < 0 {
		return 0, 0, false
	}
	return iu, ig, true
}

// readImageFile reads a small file of the image through a helper; a
// missing file is empty.
func (r *Runtime) readImageFile(ctx context.Context, ctr, p string) (string, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	rc, _, err := r.cli.CopyFromContainer(cctx, ctr, p)
	if isNotFound(err) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("reading the image's %s: %w", p, err)
	}
	defer rc.Close()
	tr := tar.NewReader(rc)
	if _, err := tr.Next(); err != nil {
		return "", fmt.Errorf("reading the image's %s: %w", p, err)
	}
	b, err := io.ReadAll(io.LimitReader(tr, maxUserDBBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading the image's %s: %w", p, err)
	}
	if len(b) > maxUserDBBytes {
		return "", fmt.Errorf("the image's %s is larger than %d bytes", p, maxUserDBBytes)
	}
	return string(b), nil
}

// lookupUser resolves an image's USER ("name", "uid", "name:group",
// "uid:group", "name:gid") against its /etc/passwd and /etc/group as the
// engine does: a user's group is its passwd entry's unless one is given; a
// numeric uid without an entry gets group 0; a name that is not there is
// an error.
func lookupUser(user, passwd, group string) (uid, gid int, err error) {
	u, g, hasGid := strings.Cut(user, ":")
	bad := func(format string, args ...any) error {
		return &sandbox.OptionsError{Problems: []string{"user: " + fmt.Sprintf(format, args...)}}
	}
	uid, gid = -1, 0
	if n, err := strconv.Atoi(u); err == nil && n >= 0 {
		uid = n
	}
	for _, line := range strings.Split(passwd, "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 {
			continue
		}
		id, err1 := strconv.Atoi(f[2])
		pg, err2 := strconv.Atoi(f[3])
		if err1 != nil || err2 != nil || (f[0] != u && (uid < 0 || id != uid)) {
			continue
		}
		uid, gid = id, pg
		break
	}
	if uid < 0 {
		return 0, 0, bad("the image's USER %q is not in its /etc/passwd", user)
	}
	if !hasGid {
		return uid, gid, nil
	}
	if n, err := strconv.Atoi(g); err == nil && n >= 0 {
		return uid, n, nil
	}
	for _, line := range strings.Split(group, "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 3 && f[0] == g {
			if n, err := strconv.Atoi(f[2]); err == nil && n >= 0 {
				return uid, n, nil
			}
		}
	}
	return 0, 0, bad("the group of the image's USER %q is not in its /etc/group", user)
}
