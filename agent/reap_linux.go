package agent

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/internal/pty"
)

// killDescendants SIGKILLs every process descended from this one and
// returns how many it found. It runs after the toolset has closed, as a
// safety net: the executors end their own process groups, but a process
// that moved to a new session or group (setsid, a job-control shell) would
// otherwise outlive the agent until the container is removed.
func killDescendants() int {
	self := os.Getpid()
	killed := 0
	// A few rounds: a dying parent's children are re-parented (to init or a
	// subreaper) and may be missed in one scan; processes forked meanwhile
	// are caught in the next.
	for range 3 {
		parent := map[int]int{}
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, p := range stats {
			pid, ppid, ok := readPPid(p)
			if ok {
				parent[pid] = ppid
			}
		}
		found := 0
		for pid := range parent {
			if pid == self || !descends(pid, self, parent) {
				continue
			}
			// By pidfd, and only while pid still has the parent the scan
			// read: a number read from /proc may have been reused since.
			stillChild := func(pid int) bool {
				_, pp, ok := readPPid("/proc/" + strconv.Itoa(pid) + "/stat")
				return ok && pp == parent[pid]
			}
			if pty.SignalIf(pid, syscall.SIGKILL, stillChild) {
				found++
			}
		}
		if found == 0 {
			break
		}
		killed += found
	}
	return killed
}

func descends(pid, ancestor int, parent map[int]int) bool {
	for range 64 { // bounded: a pid loop in a racy snapshot must not hang us
		pp, ok := parent[pid]
		if !ok {
			return false
		}
		if pp == ancestor { // first: the agent may itself be pid 1
			return true
		}
		if pp <= 1 {
			return false
		}
		pid = pp
	}
	return false
}

// readPPid parses /proc/PID/stat: "pid (comm) state ppid ...", where comm
// may itself contain spaces and parentheses.
func readPPid(path string) (pid, ppid int, ok bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return 0, 0, false
	}
	pid, err = strconv.Atoi(strings.TrimSpace(s[:open]))
	if err != nil {
		return 0, 0, false
	}
	fields := strings.Fields(s[end+1:])
	if len(fields) < 2 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(fields[1])
	return pid, ppid, err == nil
}
