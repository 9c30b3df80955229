// Package skilltar carries a session's skill folders into a Kubernetes Pod
// (decision 0048): Pack writes the selected folders, read on the daemon's
// host under their skill roots, as one gzip-compressed tar; the runtime
// puts it into a ConfigMap, and an init container of the Pod runs Unpack
// (`sandboxd skills-unpack`) into the volume the sandbox's container
// mounts read-only at /skills. It has no build tag and no Kubernetes
// import: the agent binary, built without the kubernetes tag, runs Unpack.
package skilltar

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Bounds of the skills of one session, checked by Pack and again by
// Unpack (which reads what came through the cluster's API).
const (
	// MaxFiles bounds the entries (files and folders).
	MaxFiles = 10_000
	// MaxBytes bounds the files' content, uncompressed.
	MaxBytes = 64 << 20
)

// Packed says what Pack wrote.
type Packed struct {
	Files int   // regular files
	Dirs  int   // folders, each skill's own included
	Bytes int64 // the files' content, uncompressed
}

// Pack writes the skill folders of mounts (each Source is <skill
// root>/<Path>) as one gzip-compressed tar to w: entries "<Path>/<rel>",
// folders 0555, files 0444 (0555 when any execute bit is set), no owner.
//
// Each folder is opened under its skill root one component of Path at a
// time, each a directory and not a symbolic link (the loader checked it
// at start; the folder may have changed since), and read through that open
// folder, never by path: a symbolic link inside a folder, a device or a
// FIFO is skipped, so nothing outside the folder is read. Past MaxFiles or
// MaxBytes it fails.
func Pack(w io.Writer, mounts []sandbox.SkillMount) (Packed, error) {
	var st Packed
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	for _, m := range sandbox.TopSkillMounts(mounts) {
		if err := packOne(tw, m, &st); err != nil {
			return st, err
		}
	}
	if err := tw.Close(); err != nil {
		return st, err
	}
	return st, zw.Close()
}

// Refused is the error of a skill folder Pack will not read: the skill
// and what is wrong, without the host's paths.
type Refused struct {
	Skill  string
	Reason string
}

func (e *Refused) Error() string {
	return fmt.Sprintf("skill %s cannot be copied into the sandbox: %s", e.Skill, e.Reason)
}

func packOne(tw *tar.Writer, m sandbox.SkillMount, st *Packed) error {
	dir, err := openFolder(m)
	if err != nil {
		return err
	}
	defer dir.Close()
	// Every folder above the skill's is made too (a nested Path).
	parts := strings.Split(m.Path, "/")
	for i := range parts {
		if err := addDir(tw, strings.Join(parts[:i+1], "/"), st); err != nil {
			return err
		}
	}
	return fs.WalkDir(dir.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return &Refused{Skill: m.Path, Reason: fmt.Sprintf("reading %s: %v", p, pathless(err))}
		}
		if p == "." {
			return nil
		}
		name := m.Path + "/" + p
		switch t := d.Type(); {
		case t.IsDir():
			return addDir(tw, name, st)
		case t.IsRegular():
			return addFile(tw, dir, m.Path, p, name, st)
		}
		return nil // a symbolic link, FIFO, socket or device: not carried
	})
}

func addDir(tw *tar.Writer, name string, st *Packed) error {
	st.Dirs++
	if st.Dirs+st.Files > MaxFiles {
		return fmt.Errorf("skills: more than %d files and folders", MaxFiles)
	}
	return tw.WriteHeader(&tar.Header{Name: name + "/", Mode: 0o555, Typeflag: tar.TypeDir, Format: tar.FormatPAX})
}

func addFile(tw *tar.Writer, dir *os.Root, skill, rel, name string, st *Packed) error {
	// Opened without blocking, and checked regular once open: a FIFO
	// swapped in since the walk is refused, not waited on.
	f, err := dir.OpenFile(filepath.FromSlash(rel), os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return &Refused{Skill: skill, Reason: fmt.Sprintf("reading %s: %v", rel, pathless(err))}
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return &Refused{Skill: skill, Reason: rel + " is not a regular file any more"}
	}
	st.Files++
	st.Bytes += fi.Size()
	if st.Dirs+st.Files > MaxFiles || st.Bytes > MaxBytes {
		return fmt.Errorf("skills: more than %d files and folders or %d MiB", MaxFiles, MaxBytes>>20)
	}
	mode := int64(0o444)
	if fi.Mode().Perm()&0o111 != 0 {
		mode = 0o555
	}
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Typeflag: tar.TypeReg, Size: fi.Size(), Format: tar.FormatPAX}); err != nil {
		return err
	}
	// A file that changed size since its Stat fails the copy.
	if _, err := io.CopyN(tw, f, fi.Size()); err != nil {
		return &Refused{Skill: skill, Reason: fmt.Sprintf("reading %s: %v", rel, pathless(err))}
	}
	return nil
}

// openFolder opens m.Source, which is <skill root>/<m.Path>, under its
// root: each component of Path a directory and not a symbolic link, by
// Lstat and again once opened (the same file).
func openFolder(m sandbox.SkillMount) (*os.Root, error) {
	rel := filepath.FromSlash(m.Path)
	root, ok := strings.CutSuffix(filepath.Clean(m.Source), string(filepath.Separator)+rel)
	if !ok || root == "" || m.Path == "" || !fs.ValidPath(m.Path) {
		return nil, fmt.Errorf("skill %s: its folder %s is not <skill root>/%s", m.Path, m.Source, m.Path)
	}
	cur, err := os.OpenRoot(root)
	if err != nil {
		return nil, &Refused{Skill: m.Path, Reason: fmt.Sprintf("its skill root cannot be opened: %v", pathless(err))}
	}
	for _, name := range strings.Split(m.Path, "/") {
		next, err := openDir(cur, name)
		_ = cur.Close()
		if err != nil {
			return nil, &Refused{Skill: m.Path, Reason: err.Error()}
		}
		cur = next
	}
	return cur, nil
}

// openDir opens the folder name of cur, refusing a symbolic link or
// anything but a directory, and a swap between the check and the open.
func openDir(cur *os.Root, name string) (*os.Root, error) {
	li, err := cur.Lstat(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, pathless(err))
	}
	if !li.IsDir() {
		return nil, fmt.Errorf("%s is not a directory (%s) under its skill root; the folder changed since the server loaded it", name, kind(li.Mode()))
	}
	next, err := cur.OpenRoot(name)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, pathless(err))
	}
	oi, err := next.Stat(".")
	if err != nil || !os.SameFile(li, oi) {
		_ = next.Close()
		return nil, fmt.Errorf("%s changed while it was opened", name)
	}
	return next, nil
}

func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsRegular():
		return "a file"
	}
	return m.Type().String()
}

// pathless drops the path of a *fs.PathError: messages name the skill, and
// a client need not learn where the operator keeps it.
func pathless(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Unpack writes the gzip-compressed tar of Pack from r into the folder
// dst, through an os.Root: only folders and regular files, each name a
// clean relative path; at most MaxFiles entries and MaxBytes of content.
// Files get mode 0444 or 0555 as the tar says, folders 0555 once their
// content is written. It reads what came through the cluster's API, so it
// trusts none of it.
func Unpack(r io.Reader, dst string) error {
	root, err := os.OpenRoot(dst)
	if err != nil {
		return err
	}
	defer root.Close()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("skills archive: %w", err)
	}
	tr := tar.NewReader(zr)
	var (
		dirs    []string
		entries int
		total   int64
	)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("skills archive: %w", err)
		}
		entries++
		if entries > MaxFiles {
			return fmt.Errorf("skills archive: more than %d entries", MaxFiles)
		}
		name := strings.TrimSuffix(hdr.Name, "/")
		if !fs.ValidPath(name) || name == "." || path.Clean(name) != name {
			return fmt.Errorf("skills archive: entry %q is not a clean relative path", hdr.Name)
		}
		local := filepath.FromSlash(name)
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(local, 0o755); err != nil {
				return fmt.Errorf("skills archive: %s: %w", name, err)
			}
			dirs = append(dirs, local)
		case tar.TypeReg:
			total += hdr.Size
			if hdr.Size < 0 || total > MaxBytes {
				return fmt.Errorf("skills archive: more than %d MiB", MaxBytes>>20)
			}
			if err := writeFile(root, local, hdr, tr); err != nil {
				return fmt.Errorf("skills archive: %s: %w", name, err)
			}
		default:
			return fmt.Errorf("skills archive: entry %q: type %q is not a folder or a regular file", hdr.Name, hdr.Typeflag)
		}
	}
	// Deepest first, so that a folder is still writable while its
	// subfolders are made read-only.
	slices.SortFunc(dirs, func(a, b string) int {
		return strings.Count(b, string(filepath.Separator)) - strings.Count(a, string(filepath.Separator))
	})
	for _, d := range dirs {
		if err := root.Chmod(d, 0o555); err != nil {
			return fmt.Errorf("skills archive: %s: %w", d, err)
		}
	}
	return nil
}

func writeFile(root *os.Root, local string, hdr *tar.Header, r io.Reader) error {
	if dir := filepath.Dir(local); dir != "." {
		if err := root.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	mode := fs.FileMode(0o444)
	if hdr.Mode&0o111 != 0 {
		mode = 0o555
	}
	f, err := root.OpenFile(local, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.CopyN(f, r, hdr.Size); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
