//go:build linux

package bash

import (
	"bytes"
	"os"
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
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	want := []byte(tag)
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		state, session, ok := procStat(pid)
		if !ok || state == 'Z' || state == 'X' {
			continue
		}
		if session == sid || (tag != "" && hasEnvEntry(pid, want)) {
			pids = append(pids, pid)
		}
	}
	return pids
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

// signalSession sends sig to every live process of session sid and reports
// how many there were.
func signalSession(sid int, tag string, sig unix.Signal) int {
	pids := sessionMembers(sid, tag)
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
	return len(pids)
}
