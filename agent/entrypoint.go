package agent

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// Defaults of the image's entrypoint's supervision (decision 0042).
const (
	// EntrypointMaxRestarts: an entrypoint that fails (a non-zero exit, a
	// signal) is started again at most this many times, as an MCP sidecar
	// is; one that exits 0 has finished and is not.
	EntrypointMaxRestarts = 3
	// EntrypointBackoff is the wait before the first restart; it doubles
	// for each next one (1 s, 2 s, 4 s).
	EntrypointBackoff = time.Second
	// EntrypointKillGrace is how long the session's end waits after
	// SIGTERM to the entrypoint's process group before SIGKILL.
	EntrypointKillGrace = 2 * time.Second
	// EntrypointLogName is the entrypoint's log in the state directory;
	// EntrypointLogName+".1" holds the part before the last rotation.
	EntrypointLogName = "entrypoint.log"
	// entrypointOOMScore makes the entrypoint's processes the OOM killer's
	// choice before the agent, as the terminal's are (tools/bash).
	entrypointOOMScore = "1000"
)

// entrypointOptions configure a supervisor. Zero fields take the defaults
// above.
type entrypointOptions struct {
	proto.Entrypoint
	Env         []string
	Log         string // the log file's path
	MaxLogBytes int64  // per file; zero: logCapFor(the log's folder)
	MaxRestarts int    // negative: none
	Backoff     time.Duration
	KillGrace   time.Duration
	Logger      *slog.Logger
}

// supervisor runs the image's entrypoint in the background: as the agent's
// user (the session user), in a session and process group of its own with
// /dev/null as input, its output into a rotating log, restarted after a
// failure at most MaxRestarts times with a doubling backoff, stopped with
// the agent. Its account (started, exited with what, restarted or not) is
// in the log and the agent's own log.
type supervisor struct {
	opts entrypointOptions
	log  *slog.Logger
	out  *rotatingLog

	mu      sync.Mutex
	stopped bool
	pgid    int // the running process's group; 0 while none runs
	// copiers drain the output of every run, until all its writers
	// closed it: a daemon the entrypoint left keeps logging. Stop ends
	// them.
	copiers []*copier
	stop    chan struct{}
	done    chan struct{}
}

// startEntrypoint starts the supervision of ep (it returns at once; the
// first start is done by then). An empty argv starts nothing but says so in
// the log.
func startEntrypoint(opts entrypointOptions) *supervisor {
	if opts.MaxRestarts == 0 {
		opts.MaxRestarts = EntrypointMaxRestarts
	}
	if opts.Backoff <= 0 {
		opts.Backoff = EntrypointBackoff
	}
	if opts.KillGrace <= 0 {
		opts.KillGrace = EntrypointKillGrace
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.MaxLogBytes <= 0 {
		opts.MaxLogBytes = logCapFor(filepath.Dir(opts.Log))
	}
	s := &supervisor{
		opts: opts,
		log:  opts.Logger.With("component", "entrypoint"),
		out:  newRotatingLog(opts.Log, opts.MaxLogBytes),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	first := make(chan struct{})
	go s.run(first)
	<-first
	return s
}

// run starts the entrypoint and starts it again after a failure, until it
// finishes, has failed MaxRestarts+1 times, or Stop.
func (s *supervisor) run(first chan struct{}) {
	defer close(s.done)
	if len(s.opts.Argv) == 0 {
		s.note("the image names no ENTRYPOINT or CMD: nothing to start")
		s.log.Warn("entrypoint: image, but the image names no ENTRYPOINT or CMD")
		close(first)
		return
	}
	backoff := s.opts.Backoff
	for attempt := 0; ; attempt++ {
		cmd, copied, err := s.start()
		if attempt == 0 {
			close(first)
		}
		if err != nil {
			if !errors.Is(err, errStopped) {
				s.note("the entrypoint %s could not be started: %v; not retried", quoteArgv(s.opts.Argv), err)
				s.log.Error("entrypoint could not be started", "argv", s.opts.Argv, "err", err)
			}
			return
		}
		began := time.Now()
		err = cmd.Wait()
		s.mu.Lock()
		s.pgid = 0
		stopped := s.stopped
		s.mu.Unlock()
		copied.wait(s.opts.KillGrace)
		code := exitCode(cmd, err)
		took := time.Since(began).Round(time.Millisecond)
		switch {
		case stopped:
			s.note("the entrypoint (pid %d) ended with the session (exit code %d after %v)", cmd.Process.Pid, code, took)
			return
		case code == 0:
			s.note("the entrypoint (pid %d) exited with code 0 after %v: finished, not restarted", cmd.Process.Pid, took)
			s.log.Info("entrypoint finished", "pid", cmd.Process.Pid, "took", took)
			return
		case attempt >= s.opts.MaxRestarts:
			s.note("the entrypoint (pid %d) exited with code %d after %v; not restarted again (%d restarts)", cmd.Process.Pid, code, took, attempt)
			s.log.Warn("entrypoint failed; not restarted again", "pid", cmd.Process.Pid, "code", code, "restarts", attempt)
			return
		}
		s.note("the entrypoint (pid %d) exited with code %d after %v; restart %d of %d in %v", cmd.Process.Pid, code, took, attempt+1, s.opts.MaxRestarts, backoff)
		s.log.Warn("entrypoint failed; restarting", "pid", cmd.Process.Pid, "code", code, "restart", attempt+1, "in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		backoff *= 2
	}
}

var errStopped = errors.New("stopped")

// start starts the entrypoint once, unless Stop came first.
func (s *supervisor) start() (*exec.Cmd, *copier, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(s.opts.Argv[0], s.opts.Argv[1:]...)
	cmd.Env = s.opts.Env
	cmd.Dir = s.opts.Dir
	if cmd.Dir == "" {
		cmd.Dir = "/"
	}
	cmd.Stdout, cmd.Stderr = w, w // stdin: /dev/null
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		_ = r.Close()
		_ = w.Close()
		return nil, nil, errStopped
	}
	err = cmd.Start()
	if err == nil {
		s.pgid = cmd.Process.Pid // Setsid: its own group
	}
	s.mu.Unlock()
	_ = w.Close() // the child has it
	if err != nil {
		_ = r.Close()
		return nil, nil, err
	}
	if err := preferForOOMKill(cmd.Process.Pid); err != nil {
		s.log.Debug("entrypoint: raising its oom_score_adj", "err", err)
	}
	s.note("started the entrypoint %s in %s (pid %d)", quoteArgv(s.opts.Argv), cmd.Dir, cmd.Process.Pid)
	s.log.Info("entrypoint started", "argv", s.opts.Argv, "dir", cmd.Dir, "pid", cmd.Process.Pid)
	c := &copier{r: r, done: make(chan struct{})}
	s.mu.Lock()
	s.copiers = append(s.copiers, c)
	s.mu.Unlock()
	go func() {
		defer close(c.done)
		_, _ = io.Copy(s.out, r)
	}()
	return cmd, c, nil
}

// Stop ends the entrypoint with the session: SIGTERM to its process group,
// SIGKILL after KillGrace, and no restart. It returns once the supervision
// ended. Idempotent; a nil supervisor has nothing to stop.
func (s *supervisor) Stop() {
	if s == nil {
		return
	}
	s.mu.Lock()
	first := !s.stopped
	s.stopped = true
	pgid := s.pgid
	s.mu.Unlock()
	if first {
		close(s.stop)
	}
	if pgid > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
	}
	t := time.NewTimer(s.opts.KillGrace)
	defer t.Stop()
	select {
	case <-s.done:
	case <-t.C:
		s.mu.Lock()
		pgid = s.pgid
		s.mu.Unlock()
		if pgid > 0 {
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
		}
		<-s.done
	}
	s.closeCopiers()
}

// note writes a line of sandboxd's own into the log.
func (s *supervisor) note(format string, args ...any) {
	s.out.line("[sandboxd " + time.Now().UTC().Format(time.RFC3339) + "] " + fmt.Sprintf(format, args...))
}

// copier drains one run's output pipe into the log.
type copier struct {
	r    *os.File
	done chan struct{}
}

// wait lets the copy finish what the process wrote, for at most grace: a
// process it left behind holding the pipe (a daemon) is not waited for,
// and the copy goes on for it (closing the pipe would kill it with
// SIGPIPE at its next write).
func (c *copier) wait(grace time.Duration) {
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
	case <-t.C:
	}
}

// closeCopiers ends the copies still running (their processes are gone or
// being killed with the session) and then the log.
func (s *supervisor) closeCopiers() {
	s.mu.Lock()
	copiers := s.copiers
	s.copiers = nil
	s.mu.Unlock()
	for _, c := range copiers {
		_ = c.r.Close()
		<-c.done
	}
	s.out.close()
}

func exitCode(cmd *exec.Cmd, err error) int {
	ps := cmd.ProcessState
	if ps == nil {
		if err != nil {
			return -1
		}
		return 0
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func quoteArgv(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		q[i] = strconv.Quote(a)
	}
	return "[" + strings.Join(q, " ") + "]"
}

// preferForOOMKill raises a child's oom_score_adj (any process may raise
// one of its own user's).
func preferForOOMKill(pid int) error {
	return os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(entrypointOOMScore), 0)
}

// entrypointEnv is the environment of the entrypoint: the agent's, as the
// container's, without the runtime's facts of the image.
func entrypointEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		if !strings.HasPrefix(kv, imageVarPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

// imageVarPrefix starts the variables a runtime sets for the agent
// (proto.EnvEntrypoint, and the terminal's shell_init facts).
const imageVarPrefix = "SANDBOXD_IMAGE_"

// logCapFor is the size of one entrypoint log file in dir: a sixteenth of
// its filesystem (the state tmpfs, shared with the terminal's saved
// outputs), between 256 KiB and 4 MiB; two files are kept.
func logCapFor(dir string) int64 {
	const lo, hi = 256 << 10, 4 << 20
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return lo
	}
	return max(lo, min(hi, int64(st.Blocks)*st.Bsize/16))
}

// rotatingLog is the entrypoint's log: at most max bytes in the file, the
// previous max bytes in file.1. The files are opened without following a
// link and without blocking on a FIFO: the folder is the session user's,
// and so is what the session's code may put there. A log that cannot be
// written drops the output (the process is never blocked by it).
type rotatingLog struct {
	path string
	max  int64

	mu     sync.Mutex
	f      *os.File
	size   int64
	failed bool
}

func newRotatingLog(path string, maxBytes int64) *rotatingLog {
	l := &rotatingLog{path: path, max: maxBytes}
	l.f = l.open(os.O_TRUNC)
	return l
}

func (l *rotatingLog) open(flag int) *os.File {
	f, err := os.OpenFile(l.path, os.O_WRONLY|os.O_CREATE|flag|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0o600)
	if err == nil {
		if st, serr := f.Stat(); serr != nil || !st.Mode().IsRegular() {
			_ = f.Close()
			err = fmt.Errorf("%s is not a regular file", l.path)
		}
	}
	if err != nil {
		if !l.failed {
			slog.Warn("entrypoint: its log cannot be written; its output is dropped", "path", l.path, "err", err)
		}
		l.failed = true
		return nil
	}
	l.failed = false
	return f
}

// Write never fails: what cannot be written is dropped.
func (l *rotatingLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		if l.size >= l.max {
			l.rotate()
		}
		room := l.max - l.size
		chunk := p[:min(int64(len(p)), room)]
		if l.f != nil {
			if _, err := l.f.Write(chunk); err != nil {
				_ = l.f.Close()
				l.f = nil
			}
		}
		l.size += int64(len(chunk))
		p = p[len(chunk):]
	}
	return n, nil
}

func (l *rotatingLog) line(s string) { _, _ = l.Write([]byte(s + "\n")) }

// rotate moves the file to file.1 and starts an empty one.
func (l *rotatingLog) rotate() {
	if l.f != nil {
		_ = l.f.Close()
	}
	if err := os.Rename(l.path, l.path+".1"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		slog.Debug("entrypoint: rotating its log", "err", err)
	}
	l.f = l.open(os.O_TRUNC)
	l.size = 0
}

func (l *rotatingLog) close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f != nil {
		_ = l.f.Close()
		l.f = nil
	}
}
