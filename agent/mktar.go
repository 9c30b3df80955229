package agent

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
)

// writeTar writes rel (a file, a symlink, or a directory and everything
// under it) as a tar whose top entry is named top, the way `docker cp`
// does: downloading /workspace/src gives src/, src/main.go, ...
// Symlinks are stored as links, never followed. Sockets, devices and FIFOs
// are skipped: they cannot be copied as data.
func writeTar(w io.Writer, root *os.Root, rel, top string) error {
	tw := tar.NewWriter(w)
	if err := addEntry(tw, root, rel, top); err != nil {
		return err
	}
	return tw.Close()
}

func addEntry(tw *tar.Writer, root *os.Root, name, tarName string) error {
	fi, err := root.Lstat(name)
	if err != nil {
		return rootErr(err)
	}
	hdr := &tar.Header{
		Name:    tarName,
		Mode:    int64(fi.Mode().Perm()),
		ModTime: fi.ModTime(),
		Format:  tar.FormatPAX, // long names and sub-second mtimes
	}
	if fi.Mode()&fs.ModeSticky != 0 {
		hdr.Mode |= 0o1000
	}
	switch {
	case fi.Mode().IsRegular():
		hdr.Typeflag, hdr.Size = tar.TypeReg, fi.Size()
		f, err := root.Open(name)
		if err != nil {
			return rootErr(err)
		}
		defer func() { _ = f.Close() }() // read-only: nothing to flush
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := io.CopyN(tw, f, hdr.Size); err != nil {
			return fmt.Errorf("%s: %w (did the file change while it was read?)", name, err)
		}
		return nil
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := root.Readlink(name)
		if err != nil {
			return rootErr(err)
		}
		hdr.Typeflag, hdr.Linkname = tar.TypeSymlink, target
		return tw.WriteHeader(hdr)
	case fi.IsDir():
		hdr.Typeflag, hdr.Name = tar.TypeDir, tarName+"/"
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		d, err := root.Open(name)
		if err != nil {
			return rootErr(err)
		}
		entries, err := d.ReadDir(-1)
		_ = d.Close() // read-only: nothing to flush
		if err != nil {
			return err
		}
		slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		for _, e := range entries {
			if err := addEntry(tw, root, path.Join(name, e.Name()), path.Join(tarName, e.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	return nil // socket, device or FIFO: skipped
}
