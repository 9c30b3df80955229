package agent

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/internal/pty"
	"github.com/sandboxd/sandboxd/tools"
)

// Bounds of the agent's PTYs (the protocol's are in package proto).
const (
	// ptyChunk is the most one pty/output carries.
	ptyChunk = 32 << 10
	// ptyMaxInput bounds the input accepted but not yet written to a PTY
	// (its program does not read it); more is refused with ErrBusy.
	ptyMaxInput = 1 << 20
	// ptyKillGrace is how long the processes of a closing PTY have between
	// SIGHUP and SIGKILL.
	ptyKillGrace = time.Second
	// ptyKillBound bounds each of the freeze and kill phases after it
	// (pty.Sweeper.FreezeAndKill): for processes that cannot stop at once.
	ptyKillBound = 10 * time.Second
	// ptyDrain bounds how long a PTY whose process ended keeps reading
	// what is still in the pty (a process that left the session may hold
	// it open) and waits for the host's acknowledgements.
	ptyDrain = 2 * time.Second
)

// agentPTY is one PTY on the agent side: a command on a pseudo-terminal, or
// a read-only view of a tool's output. Three goroutines serve it: the pump
// sends output within the window, the writer feeds input to the program,
// the waiter reaps the process and starts the end.
type agentPTY struct {
	id  uint64
	c   *conn
	log *slog.Logger

	master *os.File // nil when watching
	cmd    *exec.Cmd
	pid    int
	watch  *watchBuffer // nil for a command
	stopW  func()       // stops the watch

	mu      sync.Mutex
	unacked int
	seq     uint64
	input   [][]byte
	inBytes int
	status  proto.PTYExit
	ending  bool

	credit   chan struct{} // capacity 1: an ack arrived
	inputReq chan struct{} // capacity 1: input arrived
	exited   chan struct{} // the process was reaped (closed at once when watching)
	drainBy  chan struct{} // closed when the drain period ends
	pumpDone chan struct{}
	done     chan struct{} // pty/exit sent, everything released

	endOnce sync.Once
}

// start runs the command (or starts watching) and the PTY's goroutines.
func (t *agentPTY) start(o proto.PTYOptions) (*proto.PTYOpened, error) {
	if o.Watch != "" {
		t.watch = newWatchBuffer()
		stop, err := t.c.s.opts.Toolset.Watch(o.Watch, t.watch.write)
		if err != nil {
			if errors.Is(err, tools.ErrNotWatchable) || errors.Is(err, tools.ErrUnknownTool) {
				err = fmt.Errorf("%w: %w", proto.ErrInvalidParams, err)
			}
			return nil, err
		}
		t.stopW = stop
		close(t.exited) // nothing to reap
		go t.pump(t.watch)
		return &proto.PTYOpened{}, nil
	}
	argv, err := ptyCommand(o.Command)
	if err != nil {
		return nil, err
	}
	master, slave, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", proto.ErrInternal, err)
	}
	if err := pty.SetSize(master, uint16(o.Rows), uint16(o.Cols)); err != nil {
		_ = master.Close() // unused; the size error is the one to report
		_ = slave.Close()
		return nil, fmt.Errorf("%w: setting the pty's size: %w", proto.ErrInternal, err)
	}
	cmd := exec.Command(argv.path, argv.args[1:]...)
	cmd.Args[0] = argv.arg0
	cmd.Dir = t.c.s.opts.Workspace
	cmd.Env = ptyEnv(os.Environ(), argv.path)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	// Its own session with the pty as controlling terminal: job control
	// works, ^C and ^Z reach the foreground job, and the session is what
	// close ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = cmd.Start()
	_ = slave.Close() // the child has it; our copy would keep the pty open after it exits
	if err != nil {
		_ = master.Close() // nothing ran on it
		return nil, fmt.Errorf("%w: starting %s: %w", proto.ErrInvalidParams, strings.Join(argv.args, " "), err)
	}
	t.master, t.cmd, t.pid = master, cmd, cmd.Process.Pid
	if err := preferForOOM(t.pid); err != nil {
		t.log.Debug("pty: raising the process's oom_score_adj", "err", err)
	}
	go t.pump(master)
	go t.writeInput()
	go t.wait()
	return &proto.PTYOpened{PID: t.pid, Command: argv.args}, nil
}

// ptyArgv is what a PTY runs: the program's path, the argv as asked (or
// the login shell's), and argv[0] as the program sees it.
type ptyArgv struct {
	path string
	args []string
	arg0 string
}

// ptyCommand resolves a command, or the user's login shell for none: its
// argv[0] starts with "-", which makes any shell a login shell (bash, dash
// and busybox read /etc/profile and ~/.profile).
func ptyCommand(command []string) (ptyArgv, error) {
	if len(command) > 0 {
		path, err := exec.LookPath(command[0])
		if err != nil {
			return ptyArgv{}, fmt.Errorf("%w: command %q: %w", proto.ErrInvalidParams, command[0], err)
		}
		return ptyArgv{path: path, args: command, arg0: command[0]}, nil
	}
	shell := loginShell(os.Getuid())
	if shell == "" {
		for _, c := range []string{"bash", "/bin/bash", "/usr/bin/bash", "sh", "/bin/sh"} {
			if p, err := exec.LookPath(c); err == nil {
				shell = p
				break
			}
		}
	}
	if shell == "" {
		return ptyArgv{}, fmt.Errorf("%w: no login shell: the user's /etc/passwd entry names none that runs, and no bash or sh was found", proto.ErrInvalidParams)
	}
	return ptyArgv{path: shell, args: []string{shell, "-l"}, arg0: "-" + filepath.Base(shell)}, nil
}

// loginShell is uid's shell in /etc/passwd, if it names an executable.
func loginShell(uid int) string {
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return ""
	}
	defer func() { _ = f.Close() }() // read-only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 7 || fields[2] != strconv.Itoa(uid) {
			continue
		}
		sh := fields[6]
		if st, err := os.Stat(sh); err == nil && filepath.IsAbs(sh) && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return sh
		}
		return ""
	}
	return ""
}

// ptyEnv is the agent's environment with TERM=xterm-256color and SHELL
// set: what a terminal emulator gives the shell it starts.
func ptyEnv(inherited []string, shell string) []string {
	env := slices.DeleteFunc(slices.Clone(inherited), func(kv string) bool {
		return strings.HasPrefix(kv, "TERM=") || strings.HasPrefix(kv, "COLUMNS=") || strings.HasPrefix(kv, "LINES=")
	})
	env = append(env, "TERM=xterm-256color")
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "SHELL=") }) {
		env = append(env, "SHELL="+shell)
	}
	return env
}

// pump sends the PTY's output as pty/output notifications, at most
// PTYWindow bytes ahead of the host's acknowledgements.
func (t *agentPTY) pump(src io.Reader) {
	defer close(t.pumpDone)
	buf := make([]byte, ptyChunk)
	for {
		if !t.waitCredit() {
			return
		}
		n, err := src.Read(buf)
		if n > 0 && err == nil && t.master != nil {
			n, err = t.gather(buf, n)
		}
		if n > 0 {
			t.mu.Lock()
			t.unacked += n
			t.seq++
			seq := t.seq
			t.mu.Unlock()
			if t.c.notify(proto.MethodPTYOutput, proto.PTYOutputParams{PTY: t.id, Seq: seq}, buf[:n]) != nil {
				return // the connection is gone
			}
		}
		if err != nil {
			return // EIO: every process holding the pty has closed it; EOF: the watch ended
		}
	}
}

// ptyGather is how long the pump goes on reading after a read, to send
// what a program writes in many small pieces (a line at a time: stdout on
// a terminal is line-buffered) in one notification: without it, `seq 1
// 200000` made 200,000 frames. It is what a keystroke's echo waits more.
const ptyGather = time.Millisecond

// gather reads on into buf[n:] for up to ptyGather, or until buf is full,
// and returns the bytes in buf and a read error other than the deadline.
func (t *agentPTY) gather(buf []byte, n int) (int, error) {
	if err := t.master.SetReadDeadline(time.Now().Add(ptyGather)); err != nil {
		return n, nil // closed meanwhile: the next read says so
	}
	defer func() { _ = t.master.SetReadDeadline(time.Time{}) }() // closed meanwhile: the next read says so
	for n < len(buf) {
		m, err := t.master.Read(buf[n:])
		n += m
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// waitCredit waits until the window has room; false when the PTY must stop
// sending (the connection ended, or the drain period is over).
func (t *agentPTY) waitCredit() bool {
	for {
		t.mu.Lock()
		room := t.unacked < proto.PTYWindow
		t.mu.Unlock()
		if room {
			return true
		}
		select {
		case <-t.credit:
		case <-t.c.ctx.Done():
			return false
		case <-t.drainBy:
			return false
		}
	}
}

// ack returns n bytes of window.
func (t *agentPTY) ack(n int) {
	t.mu.Lock()
	t.unacked = max(0, t.unacked-n)
	t.mu.Unlock()
	select {
	case t.credit <- struct{}{}:
	default:
	}
}

// addInput queues input for the program; it never blocks (it runs on the
// connection's read loop, which keeps inputs in order).
func (t *agentPTY) addInput(b []byte) error {
	if t.master == nil {
		return fmt.Errorf("%w: pty %d watches a tool: it is read-only", proto.ErrInvalidParams, t.id)
	}
	if len(b) == 0 {
		return nil
	}
	t.mu.Lock()
	if t.ending {
		t.mu.Unlock()
		return fmt.Errorf("%w %d: it is ending", proto.ErrUnknownPTY, t.id)
	}
	if t.inBytes+len(b) > ptyMaxInput {
		held := t.inBytes
		t.mu.Unlock()
		return fmt.Errorf("%w: pty %d holds %d bytes of input its program has not read (limit %d)", proto.ErrBusy, t.id, held, ptyMaxInput)
	}
	t.input = append(t.input, b)
	t.inBytes += len(b)
	t.mu.Unlock()
	select {
	case t.inputReq <- struct{}{}:
	default:
	}
	return nil
}

// writeInput writes queued input to the pty in order until the PTY ends.
func (t *agentPTY) writeInput() {
	for {
		select {
		case <-t.inputReq:
		case <-t.exited:
			return
		}
		for {
			t.mu.Lock()
			if len(t.input) == 0 {
				t.mu.Unlock()
				break
			}
			b := t.input[0]
			t.input = t.input[1:]
			t.mu.Unlock()
			_, err := t.master.Write(b)
			t.mu.Lock()
			t.inBytes -= len(b)
			t.mu.Unlock()
			if err != nil {
				return // the pty is closing (its write deadline has passed)
			}
		}
	}
}

func (t *agentPTY) resize(rows, cols int) error {
	if t.master == nil {
		return fmt.Errorf("%w: pty %d watches a tool: its size is the tool's", proto.ErrInvalidParams, t.id)
	}
	if rows < 1 || rows > proto.MaxPTYSize || cols < 1 || cols > proto.MaxPTYSize {
		return fmt.Errorf("%w: rows and cols must be 1 to %d, got %dx%d", proto.ErrInvalidParams, proto.MaxPTYSize, rows, cols)
	}
	if err := pty.SetSize(t.master, uint16(rows), uint16(cols)); err != nil {
		return fmt.Errorf("%w: resizing pty %d: %w", proto.ErrInternal, t.id, err)
	}
	return nil
}

// wait reaps the process and ends the PTY.
func (t *agentPTY) wait() {
	err := t.cmd.Wait()
	st := proto.PTYExit{}
	if ps := t.cmd.ProcessState; ps != nil {
		st.ExitCode = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			st.ExitCode = 128 + int(ws.Signal())
			st.Signal = unix.SignalName(ws.Signal())
		}
	} else if err != nil {
		st = proto.PTYExit{ExitCode: -1, Error: err.Error()}
	}
	t.mu.Lock()
	t.status = st
	t.mu.Unlock()
	close(t.exited)
	go t.end()
}

// end ends the PTY once: a program still running is hung up (the pty's
// master closes, as when a terminal's window closes), and every process of
// its session gets SIGHUP, then SIGKILL after ptyKillGrace; after a program
// that ended by itself, what it printed last is still sent (for up to
// ptyDrain); then pty/exit, and the PTY is forgotten. It returns when all
// of that is done.
func (t *agentPTY) end() {
	t.endOnce.Do(func() {
		t.mu.Lock()
		t.ending = true
		t.mu.Unlock()
		// The drain period bounds what comes after: reading a pty that a
		// process outside the session still holds, and waiting for the
		// host's acknowledgements.
		drain := time.AfterFunc(ptyDrain, func() {
			close(t.drainBy)
			if t.master != nil {
				_ = t.master.Close() // the pump's pending read ends with it
			}
		})
		defer drain.Stop()
		if t.master != nil {
			select {
			case <-t.exited:
				// It ended by itself: what it printed last is still read.
			default:
				// A hang-up, as when a terminal's window closes: the
				// kernel sends SIGHUP to the session's leader and its
				// foreground job, and their reads of the terminal end (a
				// shell waiting in readline may not act on a signal alone
				// until its read returns).
				_ = t.master.Close() // the pump's pending read ends with it
			}
			t.hangUp()
			// Output still in the pty is read until every holder has
			// closed it (EIO), or the drain period ends.
			_ = t.master.SetWriteDeadline(time.Now()) // a blocked input write gives up
		} else {
			t.stopW()
			t.watch.close()
		}
		<-t.pumpDone
		if t.master != nil {
			_ = t.master.Close() // the pump has ended; nothing is pending on it
		}
		t.mu.Lock()
		st := t.status
		t.mu.Unlock()
		// The slot is free before the host hears of the end: an open that
		// follows pty/exit finds it free.
		t.c.s.releasePTY(t.c, t.id)
		// Best effort: a connection that is gone has no one to tell.
		_ = t.c.notify(proto.MethodPTYExit, proto.PTYExitParams{PTY: t.id, PTYExit: st}, nil)
		t.log.Info("pty ended", "exit_code", st.ExitCode, "signal", st.Signal)
		close(t.done)
	})
	<-t.done
}

// hangUp ends every process of the PTY's session: SIGHUP and SIGCONT (a
// stopped job acts on SIGHUP only once continued), then, after up to
// ptyKillGrace, what is left is frozen and killed (pty.Sweeper).
func (t *agentPTY) hangUp() {
	// The terminal tool's sweeper (decision 0012): a scan of /proc is no
	// snapshot, so a fork bomb's churning chains can slip past any one
	// scan; process groups seen once are signalled whole from then on, and
	// "nothing found" is believed only after rounds of freezing.
	w := pty.NewSweeper(t.pid, nil)
	leader := func(s unix.Signal) bool {
		select {
		case <-t.exited:
			return false
		default: // not reaped yet; by pidfd (os.Process), never by number
			_ = t.cmd.Process.Signal(s) // os.ErrProcessDone: just reaped
			return true
		}
	}
	sig := func(s unix.Signal) int {
		n, _ := w.Signal(s)
		if leader(s) {
			n++
		}
		return n
	}
	sig(unix.SIGHUP)
	sig(unix.SIGCONT)
	deadline := time.Now().Add(ptyKillGrace)
grace:
	for wait := time.Millisecond; time.Now().Before(deadline); wait = min(2*wait, 50*time.Millisecond) {
		select {
		case <-t.exited:
			if n, _ := w.Signal(0); n == 0 {
				break grace // likely all gone: FreezeAndKill makes sure
			}
		default:
		}
		time.Sleep(min(wait, time.Until(deadline)))
	}
	if frozen, left := w.FreezeAndKill(ptyKillBound, leader); !frozen || left > 0 {
		t.log.Warn("pty: the session's processes did not all end", "frozen", frozen, "left", left, "bound", ptyKillBound)
	}
	select {
	case <-t.exited:
	case <-time.After(5 * time.Second):
		t.log.Warn("pty: the process did not end after SIGKILL", "pid", t.pid)
	}
}

// preferForOOM gives a PTY's process the terminal tool's oom_score_adj
// (1000, inherited by all it starts), so that when the sandbox runs out of
// memory the kernel kills what the user runs, not the agent.
func preferForOOM(pid int) error {
	f, err := os.OpenFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("1000")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
