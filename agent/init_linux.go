package agent

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// Undumpable marks this process non-dumpable (prctl PR_SET_DUMPABLE 0):
// its /proc/<pid> entries (fd, mem, environ) belong to root and same-uid
// processes can neither open its file descriptors through /proc nor
// ptrace it. The agent, its PID-1 init and agent-proxy call it first
// thing: they hold the host's stream, and the tools they serve run as the
// same uid. An execve resets the flag, so every process calls it itself.
func Undumpable() error {
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_DUMPABLE, 0): %w", err)
	}
	return nil
}

// forwarded are the signals Init passes on to the agent.
var forwarded = []os.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// Init is the container's PID 1: it starts the agent (this binary again,
// argv, as its only child) on its own stdin, stdout and stderr, points its
// own fd 0 and 1 at /dev/null so that the stream is held by the agent
// alone, forwards SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to
// it, reaps every process that ends (orphans of tools are re-parented to
// PID 1) and returns the agent's exit code (128+n when a signal n ended
// it) once the agent has ended. It never returns before that.
//
// A general wait4(-1) reaper is safe here and only here: PID 1 starts
// nothing but the agent, whose status it gets from the same wait4. The
// agent, which starts tools with os/exec, never reaps what it did not
// start (decision 0012).
//
// Call Undumpable before Init: fd 2 stays open, for Init's own messages.
func Init(argv []string, stderr io.Writer) int {
	// Threads for later, while pids are plentiful: a fork bomb in the
	// session must not stop the runtime of PID 1 (see threads.go).
	reserveThreads(minSpareThreads)
	sigs := make(chan os.Signal, 64)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwarded...)...)
	defer signal.Stop(sigs)
	pid, err := syscall.ForkExec("/proc/self/exe", argv, &syscall.ProcAttr{
		Env:   os.Environ(),
		Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		_, _ = fmt.Fprintf(stderr, "sandboxd init: starting the agent: %v\n", err)
		return 1
	}
	if null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0); err == nil {
		_ = syscall.Dup3(int(null.Fd()), 0, 0) // best effort: PID 1 is non-dumpable anyway
		_ = syscall.Dup3(int(null.Fd()), 1, 0)
		_ = null.Close()
	}
	for {
		if code, done := reapAll(pid); done {
			return code
		}
		if sig := <-sigs; sig != syscall.SIGCHLD {
			_ = syscall.Kill(pid, sig.(syscall.Signal)) // ESRCH: it just ended, and the next reap sees it
		}
	}
}

// reapAll reaps every child that has ended; done is set, with its exit
// code, when the agent (pid) is among them.
func reapAll(pid int) (code int, done bool) {
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || wpid <= 0 {
			return 0, false
		}
		if wpid != pid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus(), true
		case ws.Signaled():
			return 128 + int(ws.Signal()), true
		}
	}
}
