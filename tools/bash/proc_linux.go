//go:build linux

package bash

import (
	"bytes"
	"os"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/pty"
)

// sessionMembers lists the live (non-zombie) processes of session sid, and
// those whose initial environment holds tag (the shell's TagVar entry). With
// job control every pipeline of the shell has its own process group, so
// killing the shell's group alone would leave background jobs running; the
// session (the shell is its leader, started with Setsid) holds them all,
// and the tag finds what left it (setsid, a daemon's double fork) unless it
// also dropped its environment. Without /proc it finds none (the caller
// still signals the shell itself).
func sessionMembers(sid int, tag string) []int {
	ms := sessionScan(sid, tag)
	pids := make([]int, len(ms))
	for i, m := range ms {
		pids[i] = m.pid
	}
	return pids
}

// member is a process of the shell's session, with its state and
// process group as read.
type member struct {
	pid, pgrp int
	state     byte
}

// stopped reports whether the member was stopped when read.
func (m member) stopped() bool { return m.state == 'T' || m.state == 't' }

func sessionScan(sid int, tag string) []member {
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
	want := []byte(tag)
	var ms []member
	for _, pid := range pids {
		state, pgrp, session, ok := pty.ProcStatGroup(pid)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		if session == sid || (tag != "" && hasEnvEntry(pid, want)) {
			ms = append(ms, member{pid: pid, pgrp: pgrp, state: state})
		}
	}
	return ms
}

// hasEnvEntry reports whether process pid started with entry in its
// environment (readable for processes of the same user only).
func hasEnvEntry(pid int, entry []byte) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		return false
	}
	for len(b) > 0 {
		i := bytes.IndexByte(b, 0)
		if i < 0 {
			i = len(b)
		}
		if bytes.Equal(b[:i], entry) {
			return true
		}
		b = b[min(i+1, len(b)):]
	}
	return false
}

// procStat reads the state and session id of pid (see pty.ProcStat).
func procStat(pid int) (state byte, session int, ok bool) { return pty.ProcStat(pid) }

// sweeper signals a session's processes for terminate: every member a
// scan of /proc finds, and every process group any scan of it found.
//
// A scan is no snapshot: it lists /proc and then reads each process, so a
// process that forks and exits quickly (a fork bomb churning at its pids
// limit) can have a child the listing missed by the time its own entry is
// read, and a whole chain of them can slip past every scan. kill(2) on a
// process group is atomic: the kernel signals every member, and a fork
// racing it is restarted so that the child is signalled too. A job's
// processes keep its group (only setpgid or setsid leaves it), so one
// sighting of any member is enough to reach all of them from then on.
// Groups are only those seen in the session during this terminate: a
// group's number is not reused while any process is in the group.
type sweeper struct {
	sid    int
	tag    string
	groups map[int]bool
}

func newSweeper(sid int, tag string) *sweeper {
	return &sweeper{sid: sid, tag: tag, groups: map[int]bool{sid: true}}
}

// signal sends sig to every member found and every group seen, and reports
// how many members it found and how many of them were not stopped.
func (w *sweeper) signal(sig unix.Signal) (found, running int) {
	ms := sessionScan(w.sid, w.tag)
	for _, m := range ms {
		if m.pgrp > 1 {
			w.groups[m.pgrp] = true
		}
	}
	for g := range w.groups {
		_ = unix.Kill(-g, sig) // ESRCH: the group has ended
	}
	for _, m := range ms {
		_ = unix.Kill(m.pid, sig)
		if !m.stopped() {
			running++
		}
	}
	return len(ms), running
}
