//go:build linux

package bash

import (
	"bytes"
	"os"
	"strconv"

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
		pids[i] = m.PID
	}
	return pids
}

func sessionScan(sid int, tag string) []pty.Member {
	return pty.ScanSession(sid, tagMatch(tag))
}

// tagMatch accepts the processes whose initial environment holds tag (nil
// for no tag).
func tagMatch(tag string) func(pid int) bool {
	if tag == "" {
		return nil
	}
	want := []byte(tag)
	return func(pid int) bool { return hasEnvEntry(pid, want) }
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

// newSweeper sweeps the shell's session and what carries its tag (see
// pty.Sweeper).
func newSweeper(sid int, tag string) *pty.Sweeper {
	return pty.NewSweeper(sid, tagMatch(tag))
}
