//go:build linux

package pty

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// startSession starts `sleep 600` as the leader of a session of its own.
func startSession(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sleep", "600")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd
}

// endedBy ends cmd with SIGTERM and reports the signal it died of: SIGKILL
// when a SIGKILL reached it first (a pending SIGKILL wins over a later
// signal, so this reads the past without waiting on the clock).
func endedBy(t *testing.T, cmd *exec.Cmd) syscall.Signal {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err := cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("%s ended with %v, want a signal", cmd, err)
	}
	return ee.Sys().(syscall.WaitStatus).Signal()
}

// A member the scan saw may have ended and its number been handed to
// another process before the signal (a bomb at its limit wraps the pid
// space in seconds). The sweep signals only a process that is a member
// when it is signalled: the stale entry's new owner lives on (issue 23:
// before this, kill(2) on the stale number killed the session's agent
// whose new thread held it, and the container with it). The real member
// is killed.
func TestSweeperSignalsOnlyCurrentMembers(t *testing.T) {
	swept, bystander := startSession(t), startSession(t)
	w := NewSweeper(swept.Process.Pid, nil)
	scan := w.scan
	w.scan = func() []Member {
		// What a scan returns when the bystander took a member's number
		// between the listing and the signal.
		return append(scan(), Member{PID: bystander.Process.Pid, State: 'S'})
	}
	if found, _ := w.Signal(unix.SIGKILL); found != 2 {
		t.Fatalf("found %d members, want the session's leader and the stale entry", found)
	}
	if sig := endedBy(t, bystander); sig != syscall.SIGTERM {
		t.Errorf("the process that took a member's number died of %v, want to live on (then SIGTERM)", sig)
	}
	if sig := endedBy(t, swept); sig != syscall.SIGKILL {
		t.Errorf("the session's leader died of %v, want SIGKILL", sig)
	}
}

// A thread's id is refused: kill(2) on it would signal its whole process.
func TestSignalIfRefusesAThreadsID(t *testing.T) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Skip(err)
	}
	self := os.Getpid()
	for _, e := range tasks {
		tid, _ := strconv.Atoi(e.Name())
		if tid == self {
			continue
		}
		if SignalIf(tid, 0, func(int) bool { return true }) {
			t.Fatalf("thread %d of this process was signalled as a process", tid)
		}
		return
	}
	t.Skip("this test process has one thread")
}

// SignalSession signals the session's members and nothing else.
func TestSignalSession(t *testing.T) {
	swept, bystander := startSession(t), startSession(t)
	if n := SignalSession(swept.Process.Pid, unix.SIGKILL); n != 1 {
		t.Errorf("signalled %d processes, want the session's leader", n)
	}
	if sig := endedBy(t, swept); sig != syscall.SIGKILL {
		t.Errorf("the session's leader died of %v, want SIGKILL", sig)
	}
	if sig := endedBy(t, bystander); sig != syscall.SIGTERM {
		t.Errorf("a process of another session died of %v", sig)
	}
}
