package fileeditor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// BatchFile is a file as a batch edit found it (see Executor.Batch).
type BatchFile struct {
	// Path is the absolute path the batch named.
	Path string
	// Exists is false for a path where nothing is.
	Exists bool
	// Text is the decoded text, with the file's own line endings; set by
	// Batch's read function only (not for files only deleted).
	Text string
	// Encoding names the file's encoding, as file_editor reports it.
	Encoding string

	resolved string
	raw      []byte
	enc      encoding
	mode     fs.FileMode
}

// BatchWrite is one change of a batch: Delete removes Path, else Text is
// written to it. A new file gets the encoding and mode of Like (a file the
// batch read, e.g. a move's source) or UTF-8 and the umask's mode; an
// existing one keeps its own. Missing parent directories of a new file are
// created (and removed again if the batch fails).
type BatchWrite struct {
	Path   string
	Delete bool
	Text   string
	Like   string
}

// BatchError is a batch's failure in words for the model; no file was
// changed.
type BatchError struct{ Msg string }

func (e *BatchError) Error() string { return e.Msg }

func batchErrorf(format string, args ...any) error {
	return &BatchError{Msg: fmt.Sprintf(format, args...)}
}

// Batch edits several files as one: it locks paths (absolute, clean; every
// path plan may read or write), lets plan look at them through files and
// return the writes, checks every write before making any, then makes
// them. If one fails the ones made are undone, so the files are as they
// were. Each changed file gets one undo_edit snapshot, so file_editor's
// undo_edit reverts a batch file by file. plan's error is returned as it
// is; Batch's own are *BatchError.
func (e *Executor) Batch(ctx context.Context, paths []string, plan func(files *BatchFiles) ([]BatchWrite, error)) error {
	if e.closed.Load() {
		return ErrClosed
	}
	files := map[string]*BatchFile{}
	var keys []string
	for _, p := range paths {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return batchErrorf("%s is not an absolute, clean path", p)
		}
		if _, dup := files[p]; dup {
			continue
		}
		r := resolvePath(p)
		if e.root != "" && !within(r, e.root) {
			return batchErrorf("%s is outside %s, the only directory this tool may access", p, e.opts.Root)
		}
		files[p] = &BatchFile{Path: p, resolved: r}
		if !slices.Contains(keys, r) {
			keys = append(keys, r)
		}
	}
	slices.Sort(keys) // one order for every batch: no deadlock between two
	for _, k := range keys {
		unlock, err := e.locks.lock(ctx, k)
		if err != nil {
			return err
		}
		defer unlock()
	}
	for _, f := range files {
		if err := e.stat(f); err != nil {
			return err
		}
	}
	writes, err := plan(&BatchFiles{e: e, files: files})
	if err != nil {
		return err
	}
	prepared := make([]prepared, len(writes))
	for i, w := range writes {
		f, ok := files[w.Path]
		if !ok {
			return fmt.Errorf("fileeditor: batch: %s was not named to Batch", w.Path)
		}
		if prepared[i], err = e.prepare(f, w, files); err != nil {
			return err
		}
	}
	for i := range prepared {
		if err := e.commit(&prepared[i]); err != nil {
			for j := i - 1; j >= 0; j-- {
				e.rollback(&prepared[j])
			}
			e.rollback(&prepared[i])
			return batchErrorf("Ran into %v while writing %s; every file of the patch was put back as it was.", unwrapPathError(err), prepared[i].f.Path)
		}
	}
	for _, p := range prepared {
		e.hist.push(p.f.resolved, p.f.Exists, p.f.raw)
	}
	return nil
}

// BatchFiles are the files of a batch, locked while its plan runs.
type BatchFiles struct {
	e     *Executor
	files map[string]*BatchFile
}

// Stat returns the file at path (one Batch was given) without reading it:
// Exists is set, Text is not.
func (b *BatchFiles) Stat(path string) (*BatchFile, error) {
	f, ok := b.files[path]
	if !ok {
		return nil, fmt.Errorf("fileeditor: batch: %s was not named to Batch", path)
	}
	return f, nil
}

// Read returns the file at path with its text decoded (Text is empty when
// it does not exist). Binary files and files over the size limit are
// refused with a *BatchError.
func (b *BatchFiles) Read(path string) (*BatchFile, error) {
	f, err := b.Stat(path)
	if err != nil || !f.Exists || f.raw != nil {
		return f, err
	}
	if err := b.e.loadBatch(f); err != nil {
		return nil, err
	}
	return f, nil
}

// stat fills in whether f exists; directories and special files are refused.
func (e *Executor) stat(f *BatchFile) error {
	fi, err := os.Lstat(f.resolved)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return nil
	case err != nil:
		return batchErrorf("Ran into %v while trying to read %s", unwrapPathError(err), f.Path)
	case fi.IsDir():
		return batchErrorf("%s is a directory, not a file", f.Path)
	case !fi.Mode().IsRegular():
		return batchErrorf("%s is %s; only regular files can be patched", f.Path, describeMode(fi.Mode()))
	}
	f.Exists, f.mode = true, fi.Mode()&modeBits
	return nil
}

// loadBatch reads and decodes an existing file.
func (e *Executor) loadBatch(f *BatchFile) error {
	out := &Output{Path: f.Path}
	data, obs := e.readFile(out, f.Path, f.resolved)
	if obs != nil {
		return &BatchError{Msg: obs.Text()}
	}
	doc, obs := e.loadText(out, f.Path, data)
	if obs != nil {
		return &BatchError{Msg: obs.Text()}
	}
	f.raw, f.Text, f.enc, f.Encoding = data, doc.text, doc.enc, doc.enc.String()
	return nil
}

type prepared struct {
	f       *BatchFile
	delete  bool
	data    []byte
	mode    fs.FileMode // for a new file; 0: the umask's
	newDirs []string    // created by commit, removed by rollback
	done    bool
}

// prepare encodes a write and checks everything that can be checked
// before any file changes: encoding, size, a directory to write in.
func (e *Executor) prepare(f *BatchFile, w BatchWrite, files map[string]*BatchFile) (prepared, error) {
	p := prepared{f: f, delete: w.Delete}
	if w.Delete {
		if !f.Exists {
			return p, batchErrorf("%s does not exist, so it cannot be deleted", f.Path)
		}
		if f.raw == nil { // keep its bytes for undo_edit and rollback
			data, obs := e.readFile(&Output{Path: f.Path}, f.Path, f.resolved)
			if obs != nil {
				return p, &BatchError{Msg: obs.Text()}
			}
			f.raw = data
		}
		if err := unix.Access(filepath.Dir(f.resolved), unix.W_OK); err != nil {
			return p, batchErrorf("No change was made: %s cannot be deleted: its directory is not writable (%v).", f.Path, err)
		}
		return p, nil
	}
	enc := encUTF8
	switch like := files[w.Like]; {
	case f.Exists && f.raw != nil:
		enc = f.enc
	case f.Exists:
		return p, fmt.Errorf("fileeditor: batch: %s is written without having been read", f.Path)
	case like != nil && like.raw != nil:
		enc, p.mode = like.enc, like.mode
	}
	data, err := encode(w.Text, enc)
	if err != nil {
		return p, batchErrorf("No change was made: %s is encoded as %s and %v.", f.Path, enc, err)
	}
	if int64(len(data)) > e.opts.MaxFileBytes {
		return p, batchErrorf("No change was made: %s would be %.1fMB, over the %s limit of this tool.", f.Path, float64(len(data))/(1<<20), formatMB(e.opts.MaxFileBytes))
	}
	p.data = data
	dir := filepath.Dir(f.resolved)
	for d := dir; ; d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return p, batchErrorf("No change was made: %s cannot be written because %s is not a directory.", f.Path, d)
			}
			if err := unix.Access(d, unix.W_OK); err != nil {
				return p, batchErrorf("No change was made: %s cannot be written: %s is not writable (%v).", f.Path, d, err)
			}
			break
		}
		if !errors.Is(err, fs.ErrNotExist) || d == "/" {
			return p, batchErrorf("No change was made: %s cannot be written: %v", f.Path, unwrapPathError(err))
		}
	}
	return p, nil
}

func (e *Executor) commit(p *prepared) error {
	f := p.f
	if p.delete {
		if err := os.Remove(f.resolved); err != nil {
			return err
		}
		p.done = true
		return nil
	}
	dir := filepath.Dir(f.resolved)
	var missing []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || d == "/" {
			break
		}
		missing = append(missing, d)
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o777); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		p.newDirs = append(p.newDirs, missing[i])
	}
	if err := e.writeFile(f.resolved, p.data, f.raw, !f.Exists); err != nil {
		return err
	}
	p.done = true
	if !f.Exists && p.mode != 0 {
		if err := os.Chmod(f.resolved, p.mode); err != nil {
			e.log.Debug("batch: keep mode", "path", f.Path, "err", err)
		}
	}
	return nil
}

// rollback puts back what commit did, as far as it can.
func (e *Executor) rollback(p *prepared) {
	f := p.f
	if p.done {
		var err error
		switch {
		case f.Exists:
			err = e.writeFile(f.resolved, f.raw, p.data, false)
			if err == nil && p.delete {
				err = os.Chmod(f.resolved, f.mode)
			}
		default:
			err = os.Remove(f.resolved)
		}
		if err != nil {
			e.log.Error("batch: rollback failed", "path", f.Path, "err", err)
		}
	}
	for i := len(p.newDirs) - 1; i >= 0; i-- {
		_ = os.Remove(p.newDirs[i])
	}
}

// has reports whether key has a snapshot to undo.
func (h *history) has(key string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.files[key]) > 0
}
