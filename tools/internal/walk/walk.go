// Package walk is the file-tree walker shared by the grep and glob tools: a
// parallel directory walk that skips hidden entries and what .gitignore
// files exclude (nested files, negation, directory-only and anchored
// patterns, "**"), never follows directory symlinks (so symlink loops cannot
// happen), and stops when its context ends. It also holds the glob Pattern
// both tools use.
package walk

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
)

// fileBatch is how many files of one directory a worker takes at once; a
// directory with more files is shared between workers.
const fileBatch = 128

// virtualDirs are pseudo file systems whose "files" can block on read or
// never end; a walk that reaches them from "/" skips them. They can still be
// searched when given as the root.
var virtualDirs = map[string]bool{"/proc": true, "/sys": true, "/dev": true}

// Options select what a walk visits. The zero value walks every file that
// is neither hidden nor ignored, with one worker per CPU.
type Options struct {
	// Workers is the number of goroutines; 0 means runtime.NumCPU().
	Workers int
	// Hidden visits entries whose name starts with '.' (except ".git").
	Hidden bool
	// NoIgnore disregards .gitignore and .git/info/exclude files.
	NoIgnore bool
	// KeepHidden, when set, is asked about each hidden entry that would be
	// skipped; true keeps it (a pattern that names ".github", say).
	KeepHidden func(name string, isDir bool) bool
	// KeepIgnored, when set, is asked about each entry a .gitignore
	// excludes; true keeps it.
	KeepIgnored func(name string, isDir bool) bool
	// SkipDir, when set, is asked about each directory below the root
	// (rel is slash-separated, relative to the root); true skips it.
	SkipDir func(rel string) bool
}

// NumWorkers is the number of workers a walk with o runs; the worker index
// Walk passes to its callback is below it.
func (o Options) NumWorkers() int {
	if o.Workers > 0 {
		return o.Workers
	}
	return runtime.NumCPU()
}

// Entry is a file found by the walk: a regular file, or a symlink to one.
type Entry struct {
	Path    string // root joined with Rel
	Rel     string // slash-separated path relative to the root
	Name    string // base name
	Symlink bool   // a symlink whose target is a regular file
	d       fs.DirEntry
}

// Info returns the file's FileInfo (of the target for a symlink).
func (e Entry) Info() (fs.FileInfo, error) {
	if e.Symlink || e.d == nil {
		return os.Stat(e.Path)
	}
	return e.d.Info()
}

// Func is called for every file, from several goroutines at once; worker
// identifies the calling goroutine (0 <= worker < Options.NumWorkers()) so
// callers can keep per-worker state without locks. Returning a non-nil error
// stops the walk; Walk returns that error.
type Func func(worker int, e Entry) error

// Walk calls fn for every file under root that opts selects. The root
// itself is always walked, hidden or ignored or not. Directories that cannot
// be read are skipped. Walk returns ctx.Err() if the context ends first, the
// first error of fn, or an error if root cannot be read.
func Walk(ctx context.Context, root string, opts Options, fn Func) error {
	root = filepath.Clean(root)
	f, err := os.Open(root)
	if err != nil {
		return err
	}
	f.Close()
	var chain *ignore
	if !opts.NoIgnore {
		chain = ancestorIgnores(root)
	}
	w := &walker{ctx: ctx, opts: opts, fn: fn, root: root}
	w.cond = sync.NewCond(&w.mu)
	stop := context.AfterFunc(ctx, func() { w.abort(ctx.Err()) })
	defer stop()
	w.push(job{dir: &dirJob{abs: root, ign: chain}})
	n := opts.NumWorkers()
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.work(i)
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return err
	}
	return w.err
}

type dirJob struct {
	abs, rel string
	ign      *ignore
}

// job is a directory to read or a batch of files to hand to fn.
type job struct {
	dir   *dirJob
	files []Entry
}

type walker struct {
	ctx  context.Context // also checked per file: AfterFunc's abort runs on a goroutine of its own, maybe late
	opts Options
	fn   Func
	root string

	mu      sync.Mutex
	cond    *sync.Cond
	jobs    []job // a stack: depth first keeps the queue short
	pending int   // jobs queued or running
	stopped atomic.Bool
	err     error
}

func (w *walker) push(j job) {
	w.mu.Lock()
	w.jobs = append(w.jobs, j)
	w.pending++
	w.mu.Unlock()
	w.cond.Signal()
}

func (w *walker) abort(err error) {
	w.mu.Lock()
	if !w.stopped.Load() {
		w.stopped.Store(true)
		if w.err == nil {
			w.err = err
		}
	}
	w.mu.Unlock()
	w.cond.Broadcast()
}

func (w *walker) work(worker int) {
	for {
		w.mu.Lock()
		for len(w.jobs) == 0 && w.pending > 0 && !w.stopped.Load() {
			w.cond.Wait()
		}
		if w.pending == 0 || w.stopped.Load() {
			w.mu.Unlock()
			return
		}
		j := w.jobs[len(w.jobs)-1]
		w.jobs[len(w.jobs)-1] = job{}
		w.jobs = w.jobs[:len(w.jobs)-1]
		w.mu.Unlock()

		if j.dir != nil {
			w.readDir(worker, j.dir)
		} else {
			w.visit(worker, j.files)
		}

		w.mu.Lock()
		w.pending--
		done := w.pending == 0
		w.mu.Unlock()
		if done {
			w.cond.Broadcast()
		}
	}
}

func (w *walker) visit(worker int, files []Entry) {
	for _, e := range files {
		if w.stopped.Load() {
			return
		}
		if err := w.ctx.Err(); err != nil {
			w.abort(err)
			return
		}
		if err := w.fn(worker, e); err != nil {
			w.abort(err)
			return
		}
	}
}

func (w *walker) readDir(worker int, d *dirJob) {
	f, err := os.Open(d.abs)
	if err != nil {
		return
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil && len(ents) == 0 {
		return
	}
	ign := d.ign
	if !w.opts.NoIgnore {
		ign = w.loadIgnores(d, ents)
	}
	var files []Entry
	for _, de := range ents {
		if w.stopped.Load() {
			return
		}
		name := de.Name()
		abs := d.abs + string(filepath.Separator) + name
		if d.abs == string(filepath.Separator) {
			abs = d.abs + name
		}
		typ := de.Type()
		symlink := false
		switch {
		case typ.IsDir():
		case typ.IsRegular():
		case typ&fs.ModeSymlink != 0:
			// Symlinks to files are files; symlinks to directories are
			// not followed, so the walk cannot loop.
			fi, err := os.Stat(abs)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			symlink = true
		default:
			continue // devices, pipes, sockets
		}
		isDir := typ.IsDir()
		if name[0] == '.' && !w.keepHidden(name, isDir) {
			continue
		}
		rel := name
		if d.rel != "" {
			rel = d.rel + "/" + name
		}
		if ign != nil && ign.ignored(rel, name, isDir) &&
			(w.opts.KeepIgnored == nil || !w.opts.KeepIgnored(name, isDir)) {
			continue
		}
		if isDir {
			if virtualDirs[abs] || (w.opts.SkipDir != nil && w.opts.SkipDir(rel)) {
				continue
			}
			w.push(job{dir: &dirJob{abs: abs, rel: rel, ign: ign}})
			continue
		}
		files = append(files, Entry{Path: abs, Rel: rel, Name: name, Symlink: symlink, d: de})
	}
	// Share big directories; keep the first batch for this worker.
	for len(files) > fileBatch {
		w.push(job{files: files[len(files)-fileBatch:]})
		files = files[:len(files)-fileBatch]
	}
	w.visit(worker, files)
}

func (w *walker) keepHidden(name string, isDir bool) bool {
	if w.opts.Hidden && name != ".git" {
		return true
	}
	return w.opts.KeepHidden != nil && w.opts.KeepHidden(name, isDir)
}

// loadIgnores returns the ignore chain for the entries of d: d's own
// .gitignore on top of the inherited chain, and for a repository root its
// .git/info/exclude below that.
func (w *walker) loadIgnores(d *dirJob, ents []fs.DirEntry) *ignore {
	ign := d.ign
	var hasIgnore bool
	for _, de := range ents {
		switch de.Name() {
		case ".git":
			ign = newIgnore(ign, readIgnoreFile(filepath.Join(d.abs, ".git", "info", "exclude")), d.rel, "")
		case ".gitignore":
			hasIgnore = true
		}
	}
	if hasIgnore {
		ign = newIgnore(ign, readIgnoreFile(filepath.Join(d.abs, ".gitignore")), d.rel, "")
	}
	return ign
}
