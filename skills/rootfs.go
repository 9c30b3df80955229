package skills

import (
	"io/fs"
	"os"
	"syscall"
)

// rootFS is the fs.FS of an os.Root whose opens never block: every file is
// opened O_NONBLOCK, so a FIFO (or a device) at a skill's path returns at
// once, and the caller refuses it as not a regular file. os.Root.FS opens
// without it, and a FIFO named SKILL.md hung the loader (and `serve`) for
// ever. Reads of a regular file or a directory are unaffected.
type rootFS struct{ r *os.Root }

func (f rootFS) Open(name string) (fs.File, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrInvalid}
	}
	return f.r.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

func (f rootFS) Stat(name string) (fs.FileInfo, error) {
	if !fs.ValidPath(name) {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrInvalid}
	}
	return f.r.Stat(name)
}
