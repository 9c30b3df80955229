package e2e

// Abuse classes (security reference §2) against real sandboxes. Each test
// does what a model could do through the terminal of a Session and checks
// that the sandbox contains it: the limit hits the abusing process, the
// agent (the container's main process, whose death ends the session)
// survives, and other sessions and the host do not notice.

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// abuseRun runs a terminal command with a hard timeout (seconds) and
// returns the observation's text and how long the call took.
func abuseRun(t *testing.T, s *sandbox.Session, command string, timeout float64) (string, time.Duration) {
	t.Helper()
	args := map[string]any{"command": command, "timeout": timeout}
	if command == "" {
		args = map[string]any{"command": "", "reset": true}
	}
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(timeout+30)*time.Second)
	defer cancel()
	start := time.Now()
	obs, err := s.Call(ctx, "terminal", raw, nil)
	took := time.Since(start)
	require.NoError(t, err, "%q: the session must survive (state %s, %v)", command, s.State(), s.Err())
	require.False(t, obs.IsError, "%q: %s", command, obs.Text())
	return obs.Text(), took
}

// abuseReset resets the terminal: its shell and every process of its
// session are killed, a new shell starts.
func abuseReset(t *testing.T, s *sandbox.Session) string {
	t.Helper()
	text, _ := abuseRun(t, s, "", 10)
	require.Contains(t, text, "Terminal session has been reset.")
	return text
}

// abuseInt reads name=<int> from a command's output.
func abuseInt(t *testing.T, text, name string) int {
	t.Helper()
	m := regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(name)+`=(-?\d+)$`).FindAllStringSubmatch(text, -1)
	require.NotEmpty(t, m, "%s= not in %q", name, abuseTail(text))
	n, err := strconv.Atoi(m[len(m)-1][1])
	require.NoError(t, err)
	return n
}

// abuseTail is the end of a long output, for messages.
func abuseTail(text string) string {
	if len(text) > 600 {
		return "..." + text[len(text)-600:]
	}
	return text
}

// abuseAgentPid is the agent's pid: the terminal's shell is its child.
func abuseAgentPid(t *testing.T, s *sandbox.Session) int {
	t.Helper()
	text, _ := abuseRun(t, s, `echo "agent=$PPID"; tr '\0' ' ' </proc/$PPID/cmdline; echo`, 10)
	require.Contains(t, text, sandbox.AgentPath+" agent ")
	return abuseInt(t, text, "agent")
}

// Builtins only (no fork), so they run while the pids limit is exhausted.
const abusePids = `read -r cur </sys/fs/cgroup/pids/pids.current; read -r _ hits </sys/fs/cgroup/pids/pids.events; echo "pids=$cur"; echo "hits=$hits"`

// A fork bomb fills the session's pids limit and nothing beyond it: the
// bombed session's agent and shell keep answering, another session keeps
// its latency, the host can still start processes, and a reset ends it.
// (The agent used to die here: the Go runtime aborts when it cannot create
// a thread, so it now keeps spare threads; and the shell's prompt plumbing
// called `:`, which the bomb redefines.)
func TestAbuseForkBomb(t *testing.T) {
	t.Parallel()
	const pids = 128
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	other, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Limits: sandbox.Limits{Pids: pids, CPUs: 0.5}})
	require.NoError(t, err)
	agent := abuseAgentPid(t, s)
	var baseline time.Duration
	for range 5 {
		text, took := abuseRun(t, other, "echo ok", 10)
		require.Contains(t, text, "ok\n")
		baseline = max(baseline, took)
	}

	text, took := abuseRun(t, s, ":(){ :|:& };:", 10)
	// The bomb recurses in background jobs, so the command itself ends.
	assert.Contains(t, text, "[The command completed with exit code 0.]", abuseTail(text))
	t.Logf("bomb started in %v", took)

	var otherLat, selfLat []time.Duration
	var all strings.Builder
	maxPids, hits := 0, 0
	var hostWorst time.Duration
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		text, took := abuseRun(t, other, "echo ok", 10)
		require.Contains(t, text, "ok\n")
		otherLat = append(otherLat, took)

		text, took = abuseRun(t, s, abusePids, 10)
		all.WriteString(text)
		selfLat = append(selfLat, took)
		maxPids = max(maxPids, abuseInt(t, text, "pids"))
		hits = abuseInt(t, text, "hits")

		start := time.Now()
		require.NoError(t, exec.Command("true").Run(), "the host can start a process")
		hostWorst = max(hostWorst, time.Since(start))
		time.Sleep(100 * time.Millisecond)
	}
	slices.Sort(otherLat)
	slices.Sort(selfLat)
	t.Logf("other session: echo ok before the bomb max %v; during: %d calls, median %v, max %v", baseline,
		len(otherLat), otherLat[len(otherLat)/2], otherLat[len(otherLat)-1])
	t.Logf("bombed session: builtin calls median %v, max %v; pids max seen %d of %d, limit hit %d times; host fork+exec max %v",
		selfLat[len(selfLat)/2], selfLat[len(selfLat)-1], maxPids, pids, hits, hostWorst)

	assert.Positive(t, hits, "the bomb ran into pids.max")
	assert.LessOrEqual(t, maxPids, pids)
	assert.Contains(t, all.String(), "fork: retry: Resource temporarily unavailable", "what the bomb sees")
	// Bounds against a hang, not slowness (each call has a 10 s hard timeout
	// and a loaded machine answers an echo in well under a second): a bomb
	// that escaped its pids limit starves the other session and the host
	// outright, and a fork in the bombed session's plumbing waits on bash's
	// fork retries until that timeout.
	assert.Less(t, otherLat[len(otherLat)-1], 5*time.Second, "another session stays responsive")
	assert.Less(t, selfLat[len(selfLat)-1], 5*time.Second, "the bombed terminal answers (no fork retries in the plumbing)")
	assert.Less(t, hostWorst, 5*time.Second, "the host can still start a process")

	// A reset kills the shell's whole session, bomb included: what is left
	// is the agent's threads, init's (the agent binary as PID 1, decision
	// 0021) and the new shell (once init has reaped the last zombies).
	abuseReset(t, s)
	var cur, threads, initThreads int
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		text, _ = abuseRun(t, s, abusePids+`; while read -r k v; do [ "$k" = Threads: ] && echo "agent_threads=$v"; done </proc/$PPID/status; `+
			`while read -r k v; do [ "$k" = Threads: ] && echo "init_threads=$v"; done </proc/1/status; echo "agent=$PPID"`, 10)
		cur, threads, initThreads = abuseInt(t, text, "pids"), abuseInt(t, text, "agent_threads"), abuseInt(t, text, "init_threads")
		assert.Equal(t, agent, abuseInt(t, text, "agent"), "the same agent process")
		if cur <= threads+initThreads+1 || time.Now().After(end) {
			break
		}
	}
	t.Logf("after reset: %d pids, %d of them the agent's threads, %d init's", cur, threads, initThreads)
	assert.Equal(t, threads+initThreads+1, cur, "only the agent's threads, init's and the new shell are left")
	text, _ = abuseRun(t, s, "echo ok; ls /workspace >/dev/null && echo forked", 10)
	assert.Contains(t, text, "ok\nforked\n")
	assert.Equal(t, sandbox.StateReady, s.State())
}

// At the default limits (512 pids, a whole CPU) a bomb grows faster than a
// kill round takes it down: a reset must still give the session a shell
// (it failed every time with "fork/exec: resource temporarily unavailable"
// in the attack run of 2026-11-25, R2). The reset freezes the bomb before
// killing it and retries the shell's start while the pids drain.
func TestAbuseForkBombResetAtDefaultLimits(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: "sandboxd-default:latest"})
	require.NoError(t, err)
	text, _ := abuseRun(t, s, ":(){ :|:& };:", 10)
	require.Contains(t, text, "[The command completed with exit code 0.]", abuseTail(text))
	for end := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		text, _ = abuseRun(t, s, abusePids, 10)
		if abuseInt(t, text, "hits") > 0 {
			break // the bomb fills the limit
		}
		require.True(t, time.Now().Before(end), "the bomb never reached pids.max: %s", abuseTail(text))
	}
	time.Sleep(3 * time.Second) // let it churn at the limit, as an agent's bomb would
	text = abuseReset(t, s)
	assert.NotContains(t, text, "Terminal reset failed", abuseTail(text))
	text, _ = abuseRun(t, s, "echo ok; ls /workspace >/dev/null && echo forked", 10)
	assert.Contains(t, text, "ok\nforked\n", abuseTail(text))
	assert.Equal(t, sandbox.StateReady, s.State())
}

// With a small memory limit, the OOM killer takes the runaway processes,
// never the agent: the terminal's processes score 1000, the agent keeps
// the container's score (500). Many processes each smaller than the agent (the case
// that killed the agent, the largest process at equal scores), one huge
// process, and the shell itself growing.
func TestAbuseMemoryBomb(t *testing.T) {
	t.Parallel()
	const limit = sandbox.MinMemory // 64 MiB
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Limits: sandbox.Limits{Memory: limit}})
	require.NoError(t, err)
	h := containerOf(t, s.ID()).HostConfig
	assert.EqualValues(t, limit, h.Memory)
	assert.Equal(t, h.Memory, h.MemorySwap, "no swap")

	const cg = "/sys/fs/cgroup/memory/"
	text, _ := abuseRun(t, s, `echo "agent=$PPID"; echo "agent_adj=$(cat /proc/$PPID/oom_score_adj)"; `+
		`echo "shell_adj=$(cat /proc/$$/oom_score_adj)"; echo "cmd_adj=$(cat /proc/self/oom_score_adj)"; `+
		`echo "mem=$(cat `+cg+`memory.limit_in_bytes)"; echo "memsw=$(cat `+cg+`memory.memsw.limit_in_bytes)"`, 10)
	agent := abuseInt(t, text, "agent")
	assert.Equal(t, h.OomScoreAdj, abuseInt(t, text, "agent_adj"), "the agent keeps the container's score")
	assert.Less(t, h.OomScoreAdj, 1000)
	assert.Equal(t, 1000, abuseInt(t, text, "shell_adj"))
	assert.Equal(t, 1000, abuseInt(t, text, "cmd_adj"), "commands inherit the shell's score")
	assert.Equal(t, int(limit), abuseInt(t, text, "mem"))
	assert.Equal(t, int(limit), abuseInt(t, text, "memsw"), "memory+swap == memory: nothing swaps")

	// 40 pipelines whose tail holds 4 MB each until its input ends: 160 MB
	// at once in a 64 MiB cgroup, every process smaller than the agent.
	text, took := abuseRun(t, s, `for i in $(seq 40); do (head -c 4000000 /dev/zero; sleep 2) | tail >/dev/null & done; wait; echo finished`, 60)
	t.Logf("many processes: %v, %s", took, abuseTail(text))
	text, _ = abuseRun(t, s, `echo ok; echo "agent=$PPID"; grep oom_kill `+cg+`memory.oom_control | tr ' ' =`, 10)
	assert.Contains(t, text, "ok\n")
	assert.Equal(t, agent, abuseInt(t, text, "agent"), "the agent was not killed")
	kills := abuseInt(t, text, "oom_kill")
	assert.Positive(t, kills, "the OOM killer ran")

	// One process that grows without bound: it is killed, never the agent.
	// Usually it alone: the shell prints rc=137. Not always: once the
	// kernel's oom_reaper has reaped the victim (MMF_OOM_SKIP) while its
	// pages are still charged, the next charge (head writing into the pipe)
	// is a second OOM that skips it and takes the next process of score
	// 1000, the shell (seen under load, issue 23, run 6: the engine's oom
	// events and "The shell exited with code 137"). Both are the terminal
	// handling an OOM as documented; the agent's survival is checked below.
	text, took = abuseRun(t, s, `head -c 2000000000 /dev/zero | tail; echo "rc=$?"`, 60)
	t.Logf("one big process: %v, %s", took, abuseTail(text))
	if !strings.Contains(text, "The shell exited with code 137.") {
		assert.Equal(t, 137, abuseInt(t, text, "rc"), "SIGKILLed by the OOM killer")
	}

	// The shell itself: the terminal reports it and starts a new one.
	text, _ = abuseRun(t, s, `x=0123456789abcdef; while true; do x=$x$x; done`, 60)
	assert.Contains(t, text, "The shell exited with code 137.", abuseTail(text))

	text, _ = abuseRun(t, s, `echo ok; echo "agent=$PPID"; grep oom_kill `+cg+`memory.oom_control | tr ' ' =; `+
		`echo "peak=$(cat `+cg+`memory.memsw.max_usage_in_bytes)"`, 10)
	assert.Contains(t, text, "a new one was started")
	assert.Contains(t, text, "ok\n")
	assert.Equal(t, agent, abuseInt(t, text, "agent"), "the agent was not killed")
	assert.GreaterOrEqual(t, abuseInt(t, text, "oom_kill"), kills+2)
	// The kernel may charge a page past the limit before it reclaims.
	assert.LessOrEqual(t, abuseInt(t, text, "peak"), int(limit)+64<<10)
	assert.Equal(t, sandbox.StateReady, s.State())
}

// Filling /tmp stops at its size with ENOSPC; the session and the
// workspace keep working, and /tmp works again once the file is gone.
func TestAbuseTmpFill(t *testing.T) {
	t.Parallel()
	const size = 16 << 20
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Limits: sandbox.Limits{Tmpfs: size, Memory: 256 << 20}})
	require.NoError(t, err)
	text, _ := abuseRun(t, s, `dd if=/dev/zero of=/tmp/fill bs=1M 2>&1; echo "rc=$?"; echo "size=$(stat -c %s /tmp/fill)"; `+
		`echo "total_kb=$(df -k /tmp | awk 'NR==2{print $2}')"`, 30)
	assert.Contains(t, text, "dd: error writing '/tmp/fill': No space left on device")
	assert.Equal(t, 1, abuseInt(t, text, "rc"))
	assert.Equal(t, size, abuseInt(t, text, "size"), "stopped exactly at the tmpfs size")
	assert.Equal(t, size>>10, abuseInt(t, text, "total_kb"))

	text, _ = abuseRun(t, s, `echo more >/tmp/more; echo "rc=$?"; echo kept >/workspace/kept && cat /workspace/kept; echo ok`, 10)
	assert.Contains(t, text, "bash: echo: write error: No space left on device")
	assert.Equal(t, 1, abuseInt(t, text, "rc"))
	assert.Contains(t, text, "kept\nok\n", "the workspace and the session still work")

	text, _ = abuseRun(t, s, `rm /tmp/fill && echo again >/tmp/more && cat /tmp/more`, 10)
	assert.Contains(t, text, "again\n")
	assert.Equal(t, sandbox.StateReady, s.State())
}

// Every tmpfs a session can write (/tmp, a Disk-limited workspace and
// home, the agent's state folder) is charged to its memory limit and
// cannot be swapped out. Options whose tmpfs could take the memory are
// refused; a session left at the default /tmp (which follows Memory) can
// fill all of them and still run a command that needs memory, with no OOM
// kill. (With /tmp larger than memory, filling it got dd OOM-killed and
// every later command too.)
func TestAbuseTmpfsFillWithinMemory(t *testing.T) {
	t.Parallel()
	const memory, disk = 128 << 20, 16 << 20
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	_, err := m.Create(ctxT(t), sandbox.SessionOptions{Limits: sandbox.Limits{Memory: memory, Tmpfs: memory}})
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	assert.Contains(t, err.Error(), "/tmp (limits.tmpfs 128 MiB) = 128 MiB of tmpfs, more than the 80 MiB that limits.memory 128 MiB leaves")

	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Limits: sandbox.Limits{Memory: memory, Disk: disk}})
	require.NoError(t, err)
	tmp := s.Options().Limits.Tmpfs
	assert.Equal(t, memory-sandbox.MemoryHeadroom(memory)-2*disk, tmp, "the default /tmp fits beside the two volumes")
	agent := abuseAgentPid(t, s)

	const cg = "/sys/fs/cgroup/memory/"
	text, took := abuseRun(t, s, `for d in /tmp /workspace "$HOME" `+sandbox.AgentStateDir+` /dev/shm; do `+
		`dd if=/dev/zero of="$d/fill" bs=1M 2>/dev/null; echo "filled $d $(du -k "$d/fill" | cut -f1) KiB"; done; `+
		`echo "usage=$(cat `+cg+`memory.usage_in_bytes)"; grep oom_kill `+cg+`memory.oom_control | tr ' ' =`, 60)
	t.Logf("filled in %v: %s", took, abuseTail(text))
	assert.Contains(t, text, fmt.Sprintf("filled /tmp %d KiB", tmp>>10))
	assert.Contains(t, text, fmt.Sprintf("filled /workspace %d KiB", disk>>10))
	assert.Equal(t, 2, strings.Count(text, fmt.Sprintf(" %d KiB\n", disk>>10)), "the workspace and the home volume")
	assert.Contains(t, text, "filled "+sandbox.AgentStateDir)
	assert.Contains(t, text, "filled /dev/shm 8192 KiB", "/dev/shm is a sixteenth of memory, not Docker's 64 MiB")
	assert.Equal(t, 0, abuseInt(t, text, "oom_kill"))
	assert.Less(t, abuseInt(t, text, "usage"), memory)

	// 16 MB held by one process on top of it all.
	text, _ = abuseRun(t, s, `head -c 16000000 /dev/zero | tail >/dev/null; echo "rc=$?"; echo "agent=$PPID"; `+
		`grep oom_kill `+cg+`memory.oom_control | tr ' ' =; echo "peak=$(cat `+cg+`memory.max_usage_in_bytes)"`, 30)
	assert.Equal(t, 0, abuseInt(t, text, "rc"), abuseTail(text))
	assert.Equal(t, 0, abuseInt(t, text, "oom_kill"))
	assert.Equal(t, agent, abuseInt(t, text, "agent"))
	t.Logf("peak %d MiB of %d", abuseInt(t, text, "peak")>>20, memory>>20)
	assert.Equal(t, sandbox.StateReady, s.State())
}

// As uid 1000 with no capabilities and no_new_privs, nothing raises
// privileges: not a setuid-root binary (placed from outside, as an image
// could ship one), su, mount, namespaces, chroot, raw sockets or device
// nodes; /proc/sys and /sys are read-only; no Docker socket, no network
// interface but lo.
func TestAbusePrivilege(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	info := containerOf(t, s.ID())
	abuseSetuidCopy(t, info.ID, "/bin/bash", sandbox.WorkspaceDir, "suidbash")

	for _, c := range []struct{ cmd, want string }{
		{`ls -ln /workspace/suidbash | cut -c1-10; stat -c "owner=%u" /workspace/suidbash; /workspace/suidbash -p -c 'echo "euid=$EUID"'`,
			"-rwsr-xr-x\nowner=0\neuid=1000\n"}, // the bit is there; no_new_privs ignores it
		{`grep NoNewPrivs /proc/self/status`, "NoNewPrivs:\t1"},
		{`su -c id root </dev/null`, "su: must be suid to work properly"},
		{`mkdir -p /tmp/m; mount -t tmpfs none /tmp/m`, "mount: permission denied (are you root?)"},
		{`unshare -r id`, "unshare: unshare(0x10000000): Operation not permitted"},          // CLONE_NEWUSER
		{`unshare -m true`, "unshare: unshare(0x20000): Operation not permitted"},           // CLONE_NEWNS
		{`nsenter -t 1 -m true`, "nsenter: can't open '/proc/1/ns/mnt': Permission denied"}, // PID 1 is non-dumpable (decision 0021)
		{`nsenter -t $$ -m true`, "nsenter: setns(): can't reassociate to namespace 'mnt': Operation not permitted"},
		{`chroot / true`, "chroot: can't change root directory to '/': Operation not permitted"},
		{`ping -c 1 -W 1 127.0.0.1`, "ping: permission denied (are you root?)"},
		{`mknod /tmp/null c 1 3`, "mknod: /tmp/null: Operation not permitted"},
		{`echo '|/tmp/x' >/proc/sys/kernel/core_pattern`, "/proc/sys/kernel/core_pattern: Read-only file system"},
		{`sysctl -w kernel.hostname=x`, "sysctl: error setting key 'kernel.hostname': Read-only file system"},
		{`echo x >/sys/kernel/uevent_helper`, "/sys/kernel/uevent_helper: Read-only file system"},
		{`echo 100000 >/sys/fs/cgroup/pids/pids.max`, "/sys/fs/cgroup/pids/pids.max: Read-only file system"},
	} {
		text, _ := abuseRun(t, s, c.cmd+`; echo "rc=$?"`, 10)
		assert.Contains(t, text, c.want, c.cmd)
		if !strings.Contains(c.cmd, "suidbash") && !strings.Contains(c.cmd, "NoNewPrivs") {
			assert.Equal(t, 1, abuseInt(t, text, "rc"), "%s: %s", c.cmd, text)
		}
	}

	text, _ := abuseRun(t, s, `awk '$5=="/proc/sys" || $5=="/sys" {print $5, substr($6,1,2)}' /proc/self/mountinfo`, 10)
	assert.Contains(t, text, "/sys ro\n")
	assert.Contains(t, text, "/proc/sys ro\n")

	// No Docker socket, by path, by mount or by environment.
	text, _ = abuseRun(t, s, `ls /var/run/docker.sock /run/docker.sock 2>&1; echo "mounts=$(grep -c docker.sock /proc/self/mountinfo)"; `+
		`echo "env=$(env | grep -c DOCKER_)"; echo "sockets=$(find / \( -path /proc -o -path /sys \) -prune -o -type s -print 2>/dev/null | grep -vc '^/run/sandboxd/agent.sock$')"`, 20)
	assert.Contains(t, text, "ls: /var/run/docker.sock: No such file or directory")
	assert.Contains(t, text, "ls: /run/docker.sock: No such file or directory")
	assert.Equal(t, 0, abuseInt(t, text, "mounts"))
	assert.Equal(t, 0, abuseInt(t, text, "env"))
	assert.Equal(t, 0, abuseInt(t, text, "sockets"), "no unix socket anywhere but the agent's")
	for _, mt := range info.Mounts {
		assert.NotContains(t, mt.Source, "docker.sock")
	}

	// Network none: loopback only.
	text, _ = abuseRun(t, s, `ls /sys/class/net`, 10)
	assert.Equal(t, "lo", strings.TrimSpace(strings.Split(text, "[")[0]))
}

// abuseSetuidCopy copies a file of the container to dir/name as a
// setuid-root file, from outside (the engine's archive API), as an image
// could ship one.
func abuseSetuidCopy(t *testing.T, id, src, dir, name string) {
	t.Helper()
	rc, _, err := docker.CopyFromContainer(ctxT(t), id, src)
	require.NoError(t, err)
	defer rc.Close()
	tr := tar.NewReader(rc)
	_, err = tr.Next()
	require.NoError(t, err)
	body, err := io.ReadAll(tr)
	require.NoError(t, err)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o4755, Size: int64(len(body))}))
	_, err = tw.Write(body)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, docker.CopyToContainer(ctxT(t), id, dir, &buf, container.CopyToContainerOptions{}))
}

// The agent binary is a read-only bind: it cannot be changed, replaced,
// removed or written through /proc/<agent>/exe. The agent's unix socket is
// reachable from inside (mode 0600, the session's uid): in-sandbox code can
// talk to its own agent, which is fine, as both are the session's own trust
// domain (the agent runs as that uid and serves that session only).
func TestAbuseAgentBinaryAndSocket(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(agentBinary)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	want := hex.EncodeToString(sum[:])
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	agent := abuseAgentPid(t, s)

	const bin = sandbox.AgentPath
	for _, c := range []struct{ cmd, want string }{
		{`touch ` + bin, "touch: " + bin + ": Read-only file system"},
		{`cp /bin/busybox ` + bin, "cp: can't create '" + bin + "': Read-only file system"},
		{`rm -f ` + bin, "rm: can't remove '" + bin + "': Read-only file system"},
		{`mv ` + bin + ` /tmp/x`, "mv: can't remove '" + bin + "': Read-only file system"},
		{`chmod 777 ` + bin, "chmod: " + bin + ": Read-only file system"},
		{`printf x >>/proc/$PPID/exe`, "/exe: Permission denied"},
		{`touch ` + sandbox.AgentDir + `/new`, "touch: " + sandbox.AgentDir + "/new: Read-only file system"},
	} {
		text, _ := abuseRun(t, s, c.cmd+`; echo "rc=$?"`, 10)
		assert.Contains(t, text, c.want, c.cmd)
		assert.Equal(t, 1, abuseInt(t, text, "rc"), "%s: %s", c.cmd, text)
	}
	text, _ := abuseRun(t, s, `sha256sum `+bin+`; mount | grep -c ' `+bin+` .*(ro,'`, 10)
	assert.Contains(t, text, want+"  "+bin, "the binary is the host's, byte for byte")
	assert.Contains(t, text, "\n1\n", "mounted read-only")

	// The socket: the session user's, and reachable from inside.
	text, _ = abuseRun(t, s, `stat -c '%a %u %F' `+sandbox.AgentSocket+` `+sandbox.RunDir+`; `+
		sandbox.AgentPath+` agent-proxy --socket `+sandbox.AgentSocket+` </dev/null >/dev/null; echo "proxy_rc=$?"`, 10)
	assert.Contains(t, text, "600 1000 socket\n700 1000 directory\n")
	assert.Equal(t, 0, abuseInt(t, text, "proxy_rc"), "in-sandbox code can reach its own agent")
	assert.Equal(t, agent, abuseAgentPid(t, s))
}

// A process that leaves the terminal's session and process tree (setsid,
// SIGHUP ignored, re-parented to init) still ends with a terminal reset: it
// carries the shell's environment tag. One that also clears its environment
// is beyond what a reset ends, but not beyond Close: the container goes,
// with everything labelled for the session.
func TestAbuseEscapedProcessGoneAfterClose(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	id := containerOf(t, s.ID()).ID

	// setsid plus nohup's part (SIGHUP ignored; the test image has no
	// nohup binary), started from a subshell that exits at once; "sleep
	// 999" keeps the environment, "sleep 1000" starts with an empty one.
	text, _ := abuseRun(t, s, `(setsid sh -c 'trap "" HUP; exec sleep 999' >/dev/null 2>&1 &); `+
		`(env -i PATH="$PATH" setsid sh -c 'trap "" HUP; exec sleep 1000' >/dev/null 2>&1 &); sleep 0.2; `+
		`for p in /proc/[0-9]*; do c="$(tr '\0' ' ' <$p/cmdline 2>/dev/null)"; [ "$c" = "sleep 999 " ] && echo "tagged=${p#/proc/}"; [ "$c" = "sleep 1000 " ] && `+
		`echo "escaped=${p#/proc/}" && echo "ppid=$(awk '/^PPid/{print $2}' $p/status)" && echo "sid=$(cut -d' ' -f6 $p/stat)"; done; echo "shell_sid=$$"`, 10)
	tagged := abuseInt(t, text, "tagged")
	escaped := abuseInt(t, text, "escaped")
	assert.Equal(t, 1, abuseInt(t, text, "ppid"), "re-parented to init")
	assert.NotEqual(t, abuseInt(t, text, "shell_sid"), abuseInt(t, text, "sid"), "in a session of its own")

	abuseReset(t, s)
	text, _ = abuseRun(t, s, `for p in `+strconv.Itoa(tagged)+` `+strconv.Itoa(escaped)+`; do [ -d /proc/$p ] && echo "alive=$p"; done; true`, 10)
	assert.NotContains(t, text, "alive="+strconv.Itoa(tagged)+"\n", "reset left the tagged setsid process")
	assert.Contains(t, text, "alive="+strconv.Itoa(escaped)+"\n", "the untagged process escapes the reset (as documented)")

	top, err := docker.ContainerTop(ctxT(t), id, nil)
	require.NoError(t, err)
	hostPid := ""
	for _, p := range top.Processes {
		if strings.HasSuffix(p[len(p)-1], "sleep 1000") {
			hostPid = p[1]
		}
	}
	require.NotEmpty(t, hostPid, "the escaped process as the host sees it: %v", top.Processes)

	require.NoError(t, s.Close(ctxT(t)))
	assert.Zero(t, sessionResources(t, s.ID()), "no container, volume or network of the session is left")
	_, err = docker.ContainerInspect(ctxT(t), id)
	assert.True(t, cerrdefs.IsNotFound(err), "container removed: %v", err)
	cmdline, err := os.ReadFile("/proc/" + hostPid + "/cmdline")
	assert.False(t, err == nil && strings.Contains(string(cmdline), "sleep\x001000"), "host pid %s still runs the escaped sleep", hostPid)
}
