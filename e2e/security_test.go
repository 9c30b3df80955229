package e2e

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// The hardening settings, read back from the engine and checked from inside.
func TestSecuritySettings(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{
		Limits: sandbox.Limits{Memory: 256 << 20, CPUs: 0.5, Pids: 128, Tmpfs: 32 << 20},
		Labels: map[string]string{"team": "e2e"},
	})
	require.NoError(t, err)

	info := containerOf(t, s.ID())
	c, h := info.Config, info.HostConfig
	assert.Equal(t, "1000:1000", c.User)
	assert.Equal(t, []string{"ALL"}, []string(h.CapDrop))
	assert.Empty(t, h.CapAdd)
	assert.Contains(t, h.SecurityOpt, "no-new-privileges:true")
	var profile string
	for _, opt := range h.SecurityOpt {
		assert.NotContains(t, opt, "unconfined")
		if p, ok := strings.CutPrefix(opt, "seccomp="); ok {
			profile = p
		}
	}
	require.NotEmpty(t, profile, "a seccomp profile of sandboxd's own: %v", h.SecurityOpt)
	assert.True(t, json.Valid([]byte(profile)))
	assert.Contains(t, profile, `"SCMP_ACT_ERRNO"`)
	assert.NotContains(t, profile, "io_uring")
	assert.True(t, h.ReadonlyRootfs)
	assert.False(t, h.Privileged)
	require.NotNil(t, h.PidsLimit)
	assert.EqualValues(t, 128, *h.PidsLimit)
	assert.EqualValues(t, 256<<20, h.Memory)
	assert.Equal(t, h.Memory, h.MemorySwap, "no swap")
	assert.Equal(t, int64(500_000_000), h.NanoCPUs, "half a CPU")
	require.NotNil(t, h.Init)
	assert.False(t, *h.Init, "the agent is PID 1, not docker-init (decision 0021)")
	assert.Equal(t, "none", string(h.NetworkMode))
	assert.Equal(t, "private", string(h.CgroupnsMode), "a cgroup namespace of its own")
	assert.Empty(t, h.PortBindings)
	assert.False(t, h.PublishAllPorts)
	assert.Equal(t, "json-file", h.LogConfig.Type)
	assert.NotEmpty(t, h.LogConfig.Config["max-size"])
	assert.NotEmpty(t, h.LogConfig.Config["max-file"])
	assert.Contains(t, h.Tmpfs["/tmp"], "size=")
	assert.True(t, c.OpenStdin)
	assert.False(t, c.StdinOnce)
	assert.False(t, c.Tty)
	require.NotEmpty(t, c.Entrypoint)
	assert.Equal(t, sandbox.AgentPath, c.Entrypoint[0], "the agent is the main process")
	for k, v := range map[string]string{
		sandbox.LabelManaged: "true", sandbox.LabelSession: s.ID(), sandbox.LabelImage: testImage, "team": "e2e", labelRun: runID,
	} {
		assert.Equal(t, v, c.Labels[k], k)
	}
	assert.NotEmpty(t, c.Labels[sandbox.LabelCreated])
	assert.NotEmpty(t, c.Labels[sandbox.LabelOptions])
	var agentMount bool
	for _, mt := range info.Mounts {
		if mt.Destination == sandbox.AgentPath {
			agentMount = true
			assert.False(t, mt.RW, "the agent binary is read-only")
		}
		if mt.Destination == sandbox.WorkspaceDir {
			assert.True(t, mt.RW)
			assert.Equal(t, "volume", string(mt.Type))
		}
	}
	assert.True(t, agentMount)

	out := sh(t, s, `echo "uid=$(id -u) gid=$(id -g)"; grep -E '^(CapEff|CapPrm|NoNewPrivs|Seccomp):' /proc/self/status; `+
		`touch /rootfile 2>&1; echo "root_write=$?"; touch /workspace/ok && echo workspace_write=0; `+
		`touch /tmp/ok && echo tmp_write=0; cat /sys/fs/cgroup/pids/pids.max; `+
		`cat /sys/fs/cgroup/memory/memory.limit_in_bytes; ps -o pid,comm 2>/dev/null | head -3`)
	t.Log(out)
	assert.Contains(t, out, "uid=1000 gid=1000")
	assert.Regexp(t, `CapEff:\s+0000000000000000`, out)
	assert.Regexp(t, `CapPrm:\s+0000000000000000`, out)
	assert.Regexp(t, `NoNewPrivs:\s+1`, out)
	assert.Regexp(t, `Seccomp:\s+2`, out)
	assert.Contains(t, out, "Read-only file system")
	assert.NotContains(t, out, "root_write=0")
	assert.Contains(t, out, "workspace_write=0")
	assert.Contains(t, out, "tmp_write=0")
	assert.Contains(t, out, "\n128", "pids.max")
	assert.Contains(t, out, "268435456", "memory limit")

	// The cgroup namespace is private: the host's cgroup path (with the
	// full container id) is not visible inside.
	out = sh(t, s, "cat /proc/self/cgroup")
	assert.NotContains(t, out, info.ID, "the container id in /proc/self/cgroup")
	assert.NotContains(t, out, "/docker/")

	// No network but loopback.
	out = sh(t, s, "cat /proc/net/dev | awk 'NR>2{print $1}'")
	assert.Equal(t, []string{"lo:"}, strings.Fields(strings.Split(out, "[")[0]), out)
}

// The workspace volume is seeded from the image's /workspace (contents and
// owner). Another uid gets a workspace of its own with a Disk limit: a tmpfs
// volume created owned by the session user.
func TestWorkspaceForAnotherUser(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	// A uid alone: the gid is the same number (not root's 0, which the
	// engine gives a uid the image's /etc/passwd does not know).
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{User: "2345", Limits: sandbox.Limits{Disk: 64 << 20}})
	require.NoError(t, err)
	out := sh(t, s, "id -u; id -g; stat -c '%u:%g' /workspace; touch /workspace/mine && echo wrote")
	assert.Contains(t, out, "2345\n2345\n2345:2345")
	assert.Contains(t, out, "wrote")
}

// ioUringProbe calls the three io_uring syscalls (the same numbers on every
// architecture) and, as a control, close(-1), an allowed syscall that
// fails in the kernel (EBADF): it tells seccomp's refusal (EPERM) from a
// kernel without io_uring (ENOSYS) and from a call that got through.
const ioUringProbe = `package main

import (
	"fmt"
	"syscall"
	"unsafe"
)

func report(name string, r uintptr, e syscall.Errno) {
	if e != 0 {
		fmt.Printf("%s errno=%d (%v)\n", name, int(e), e)
	} else {
		fmt.Printf("%s ok=%d\n", name, r)
	}
}

func main() {
	var params [120]byte // struct io_uring_params
	r, _, e := syscall.Syscall(425, 1, uintptr(unsafe.Pointer(&params)), 0)
	report("io_uring_setup", r, e)
	r, _, e = syscall.Syscall6(426, ^uintptr(0), 0, 0, 0, 0, 0)
	report("io_uring_enter", r, e)
	r, _, e = syscall.Syscall6(427, ^uintptr(0), 0, 0, 0, 0, 0)
	report("io_uring_register", r, e)
	r, _, e = syscall.Syscall(syscall.SYS_CLOSE, ^uintptr(0), 0, 0)
	report("close", r, e)
}
`

// io_uring is refused inside a sandbox (sandboxd's seccomp profile, see
// sandbox/docker/seccomp.go): Docker 20.10's own default profile let
// io_uring_setup return a working fd. The probe is a static binary built
// here and uploaded into the workspace, so it runs on any image.
func TestNoIoUring(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(ioUringProbe), 0o644))
	cmd := exec.CommandContext(ctxT(t), "go", "build", "-o", "probe", "main.go")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	bin, err := os.ReadFile(filepath.Join(dir, "probe"))
	require.NoError(t, err)
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	require.NoError(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "probe", Mode: 0o755, Size: int64(len(bin))}))
	_, err = tw.Write(bin)
	require.NoError(t, err)
	require.NoError(t, tw.Close())

	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	require.NoError(t, s.Upload(ctxT(t), sandbox.WorkspaceDir+"/iouring", &tb))
	text := sh(t, s, sandbox.WorkspaceDir+"/iouring/probe")
	t.Log(text)
	assert.Contains(t, text, "close errno=9 ", "the probe ran and an allowed syscall reached the kernel")
	for _, name := range []string{"io_uring_setup", "io_uring_enter", "io_uring_register"} {
		assert.Regexp(t, `(?m)^`+name+` errno=(1|38) `, text, "%s: EPERM (seccomp) or ENOSYS, never a result", name)
	}
	assert.NotContains(t, text, " ok=")
}
