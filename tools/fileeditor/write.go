package fileeditor

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// errExists is returned by writeFile when an exclusive create finds the path
// taken (another process created it between the check and the write).
var errExists = errors.New("file already exists")

// modeBits are the mode bits a rewrite keeps.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// writeFile replaces target with data atomically: a temporary file in the
// same directory gets the data, the old file's owner (where the process may
// set it) and mode, an fsync, and is renamed over target, so a reader sees
// the old bytes or the new ones and a failure leaves the old bytes.
//
// With create, the file must not exist: the temporary file is hard-linked to
// target, which fails if anything is there, and gets mode 0666 minus the
// umask like any new file.
//
// Where the directory cannot take a temporary file but the file itself is
// writable (a read-only directory, a single file bind-mounted into a
// container: rename gives EBUSY or EXDEV), the file is rewritten in place
// and, if that fails, its old bytes are written back.
func (e *Executor) writeFile(target string, data, old []byte, create bool) error {
	dir, base := filepath.Split(target)
	var oldInfo os.FileInfo
	if !create {
		fi, err := os.Stat(target)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		oldInfo = fi
	}
	prefix := "." + base + "."
	if len(prefix) > 200 {
		prefix = ".fileeditor."
	}
	tmp, err := os.CreateTemp(dir, prefix+"*.tmp")
	if err != nil {
		if canRewriteInPlace(oldInfo, old) && (errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)) {
			return e.writeInPlace(target, data, old)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("directory %s does not exist", filepath.Clean(dir))
		}
		return err
	}
	tmpName, done := tmp.Name(), false
	defer func() {
		if !done {
			_ = tmp.Close()
			_ = os.Remove(tmpName)
		}
	}()
	mode := fs.FileMode(0o666) &^ umask()
	if oldInfo != nil {
		if st, ok := oldInfo.Sys().(*syscall.Stat_t); ok {
			_ = tmp.Chown(int(st.Uid), int(st.Gid)) // EPERM unless root or already ours
		}
		mode = oldInfo.Mode() & modeBits
	}
	if err := tmp.Chmod(mode); err != nil { // after Chown, which may clear setuid
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		return err
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if create {
		err := os.Link(tmpName, target)
		switch {
		case err == nil:
			_ = os.Remove(tmpName)
			done = true
			syncDir(dir)
			return nil
		case errors.Is(err, fs.ErrExist):
			return errExists
		}
		// No hard links on this filesystem: check, then rename.
		if _, err := os.Lstat(target); err == nil {
			return errExists
		}
	}
	if err := e.rename(tmpName, target); err != nil {
		if canRewriteInPlace(oldInfo, old) && (errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.EXDEV)) {
			return e.writeInPlace(target, data, old)
		}
		return err
	}
	done = true
	syncDir(dir)
	return nil
}

// canRewriteInPlace: only an existing file whose old bytes we hold (to put
// back after a failed write) may be rewritten in place.
func canRewriteInPlace(oldInfo os.FileInfo, old []byte) bool {
	return oldInfo != nil && int64(len(old)) == oldInfo.Size()
}

// writeInPlace is the fallback of writeFile: not atomic, but it restores the
// old bytes when the write fails.
func (e *Executor) writeInPlace(target string, data, old []byte) error {
	f, err := os.OpenFile(target, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		if _, rerr := f.WriteAt(old, 0); rerr == nil {
			_ = f.Truncate(int64(len(old)))
		} else {
			e.log.Error("in-place write failed and the old content could not be restored", "path", target, "err", err, "restore_err", rerr)
		}
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	e.log.Debug("rewrote file in place: no temporary file possible in its directory", "path", target, "err", err)
	return err
}

// syncDir makes a rename durable. Best effort: some filesystems refuse.
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// umask is the process umask, read from /proc/self/status (Linux 4.7+),
// since syscall.Umask can only read it by setting it, racing other threads.
var umask = sync.OnceValue(func() fs.FileMode {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0o022
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			if m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return fs.FileMode(m) & fs.ModePerm
			}
		}
	}
	return 0o022
})
