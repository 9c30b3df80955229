//go:build linux

package pty

import (
	"errors"
	"os"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Member is a live process found by ScanSession, with its process group
// and state as read.
type Member struct {
	PID, Pgrp int
	State     byte
}

// Stopped reports whether the member was stopped when read.
func (m Member) Stopped() bool { return m.State == 'T' || m.State == 't' }

// ScanSession lists the live (non-zombie) processes of session sid, and
// those match accepts (nil: none), newest first. The caller's own process
// and PID 1 are never listed.
func ScanSession(sid int, match func(pid int) bool) []Member {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	names, _ := d.Readdirnames(-1) // what was read, even on an error
	_ = d.Close()
	self := os.Getpid()
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil && pid > 1 && pid != self {
			pids = append(pids, pid)
		}
	}
	// Newest first: a process that forks and exits at once is read soonest
	// after the listing, before it can have handed over to a child the
	// listing missed.
	slices.Sort(pids)
	slices.Reverse(pids)
	var ms []Member
	for _, pid := range pids {
		state, pgrp, session, ok := ProcStatGroup(pid)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		if session == sid || (match != nil && match(pid)) {
			ms = append(ms, Member{PID: pid, Pgrp: pgrp, State: state})
		}
	}
	return ms
}

// Sweeper ends a terminal session's processes (the terminal tool's shell,
// an interactive PTY's program): it signals every member a scan finds and
// every process group any scan of it found.
//
// A scan is no snapshot: it lists /proc and then reads each process, so a
// process that forks and exits quickly (a fork bomb churning at its pids
// limit) can have a child the listing missed by the time its own entry is
// read, and a whole chain of them can slip past every scan. kill(2) on a
// process group is atomic: the kernel signals every member, and a fork
// racing it is restarted so that the child is signalled too. A job's
// processes keep its group (only setpgid or setsid leaves it), so one
// sighting of any member is enough to reach all of them from then on.
// Groups are only those seen in the session during this sweep: a group's
// number is not reused while any process is in the group.
//
// A member is signalled by pidfd, never by its number (see SignalIf): a
// bomb churning at its limit wraps the pid space (32,768 numbers) in
// seconds, and a member that ended between the scan and the signal may
// have handed its number to a new thread of the agent, which kill(2)
// would have killed whole (issue 23: the session died with its agent,
// SIGKILL, during a reset under load).
type Sweeper struct {
	sid    int
	scan   func() []Member
	match  func(pid int) bool
	groups map[int]bool
}

// NewSweeper sweeps session sid (whose leader's group is sid): its members
// and the processes match accepts (nil: none), as ScanSession finds them.
func NewSweeper(sid int, match func(pid int) bool) *Sweeper {
	return &Sweeper{
		sid:    sid,
		scan:   func() []Member { return ScanSession(sid, match) },
		match:  match,
		groups: map[int]bool{sid: true},
	}
}

// member reports whether pid is, now, a live process the sweep is after.
func (w *Sweeper) member(pid int) bool {
	state, session, ok := ProcStat(pid)
	if !ok || state == 'Z' || state == 'X' {
		return false
	}
	return session == w.sid || (w.match != nil && w.match(pid))
}

// Signal sends sig to every member found and every group seen, and
// reports how many members it found and how many of them were not
// stopped.
func (w *Sweeper) Signal(sig unix.Signal) (found, running int) {
	ms := w.scan()
	for _, m := range ms {
		if m.Pgrp > 1 {
			w.groups[m.Pgrp] = true
		}
	}
	for g := range w.groups {
		_ = unix.Kill(-g, sig) // ESRCH: the group has ended
	}
	for _, m := range ms {
		_ = SignalIf(m.PID, sig, w.member)
		if !m.Stopped() {
			running++
		}
	}
	return len(ms), running
}

// SignalIf sends sig to process pid if still(pid) holds once the process
// is pinned by a pidfd, and reports whether it did. A number read from
// /proc names a process only until that process ends: by the time it is
// signalled, it may be another process's, or a thread's of another
// process (kill(2) on a thread's id signals its whole process). A pidfd
// names one process for good: pidfd_open refuses a thread that is not its
// process's leader, and a process that ends after the open only makes the
// signal fail (ESRCH). still is asked after the open, so what it reads of
// /proc is the pinned process's while that one lives. Where pidfds are
// missing (a kernel before 5.3, a runtime that refuses them), it falls
// back to checking still and then kill(2): the window is narrower, not
// closed.
func SignalIf(pid int, sig unix.Signal, still func(pid int) bool) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		if errors.Is(err, unix.ENOSYS) || errors.Is(err, unix.EPERM) {
			return still(pid) && unix.Kill(pid, sig) == nil
		}
		return false // ESRCH: ended; EINVAL: a thread's id now
	}
	defer unix.Close(fd)
	if !still(pid) {
		return false
	}
	return unix.PidfdSendSignal(fd, sig, nil, 0) == nil
}

// CleanRounds and CleanSpan are how many freeze rounds in a row, and over
// how long at least, must find nothing of the session running before it
// counts as frozen (each round has its own chance to sight a fast chain).
const (
	CleanRounds = 5
	CleanSpan   = 20 * time.Millisecond
)

// FreezeAndKill ends the session's processes in two phases, each bounded
// by bound: SIGSTOP rounds until CleanRounds rounds in a row over at least
// CleanSpan find nothing running (a stopped process cannot fork, so a fork
// bomb stops growing while it is rounded up; a count that merely stays
// level is no proof, a bomb at its pids limit churns at a constant size),
// then SIGKILL rounds until two in a row find nobody. extra, if not nil,
// is called with each SIGKILL round's signal and reports whether it
// signalled a process of its own (a leader not reaped yet). The bound is
// for processes that cannot stop (an uninterruptible sleep), not for a
// slow round: a caller starved of CPU by the bomb still stops more of it
// each round, and every stopped process frees CPU. It reports whether the
// session froze and how many processes the last round still found.
func (w *Sweeper) FreezeAndKill(bound time.Duration, extra func(unix.Signal) bool) (frozen bool, left int) {
	for end, clean, since := time.Now().Add(bound), 0, time.Now(); time.Now().Before(end); time.Sleep(time.Millisecond) {
		if _, running := w.Signal(unix.SIGSTOP); running > 0 {
			clean, since = 0, time.Now()
			continue
		}
		if clean++; clean >= CleanRounds && time.Since(since) >= CleanSpan {
			frozen = true
			break
		}
	}
	// Until none is left: members that forked between a scan and the kill
	// of their parent (none, once frozen) are caught by the next round.
	for end, clean := time.Now().Add(bound), 0; clean < 2; time.Sleep(time.Millisecond) {
		left, _ = w.Signal(unix.SIGKILL)
		if extra != nil && extra(unix.SIGKILL) {
			left++
		}
		if left > 0 {
			clean = 0
		} else {
			clean++
		}
		if !time.Now().Before(end) {
			break
		}
	}
	return frozen, left
}
