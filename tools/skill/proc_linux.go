package skill

import (
	"errors"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// waitExit reports when cmd's process has exited without reaping it: while
// it is a zombie its pid, which is its process group's id, cannot be
// reused, so killing the group after it exited cannot hit another process.
// reap then reaps it (cmd.Wait).
func waitExit(cmd *exec.Cmd) (exited <-chan struct{}, reap func() error) {
	ch := make(chan struct{})
	pid := cmd.Process.Pid
	go func() {
		defer close(ch)
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if !errors.Is(err, syscall.EINTR) {
				return // exited, or an error that cmd.Wait will report
			}
		}
	}()
	return ch, cmd.Wait
}
