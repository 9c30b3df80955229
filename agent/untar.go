package agent

import (
	"archive/tar"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// extractLimits say where an extraction happens, for the symlink check.
type extractLimits struct {
	workspace string // absolute workspace root
	destRel   string // destination directory, relative to the workspace
}

// extractTar writes the entries of a tar stream under dst. The rules, and
// why:
//   - names are relative: an absolute name or one that climbs out with ".."
//     is refused (ErrBadArchive), it cannot mean anything under dst;
//   - every file operation goes through os.Root, so an existing symlink in
//     the workspace cannot carry a write outside it;
//   - a symlink entry may only point inside the workspace (ErrOutsideWorkspace):
//     the agent does not create links that lead a later reader out;
//   - device files and FIFOs are refused: nothing a workspace needs, and a
//     FIFO would block the next reader;
//   - permission bits (0777 and sticky) and file mtimes are kept; setuid and
//     setgid are dropped; owners are not changed (the agent is not root);
//   - an existing file, link or empty slot is replaced; an existing
//     directory is kept and merged into;
//   - a file is written under a temporary name beside it and renamed into
//     place once its last byte arrived: an archive that ends early, or whose
//     header announces more than it carries, leaves no partial file (and
//     the file it would have replaced stays as it was).
//
// Entries extracted before an error stay on disk; the error names the entry.
// After the end-of-archive marker the rest of r is drained, so the sender
// never blocks on trailing padding.
func extractTar(dst *os.Root, r io.Reader, lim extractLimits) (proto.UploadResult, error) {
	var res proto.UploadResult
	type dirMode struct {
		name string
		mode fs.FileMode
	}
	var dirs []dirMode
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrHeader) || errors.Is(err, tar.ErrInsecurePath) {
				return res, fmt.Errorf("%w: %v", proto.ErrBadArchive, err)
			}
			return res, err // an abort or a cancellation: keep its error
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue
		}
		name, err := entryName(hdr.Name)
		if err != nil {
			return res, err
		}
		if name == "." {
			continue // the "./" entry of `tar -C dir .`: dst itself
		}
		mode := fs.FileMode(hdr.Mode).Perm()
		if hdr.Mode&0o1000 != 0 {
			mode |= fs.ModeSticky
		}
		fail := func(err error) (proto.UploadResult, error) {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = fmt.Errorf("%w: the archive ends inside this file", proto.ErrBadArchive)
			}
			return res, fmt.Errorf("entry %q: %w", hdr.Name, rootErr(err))
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := dst.MkdirAll(name, 0o700); err != nil {
				return fail(err)
			}
			// Modes are applied at the end: a read-only directory must not
			// stop its own entries from being written.
			dirs = append(dirs, dirMode{name, mode})
			res.Dirs++
		case tar.TypeReg, tar.TypeRegA: //nolint:staticcheck // TypeRegA is still written by old tars
			if err := prepareFile(dst, name); err != nil {
				return fail(err)
			}
			n, err := writeFile(dst, name, tr, mode)
			res.Bytes += n
			if err != nil {
				return fail(err)
			}
			if !hdr.ModTime.IsZero() {
				_ = dst.Chtimes(name, hdr.ModTime, hdr.ModTime)
			}
			res.Files++
		case tar.TypeSymlink:
			if err := checkSymlink(name, hdr.Linkname, lim); err != nil {
				return res, err
			}
			if err := prepare(dst, name); err != nil {
				return fail(err)
			}
			if err := dst.Symlink(hdr.Linkname, name); err != nil {
				return fail(err)
			}
			res.Links++
		case tar.TypeLink:
			target, err := entryName(hdr.Linkname)
			if err != nil {
				return res, fmt.Errorf("hard link %q: %w", hdr.Name, err)
			}
			if err := prepare(dst, name); err != nil {
				return fail(err)
			}
			if err := dst.Link(target, name); err != nil {
				return fail(err)
			}
			res.Links++
		case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
			return res, fmt.Errorf("%w: entry %q is a device file or FIFO (type %q); only files, directories and links can be uploaded",
				proto.ErrBadArchive, hdr.Name, string(hdr.Typeflag))
		default:
			return res, fmt.Errorf("%w: entry %q has the unsupported tar type %q", proto.ErrBadArchive, hdr.Name, string(hdr.Typeflag))
		}
	}
	// Deepest first, so a parent made read-only does not block its children.
	slices.Reverse(dirs)
	for _, d := range dirs {
		if err := dst.Chmod(d.name, d.mode); err != nil {
			return res, fmt.Errorf("entry %q: %w", d.name, rootErr(err))
		}
	}
	_, err := io.Copy(io.Discard, r)
	return res, err
}

// entryName validates and cleans a tar entry name: slash-separated,
// relative, not climbing out.
func entryName(name string) (string, error) {
	if name == "" {
		return "", fmt.Errorf("%w: an entry has an empty name", proto.ErrBadArchive)
	}
	if strings.HasPrefix(name, "/") || filepath.IsAbs(name) {
		return "", fmt.Errorf("%w: entry %q has an absolute name; archive entries must be relative to the destination", proto.ErrBadArchive, name)
	}
	if strings.ContainsRune(name, 0) {
		return "", fmt.Errorf("%w: entry %q contains a NUL byte", proto.ErrBadArchive, name)
	}
	clean := path.Clean(name)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", fmt.Errorf("%w: entry %q leads outside the destination (..)", proto.ErrBadArchive, name)
	}
	return clean, nil
}

// checkSymlink refuses a link whose target, taken from the link's place,
// is not inside the workspace.
func checkSymlink(name, target string, lim extractLimits) error {
	if target == "" {
		return fmt.Errorf("%w: symlink %q has an empty target", proto.ErrBadArchive, name)
	}
	var inside bool
	if path.IsAbs(target) {
		rel, err := filepath.Rel(lim.workspace, filepath.Clean(target))
		inside = err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	} else {
		joined := path.Join(filepath.ToSlash(lim.destRel), path.Dir(name), target)
		inside = joined != ".." && !strings.HasPrefix(joined, "../")
	}
	if !inside {
		return fmt.Errorf("%w: symlink %q points to %q, outside the workspace %s", proto.ErrOutsideWorkspace, name, target, lim.workspace)
	}
	return nil
}

// prepare makes the parent directories of name and removes what is in the
// way of a new file or link (but never a directory).
func prepare(dst *os.Root, name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := dst.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	fi, err := dst.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%w: a directory is in the way", fs.ErrExist)
	}
	// Replace rather than truncate: a read-only file or a symlink at the
	// name must not decide where or whether the new content is written.
	return dst.Remove(name)
}

// prepareFile makes the parent directories of name and checks that no
// directory is in the way; a file or link there is replaced by the rename
// that ends writeFile.
func prepareFile(dst *os.Root, name string) error {
	if dir := path.Dir(name); dir != "." {
		if err := dst.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	fi, err := dst.Lstat(name)
	if err == nil && fi.IsDir() {
		return fmt.Errorf("%w: a directory is in the way", fs.ErrExist)
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// writeFile writes r to a temporary file beside name and renames it over
// name when r has ended cleanly; on any error the temporary file goes.
func writeFile(dst *os.Root, name string, r io.Reader, mode fs.FileMode) (int64, error) {
	var rnd [8]byte
	_, _ = rand.Read(rnd[:]) // crypto/rand.Read never fails (Go 1.24+)
	tmp := path.Join(path.Dir(name), ".sandboxd-upload-"+hex.EncodeToString(rnd[:]))
	f, err := dst.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(f, r)
	if err == nil {
		err = f.Chmod(mode) // fchmod: exact bits, whatever the umask
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = dst.Rename(tmp, name)
	}
	if err != nil {
		_ = dst.Remove(tmp) // best effort: the error that stopped the write is the one to report
	}
	return n, err
}
