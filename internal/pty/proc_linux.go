//go:build linux

package pty

import (
	"bytes"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// ProcStat reads the state and session id from /proc/pid/stat.
func ProcStat(pid int) (state byte, session int, ok bool) {
	state, _, session, ok = ProcStatGroup(pid)
	return state, session, ok
}

// ProcStatGroup reads the state, process group and session id from
// /proc/pid/stat. The command name may hold spaces and parentheses, so
// fields are counted after the last ')'.
func ProcStatGroup(pid int) (state byte, pgrp, session int, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, 0, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, 0, false
	}
	// ") S ppid pgrp session ..."
	f := bytes.Fields(b[i+1:])
	if len(f) < 4 || len(f[0]) != 1 {
		return 0, 0, 0, false
	}
	g, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return 0, 0, 0, false
	}
	s, err := strconv.Atoi(string(f[3]))
	if err != nil {
		return 0, 0, 0, false
	}
	return f[0][0], g, s, true
}

// SignalSession sends sig to every live (non-zombie) process of session sid
// (a terminal's session: its leader and every job it started, whatever
// their process group) and reports how many there were. The caller's own
// process is never signalled, nor a number reused since it was read
// (SignalIf).
func SignalSession(sid int, sig unix.Signal) int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	self, n := os.Getpid(), 0
	inSession := func(pid int) bool {
		state, s, ok := ProcStat(pid)
		return ok && s == sid && state != 'Z' && state != 'X'
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		if inSession(pid) && SignalIf(pid, sig, inSession) {
			n++
		}
	}
	return n
}
