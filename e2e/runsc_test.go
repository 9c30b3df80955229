package e2e

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// needRunsc skips t unless the engine has the runtime "runsc" (gVisor;
// `make runsc` registers it).
func needRunsc(t *testing.T) {
	t.Helper()
	info, err := docker.Info(ctxT(t))
	require.NoError(t, err)
	if _, ok := info.Runtimes["runsc"]; !ok {
		t.Skipf("the engine has no runtime runsc (it has %v): `make runsc` installs and registers gVisor", slices.Sorted(maps.Keys(info.Runtimes)))
	}
}

// A session under gVisor: the hardened container settings are the same as
// under runc (read back from the engine), the agent serves the four tools,
// and the sandbox's kernel is gVisor's.
func TestRunscSession(t *testing.T) {
	needRunsc(t)
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Runtime: "runsc"})
	require.NoError(t, err)

	info := containerOf(t, s.ID())
	h := info.HostConfig
	assert.Equal(t, "runsc", h.Runtime)
	assert.True(t, h.ReadonlyRootfs)
	assert.Equal(t, []string{"ALL"}, []string(h.CapDrop))
	assert.Contains(t, h.SecurityOpt, "no-new-privileges:true")
	assert.True(t, slices.ContainsFunc(h.SecurityOpt, func(o string) bool { return strings.HasPrefix(o, "seccomp=") }), "sandboxd's profile is given: %v", h.SecurityOpt)

	// The sandbox's kernel is gVisor's: its fixed /proc/version (dmesg,
	// which says "Starting gVisor...", needs syslog, which sandboxd's
	// seccomp profile denies under runsc --oci-seccomp as under runc).
	version := strings.TrimSpace(ctBody(sh(t, s, "cat /proc/version")))
	assert.Contains(t, version, "Linux version 4.4.0 #1 SMP Sun Jan 10 15:06:54 PST 2016", "gVisor's /proc/version")
	t.Logf("/proc/version under runsc: %s; dmesg: %s", version, strings.TrimSpace(ctBody(sh(t, s, "dmesg 2>&1 | head -1"))))

	// The terminal keeps its state; the file editor and grep work.
	sh(t, s, "mkdir -p /workspace/d && cd /workspace/d")
	assert.Equal(t, "/workspace/d", ctBody(sh(t, s, "pwd")))
	call(t, s, "file_editor", map[string]any{"command": "create", "path": "/workspace/d/a.txt", "file_text": "alpha\nneedle here\n"})
	assert.Contains(t, call(t, s, "file_editor", map[string]any{"command": "view", "path": "/workspace/d/a.txt"}), "needle here")
	assert.Contains(t, call(t, s, "grep", map[string]any{"pattern": "needle", "path": "/workspace"}), "/workspace/d/a.txt")
	assert.Contains(t, call(t, s, "glob", map[string]any{"pattern": "**/*.txt", "path": "/workspace"}), "/workspace/d/a.txt")

	// Decision 0021 under gVisor: PID 1 is the agent binary and ptrace of
	// it is refused, but runsc 0.0~20221219 does not make a non-dumpable
	// process's /proc/<pid>/fd root's: a tool can open the agent's stdio.
	// Logged, not asserted either way: TestAbuseAgentStreamUnreachable (run
	// with SANDBOXD_E2E_RUNTIME=runsc) is the check, and fails there today;
	// docs/security.md says what that leaves open.
	out := ctBody(sh(t, s, "tr '\\0' ' ' </proc/1/cmdline; echo; ls /proc/1/fd >/dev/null 2>&1 && echo fd-dir-readable || echo fd-dir-denied"))
	assert.Contains(t, out, sandbox.AgentPath, "the agent is PID 1")
	t.Logf("PID 1 under runsc: %s", out)
	if strings.Contains(out, "fd-dir-readable") {
		t.Logf("KNOWN GAP under runsc: /proc/1/fd is readable by the session user (non-dumpable not honoured by this gVisor); see docs/security.md")
	}

	// A bridge session cannot be had: make runsc registers gVisor without
	// its network stack.
	_, err = m.Create(ctxT(t), sandbox.SessionOptions{Runtime: "runsc", Network: sandbox.NetworkBridge})
	if err != nil {
		require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
		t.Logf("bridge under runsc: %v", err)
	}
}

// A runtime the engine lacks fails the create, naming the ones it has;
// nothing is started under another runtime.
func TestRuntimeMissingFailsClosed(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	_, err := m.Create(ctxT(t), sandbox.SessionOptions{Runtime: "no-such-runtime"})
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	require.ErrorContains(t, err, `the engine has no runtime "no-such-runtime" (it has `)
	require.ErrorContains(t, err, `"runc"`)
}

// What gVisor costs, runc and runsc in the same run: a session start
// (create to the first echo's answer), the echo round trip (p50 of 20) and
// `git status` in a small repository (p50 of 10), in the default image
// (which has git). Logged; docs/security.md quotes them.
func TestRunscCost(t *testing.T) {
	needRunsc(t)
	needImage(t, contractDefaultImage)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	p50 := func(d []time.Duration) time.Duration {
		slices.Sort(d)
		return d[len(d)/2]
	}
	timed := func(s *sandbox.Session, cmd string) time.Duration {
		raw, err := json.Marshal(map[string]any{"command": cmd})
		require.NoError(t, err)
		start := time.Now()
		obs, err := s.Call(ctxT(t), "terminal", raw, nil)
		took := time.Since(start)
		require.NoError(t, err)
		require.False(t, obs.IsError, obs.Text())
		require.Contains(t, obs.Text(), "exit code 0", obs.Text())
		return took
	}
	type figures struct{ start, echo, git time.Duration }
	got := map[string]figures{}
	for round := range 2 { // the second round is the one reported: the first warms the image's pages
		for _, rtName := range []string{"runc", "runsc"} {
			start := time.Now()
			s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: contractDefaultImage, Runtime: rtName})
			require.NoError(t, err)
			timed(s, "echo hi")
			f := figures{start: time.Since(start)}
			var echo, git []time.Duration
			for range 20 {
				echo = append(echo, timed(s, "echo hi"))
			}
			f.echo = p50(echo)
			timed(s, "mkdir -p /workspace/r && cd /workspace/r && git init -q && git config user.email a@b && git config user.name a && "+
				"for i in $(seq 1 50); do echo $i > f$i.txt; done && git add -A && git commit -qm init && echo changed > f7.txt")
			for range 10 {
				git = append(git, timed(s, "git status --short"))
			}
			f.git = p50(git)
			require.NoError(t, m.Close(ctxT(t), s.ID()))
			if round == 1 {
				got[rtName] = f
			}
		}
	}
	r, g := got["runc"], got["runsc"]
	ratio := func(a, b time.Duration) float64 { return float64(b) / float64(a) }
	t.Logf("cost of gVisor (runsc %s) vs runc, default image, same run:", "0.0~20221219.0")
	t.Logf("  session start (create → first echo): runc %v, runsc %v (×%.1f)", r.start.Round(time.Millisecond), g.start.Round(time.Millisecond), ratio(r.start, g.start))
	t.Logf("  echo round trip p50 of 20:           runc %v, runsc %v (×%.1f)", r.echo.Round(10*time.Microsecond), g.echo.Round(10*time.Microsecond), ratio(r.echo, g.echo))
	t.Logf("  git status, 50 files, p50 of 10:     runc %v, runsc %v (×%.1f)", r.git.Round(10*time.Microsecond), g.git.Round(10*time.Microsecond), ratio(r.git, g.git))
}
