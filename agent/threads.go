package agent

import (
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// A fork bomb in the sandbox fills the pids cgroup, and the cgroup counts
// threads as well as processes. The Go runtime aborts the whole process
// ("runtime: failed to create new OS thread ... fatal error: newosproc")
// when it cannot clone a thread it needs, e.g. to run goroutines while a
// call blocks in a syscall; the agent is the container's main process, so
// the session would die with it. Threads the runtime made are never given
// back: idle ones wait for work. So the agent makes its spares up front,
// while pids are plentiful, and later needs are met without a clone.
const (
	// maxSpareThreads is the reserve with a generous pids limit. The agent
	// has a handful of syscalls in flight at most (a shell's wait, a file
	// read, a process start), far fewer than this.
	maxSpareThreads = 16
	// spareThreadShare: the reserve takes at most 1/8 of the pids limit,
	// so a tight limit is left to the session's own processes.
	spareThreadShare = 8
	minSpareThreads  = 2
)

var reserveOnce sync.Once

// reserveThreadsOnce makes the process's spare threads, once per process.
func reserveThreadsOnce() (n int) {
	reserveOnce.Do(func() { n = reserveThreads(spareThreads(pidsLimit())) })
	return n
}

// spareThreads sizes the reserve for a pids limit (0: none known).
func spareThreads(limit int) int {
	if limit <= 0 {
		return maxSpareThreads
	}
	return max(minSpareThreads, min(maxSpareThreads, limit/spareThreadShare))
}

// reserveThreads makes the runtime hold at least n OS threads at once, then
// lets them go idle: n goroutines each lock a thread and wait until all
// are locked, so each one pinned a thread of its own. Unlocked again, the
// threads join the runtime's idle list, where they stay.
func reserveThreads(n int) int {
	var locked, done sync.WaitGroup
	release := make(chan struct{})
	locked.Add(n)
	for range n {
		done.Go(func() {
			runtime.LockOSThread()
			locked.Done()
			<-release
			runtime.UnlockOSThread()
		})
	}
	locked.Wait()
	close(release)
	done.Wait()
	return n
}

// pidsLimit reads the pids limit of the process's cgroup (v1 as Docker
// mounts it in a container, or v2); 0 when there is none or it is unknown.
func pidsLimit() int {
	for _, p := range []string{"/sys/fs/cgroup/pids/pids.max", "/sys/fs/cgroup/pids.max"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if v, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && v > 0 {
			return v
		}
		return 0 // "max"
	}
	return 0
}
