package docker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/docker/docker/api/types/mount"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/loglimit"
	"github.com/sandboxd/sandboxd/sandbox"
)

func testRuntime(copyAgent bool) *Runtime {
	return &Runtime{
		opts: Options{Labels: map[string]string{"scope": "t"}, LogMaxSize: "1m", LogMaxFiles: "2",
			RunDirSize: 16 << 20, CopyAgent: copyAgent},
		agent: &agentBinary{path: "/opt/sandboxd", sum: "0123456789abcdef0123", scope: "s1"},
	}
}

func resolved(t *testing.T, o sandbox.SessionOptions) sandbox.SessionOptions {
	r, err := o.Resolve(sandbox.SessionOptions{Image: "img"})
	require.NoError(t, err)
	return r
}

// plan is the layout of session id on our own image run as o's user (the
// workspace and HOME seeded by the engine), as Start works it out.
func plan(t *testing.T, id string, o sandbox.SessionOptions, img imageFacts) layout {
	t.Helper()
	uid, gid := 0, 0
	if o.User != sandbox.UserImage {
		var err error
		uid, gid, err = sandbox.ParseUser(o.User)
		require.NoError(t, err)
	}
	l, err := planLayout(id, o, img, uid, gid)
	require.NoError(t, err)
	return l
}

// ourImage is an image of sandboxd's scripts, run as 1000:1000.
var ourImage = imageFacts{home: "/home/agent", user: "1000:1000", ours: true, workdir: "/workspace"}

// agentCmd is the Command the Manager puts in the Spec for o.
func agentCmd(t *testing.T, o sandbox.SessionOptions) []string {
	cmd, err := sandbox.AgentCommand(o)
	require.NoError(t, err)
	return cmd
}

// A uid alone runs with the same number as gid, as ParseUser says: the
// engine would take the group from the image's /etc/passwd, or root's 0.
func TestBuildContainerUIDOnlyGetsSameGID(t *testing.T) {
	o := resolved(t, sandbox.SessionOptions{User: "1234"})
	spec := sandbox.Spec{SessionID: "sid", Options: o, Labels: sandbox.SessionLabels("sid", o, "", testTime), Command: agentCmd(t, o)}
	cs, err := testRuntime(false).buildContainer(spec, "none", plan(t, "sid", o, ourImage))
	require.NoError(t, err)
	assert.Equal(t, "1234:1234", cs.config.User)
}

func TestBuildContainerHardening(t *testing.T) {
	o := resolved(t, sandbox.SessionOptions{User: "1234:5678", Env: map[string]string{"B": "2", "A": "1"},
		Limits: sandbox.Limits{Memory: 512 << 20, CPUs: 1.5, Pids: 100, Tmpfs: 8 << 20}})
	spec := sandbox.Spec{SessionID: "sid", Options: o, Labels: sandbox.SessionLabels("sid", o, "", testTime), Command: agentCmd(t, o)}
	cs, err := testRuntime(false).buildContainer(spec, "none", plan(t, "sid", o, imageFacts{home: "/root"}))
	require.NoError(t, err)
	c, h := cs.config, cs.host

	assert.Equal(t, "sandboxd-sid", cs.name)
	assert.Equal(t, "1234:5678", c.User)
	assert.Equal(t, []string{"A=1", "B=2"}, c.Env)
	assert.Equal(t, sandbox.WorkspaceDir, c.WorkingDir)
	// The container runs the agent command the spec carries, as given,
	// with its binary as the entrypoint (replacing the image's).
	want, err := sandbox.AgentCommand(o)
	require.NoError(t, err)
	assert.Equal(t, []string{sandbox.AgentPath}, []string(c.Entrypoint))
	assert.Equal(t, want, append([]string(c.Entrypoint), c.Cmd...))
	assert.NotContains(t, want, "--tools", "defaults need no tool specs")
	assert.True(t, c.OpenStdin && c.AttachStdin && c.AttachStdout && c.AttachStderr)
	assert.False(t, c.StdinOnce)
	assert.False(t, c.Tty)
	assert.Equal(t, "t", c.Labels["scope"])
	assert.Equal(t, "sid", c.Labels[sandbox.LabelSession])
	assert.Equal(t, "true", c.Labels[sandbox.LabelManaged])
	assert.Equal(t, ScopeOf(map[string]string{"scope": "t"}), c.Labels[LabelScope])

	assert.Equal(t, []string{"ALL"}, []string(h.CapDrop))
	assert.Empty(t, h.CapAdd)
	profile, err := seccompProfile()
	require.NoError(t, err)
	assert.Equal(t, []string{"no-new-privileges:true", "seccomp=" + profile}, h.SecurityOpt)
	assert.True(t, h.ReadonlyRootfs)
	assert.False(t, h.Privileged)
	assert.False(t, *h.Init, "the agent is PID 1 (decision 0021)")
	assert.Equal(t, "none", string(h.NetworkMode))
	assert.Empty(t, h.PortBindings)
	assert.EqualValues(t, 512<<20, h.Memory)
	assert.Equal(t, h.Memory, h.MemorySwap)
	assert.Equal(t, int64(1.5e9), h.NanoCPUs)
	assert.EqualValues(t, 100, *h.PidsLimit)
	assert.Equal(t, "json-file", h.LogConfig.Type)
	assert.Equal(t, map[string]string{"max-size": "1m", "max-file": "2"}, h.LogConfig.Config)
	assert.Equal(t, "rw,nosuid,nodev,mode=1777,size=8388608", h.Tmpfs["/tmp"])
	assert.Equal(t, "rw,nosuid,nodev,noexec,mode=0700,uid=1234,gid=5678,size=16777216", h.Tmpfs[sandbox.RunDir])
	assert.EqualValues(t, 32<<20, h.ShmSize, "/dev/shm: a sixteenth of 512 MiB")
	assert.NotEqual(t, "host", string(h.UsernsMode))
	assert.Equal(t, "no", string(h.RestartPolicy.Name))
	require.Len(t, h.Mounts, 3)
	assert.Equal(t, mount.Mount{Type: mount.TypeBind, Source: "/opt/sandboxd", Target: sandbox.AgentPath, ReadOnly: true}, h.Mounts[0])
	noCopy := &mount.VolumeOptions{NoCopy: true}
	assert.Equal(t, mount.Mount{Type: mount.TypeVolume, Source: "sandboxd-sid-workspace", Target: sandbox.WorkspaceDir, VolumeOptions: noCopy}, h.Mounts[1])
	assert.Equal(t, mount.Mount{Type: mount.TypeVolume, Source: "sandboxd-sid-home", Target: "/root", VolumeOptions: noCopy}, h.Mounts[2])
}

// A spec without a command is a caller's bug, not a container that runs
// the image's entrypoint.
func TestBuildContainerNeedsCommand(t *testing.T) {
	o := resolved(t, sandbox.SessionOptions{})
	_, err := testRuntime(false).buildContainer(sandbox.Spec{SessionID: "s", Options: o}, "none", plan(t, "s", o, ourImage))
	assert.ErrorContains(t, err, "no command")
}

func TestBuildContainerPooledAndCopyMode(t *testing.T) {
	o := resolved(t, sandbox.SessionOptions{})
	cs, err := testRuntime(true).buildContainer(sandbox.Spec{SessionID: "p", Options: o, Command: agentCmd(t, o), Pooled: true}, "sandboxd-p", plan(t, "p", o, ourImage))
	require.NoError(t, err)
	assert.Equal(t, "sandboxd-pool-p", cs.name)
	assert.Equal(t, "sandboxd-p", string(cs.host.NetworkMode))
	m := cs.host.Mounts[0]
	assert.Equal(t, mount.TypeVolume, m.Type)
	assert.Equal(t, sandbox.AgentDir, m.Target)
	assert.True(t, m.ReadOnly)
	assert.Equal(t, "sandboxd-agent-s1-0123456789abcdef", m.Source, "the runtime's own volume, by its scope")
}

// The agent's state tmpfs is charged to memory like /tmp: at most a
// sixteenth of it.
func TestRunDirSize(t *testing.T) {
	r := testRuntime(false)
	r.opts.RunDirSize = DefaultRunDirSize
	for mem, want := range map[int64]int64{
		4 << 30:           DefaultRunDirSize,
		1 << 30:           DefaultRunDirSize,
		512 << 20:         32 << 20,
		256 << 20:         16 << 20,
		100<<20 + 12345:   6 << 20,
		sandbox.MinMemory: 4 << 20,
	} {
		o := resolved(t, sandbox.SessionOptions{Limits: sandbox.Limits{Memory: mem}})
		assert.Equal(t, want, r.runDirSize(o), mem)
		cs, err := r.buildContainer(sandbox.Spec{SessionID: "s", Options: o, Command: agentCmd(t, o)}, "none", plan(t, "s", o, ourImage))
		require.NoError(t, err)
		assert.True(t, strings.HasSuffix(cs.host.Tmpfs[sandbox.RunDir], fmt.Sprintf(",size=%d", want)), cs.host.Tmpfs[sandbox.RunDir])
	}
}

func TestVolumeOptions(t *testing.T) {
	assert.Nil(t, volumeOptions(resolved(t, sandbox.SessionOptions{}), layout{uid: 1000, gid: 1000}))
	opts := volumeOptions(resolved(t, sandbox.SessionOptions{Limits: sandbox.Limits{Disk: 64 << 20}}), layout{uid: 1000, gid: 1001})
	assert.Equal(t, "tmpfs", opts["type"])
	assert.Equal(t, "size=67108864,uid=1000,gid=1001,mode=0755,nosuid,nodev", opts["o"])
}

func TestCheckAgentBinary(t *testing.T) {
	dir := t.TempDir()
	notELF := filepath.Join(dir, "script")
	require.NoError(t, os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755))
	_, err := checkAgentBinary(notELF)
	require.ErrorContains(t, err, "not an ELF")

	notExec := filepath.Join(dir, "plain")
	require.NoError(t, os.WriteFile(notExec, []byte("x"), 0o644))
	_, err = checkAgentBinary(notExec)
	require.ErrorContains(t, err, "not an executable")

	_, err = checkAgentBinary(filepath.Join(dir, "missing"))
	require.Error(t, err)

	// /bin/sh on any Debian host is dynamically linked.
	if _, err := os.Stat("/bin/sh"); err == nil {
		_, err = checkAgentBinary("/bin/sh")
		if err != nil {
			assert.ErrorContains(t, err, "CGO_ENABLED=0")
		}
	}
}

func TestLineLogger(t *testing.T) {
	var buf strings.Builder
	l := &lineLogger{log: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	_, err := l.Write([]byte(`{"time":"x","level":"WARN","msg":"tool failed","tool":"grep"}` + "\npanic: boom\npartial"))
	require.NoError(t, err)
	l.flush()
	out := buf.String()
	assert.Contains(t, out, `level=WARN msg="agent: tool failed"`)
	assert.Contains(t, out, `level=WARN msg="agent stderr" line="panic: boom"`)
	assert.Contains(t, out, `line=partial`)
}

func TestBuildContainerHomeAndWritableRootfs(t *testing.T) {
	o := resolved(t, sandbox.SessionOptions{Env: map[string]string{"A": "1"}, WritableRootfs: true})
	spec := sandbox.Spec{SessionID: "sid", Options: o, Command: agentCmd(t, o)}
	cs, err := testRuntime(false).buildContainer(spec, "none", plan(t, "sid", o, imageFacts{}))
	require.NoError(t, err)
	assert.False(t, cs.host.ReadonlyRootfs)
	assert.Equal(t, []string{"A=1", "HOME=" + sandbox.FallbackHome}, cs.config.Env)
	require.Len(t, cs.host.Mounts, 3)
	noCopy := &mount.VolumeOptions{NoCopy: true}
	assert.Equal(t, mount.Mount{Type: mount.TypeVolume, Source: "sandboxd-sid-workspace", Target: sandbox.WorkspaceDir, VolumeOptions: noCopy}, cs.host.Mounts[1])
	assert.Equal(t, mount.Mount{Type: mount.TypeVolume, Source: "sandboxd-sid-home", Target: sandbox.FallbackHome, VolumeOptions: noCopy}, cs.host.Mounts[2])

	// The image's own home, seeded by the engine: no HOME in env, copy-up on.
	cs, err = testRuntime(false).buildContainer(spec, "none", plan(t, "sid", o, ourImage))
	require.NoError(t, err)
	assert.Equal(t, []string{"A=1"}, cs.config.Env)
	assert.Equal(t, mount.Mount{Type: mount.TypeVolume, Source: "sandboxd-sid-home", Target: "/home/agent"}, cs.host.Mounts[2])
	assert.Nil(t, cs.host.Mounts[1].VolumeOptions)
}

// Editable paths are volumes at their paths, seeded by sandboxd (no
// copy-up) in a hardened session and by the engine for the image's user;
// the working directory is the image's WORKDIR; the image's user runs
// numerically, root included, with every other setting as hardened.
func TestBuildContainerEditableAndImageUser(t *testing.T) {
	task := imageFacts{home: "/root", workdir: "/testbed", ours: true} // FROM our image, USER root
	o := resolved(t, sandbox.SessionOptions{EditablePaths: []string{"/testbed", "/opt/venv"}})
	spec := sandbox.Spec{SessionID: "sid", Options: o, Command: agentCmd(t, o)}
	cs, err := testRuntime(false).buildContainer(spec, "none", plan(t, "sid", o, task))
	require.NoError(t, err)
	assert.Equal(t, "1000:1000", cs.config.User)
	assert.Equal(t, "/testbed", cs.config.WorkingDir)
	assert.True(t, cs.host.ReadonlyRootfs)
	noCopy := &mount.VolumeOptions{NoCopy: true}
	assert.Equal(t, []mount.Mount{
		{Type: mount.TypeBind, Source: "/opt/sandboxd", Target: sandbox.AgentPath, ReadOnly: true},
		{Type: mount.TypeVolume, Source: "sandboxd-sid-workspace", Target: sandbox.WorkspaceDir, VolumeOptions: noCopy},
		{Type: mount.TypeVolume, Source: "sandboxd-sid-home", Target: "/root", VolumeOptions: noCopy},
		{Type: mount.TypeVolume, Source: "sandboxd-sid-edit0", Target: "/testbed", VolumeOptions: noCopy},
		{Type: mount.TypeVolume, Source: "sandboxd-sid-edit1", Target: "/opt/venv", VolumeOptions: noCopy},
	}, cs.host.Mounts)
	assert.Contains(t, cs.config.Cmd, "--transfer-root")

	o = resolved(t, sandbox.SessionOptions{User: sandbox.UserImage, WritableRootfs: true, EditablePaths: []string{"/testbed"}})
	spec = sandbox.Spec{SessionID: "sid", Options: o, Command: agentCmd(t, o)}
	l, err := planLayout("sid", o, task, 0, 0)
	require.NoError(t, err)
	cs, err = testRuntime(false).buildContainer(spec, "none", l)
	require.NoError(t, err)
	assert.Equal(t, "0:0", cs.config.User)
	assert.False(t, cs.host.ReadonlyRootfs)
	assert.Equal(t, []string{"ALL"}, []string(cs.host.CapDrop))
	assert.Contains(t, cs.host.SecurityOpt, "no-new-privileges:true")
	assert.False(t, cs.host.Privileged)
	assert.Equal(t, "rw,nosuid,nodev,noexec,mode=0700,uid=0,gid=0,size=16777216", cs.host.Tmpfs[sandbox.RunDir])
	assert.Equal(t, mount.Mount{Type: mount.TypeVolume, Source: "sandboxd-agent-s1-0123456789abcdef", Target: sandbox.AgentDir, ReadOnly: true,
		VolumeOptions: &mount.VolumeOptions{NoCopy: true}}, cs.host.Mounts[0], "with a writable root, the agent's folder is a read-only mount of its own")
	require.Len(t, cs.host.Mounts, 3, "the agent, the workspace, /testbed: HOME is the image's own, on the writable root")
	assert.Equal(t, mount.Mount{Type: mount.TypeVolume, Source: "sandboxd-sid-edit0", Target: "/testbed"}, cs.host.Mounts[2],
		"the image's user gets the image's owners: the engine's copy-up")
}

func TestPlanLayout(t *testing.T) {
	ours := imageFacts{home: "/home/agent", user: "1000:1000", ours: true}
	foreign := imageFacts{home: "/root", user: "0"}
	ws, fb := sandbox.WorkspaceDir, sandbox.FallbackHome
	type v struct {
		target string
		seed   seeding
	}
	tests := []struct {
		name    string
		o       sandbox.SessionOptions
		img     imageFacts
		home    string
		setHome bool
		vols    []v
	}{
		{"our image as its user: the engine seeds", sandbox.SessionOptions{}, ours, "/home/agent", false,
			[]v{{ws, seedEngine}, {"/home/agent", seedEngine}}},
		{"our image, another user", sandbox.SessionOptions{User: "2000:2000"}, ours, "/home/agent", false,
			[]v{{ws, seedOwned}, {"/home/agent", seedOwned}}},
		{"our image, uid only", sandbox.SessionOptions{User: "1000"}, ours, "/home/agent", false,
			[]v{{ws, seedEngine}, {"/home/agent", seedEngine}}},
		{"our image, the session's own HOME", sandbox.SessionOptions{Env: map[string]string{"HOME": "/home/me"}}, ours, "/home/me", false,
			[]v{{ws, seedEngine}, {"/home/me", seedOwned}}},
		{"a user's image", sandbox.SessionOptions{}, foreign, "/root", false, []v{{ws, seedOwned}, {"/root", seedOwned}}},
		{"image with USER by name", sandbox.SessionOptions{}, imageFacts{home: "/home/agent", user: "agent", ours: true}, "/home/agent", false,
			[]v{{ws, seedOwned}, {"/home/agent", seedOwned}}},
		{"our image run as root (a task image)", sandbox.SessionOptions{}, imageFacts{home: "/root", user: "", ours: true}, "/root", false,
			[]v{{ws, seedOwned}, {"/root", seedOwned}}},
		{"image without HOME", sandbox.SessionOptions{}, imageFacts{}, fb, true, []v{{ws, seedOwned}, {fb, seedOwned}}},
		{"image HOME=/", sandbox.SessionOptions{}, imageFacts{home: "/"}, fb, true, []v{{ws, seedOwned}, {fb, seedOwned}}},
		{"image HOME in /proc", sandbox.SessionOptions{}, imageFacts{home: "/proc/1"}, fb, true, []v{{ws, seedOwned}, {fb, seedOwned}}},
		{"image HOME /usr", sandbox.SessionOptions{}, imageFacts{home: "/usr"}, fb, true, []v{{ws, seedOwned}, {fb, seedOwned}}},
		{"image HOME under /var", sandbox.SessionOptions{}, imageFacts{home: "/var/lib/app"}, "/var/lib/app", false,
			[]v{{ws, seedOwned}, {"/var/lib/app", seedOwned}}},
		{"image HOME relative", sandbox.SessionOptions{}, imageFacts{home: "home"}, fb, true, []v{{ws, seedOwned}, {fb, seedOwned}}},
		{"image HOME in the workspace", sandbox.SessionOptions{}, imageFacts{home: "/workspace/home"}, "", false, []v{{ws, seedOwned}}},
		{"image HOME in /tmp", sandbox.SessionOptions{}, imageFacts{home: "/tmp"}, "", false, []v{{ws, seedOwned}}},
		{"session HOME unusable: no volume, no fallback", sandbox.SessionOptions{Env: map[string]string{"HOME": "/"}}, foreign, "", false,
			[]v{{ws, seedOwned}}},
		{"session HOME in the agent's folder", sandbox.SessionOptions{Env: map[string]string{"HOME": sandbox.RunDir + "/x"}}, ours, "", false,
			[]v{{ws, seedEngine}}},
		{"disk limit: tmpfs volumes, owned at creation", sandbox.SessionOptions{Limits: sandbox.Limits{Disk: 64 << 20}}, foreign, "/root", false,
			[]v{{ws, seedNone}, {"/root", seedNone}}},
		{"editable paths: seeded owned", sandbox.SessionOptions{EditablePaths: []string{"/testbed", "/opt/venv"}}, ours, "/home/agent", false,
			[]v{{ws, seedEngine}, {"/home/agent", seedEngine}, {"/testbed", seedOwned}, {"/opt/venv", seedOwned}}},
		{"an editable HOME is HOME's only volume", sandbox.SessionOptions{EditablePaths: []string{"/root"}}, foreign, "", false,
			[]v{{ws, seedOwned}, {"/root", seedOwned}}},
		{"a HOME in an editable path has none of its own", sandbox.SessionOptions{EditablePaths: []string{"/opt"}, Env: map[string]string{"HOME": "/opt/me"}}, foreign, "", false,
			[]v{{ws, seedOwned}, {"/opt", seedOwned}}},
		{"an editable path in HOME: a volume over HOME's", sandbox.SessionOptions{EditablePaths: []string{"/root/src"}}, foreign, "/root", false,
			[]v{{ws, seedOwned}, {"/root", seedOwned}, {"/root/src", seedOwned}}},
		{"the image's user: editable paths keep the image's owners", sandbox.SessionOptions{User: sandbox.UserImage, EditablePaths: []string{"/testbed"}}, foreign, "/root", false,
			[]v{{ws, seedOwned}, {"/root", seedOwned}, {"/testbed", seedEngine}}},
		{"the image's user on a writable root: HOME is the image's own", sandbox.SessionOptions{User: sandbox.UserImage, WritableRootfs: true}, foreign, "", false,
			[]v{{ws, seedOwned}}},
		{"the image's user on a writable root, no usable HOME: the fallback", sandbox.SessionOptions{User: sandbox.UserImage, WritableRootfs: true}, imageFacts{home: "/"}, fb, true,
			[]v{{ws, seedOwned}, {fb, seedOwned}}},
		{"another user on a writable root: HOME a volume as ever", sandbox.SessionOptions{WritableRootfs: true}, foreign, "/root", false,
			[]v{{ws, seedOwned}, {"/root", seedOwned}}},
		{"the image's user, our image as 1000:1000", sandbox.SessionOptions{User: sandbox.UserImage}, ours, "/home/agent", false,
			[]v{{ws, seedEngine}, {"/home/agent", seedEngine}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := resolved(t, tt.o)
			uid, gid := 1000, 1000
			if o.User != sandbox.UserImage {
				uid, gid, _ = sandbox.ParseUser(o.User)
			} else if u, g, ok := numericUser(tt.img.user); ok {
				uid, gid = u, g
			}
			l, err := planLayout("s", o, tt.img, uid, gid)
			require.NoError(t, err)
			assert.Equal(t, tt.home, l.home)
			assert.Equal(t, tt.setHome, l.setHome)
			var got []v
			for _, x := range l.vols {
				got = append(got, v{x.target, x.seed})
			}
			assert.Equal(t, tt.vols, got)
			assert.Equal(t, "sandboxd-s-workspace", l.vols[0].name)
		})
	}
}

// The working directory: the session's cwd, else the image's WORKDIR
// unless it is "/" or unset, else the workspace; a WORKDIR in the
// kernel's folders is refused as such a cwd is.
func TestWorkingDir(t *testing.T) {
	for _, tt := range []struct {
		cwd, workdir, want, err string
	}{
		{"", "", sandbox.WorkspaceDir, ""},
		{"", "/", sandbox.WorkspaceDir, ""},
		{"", "/testbed", "/testbed", ""},
		{"", "/testbed/", "/testbed", ""},
		{"/tmp", "/testbed", "/tmp", ""},
		{"", "/proc/self/fd/3", "", `cwd: the image's WORKDIR "/proc/self/fd/3" is inside /proc; set cwd`},
		{"", "rel", "", "is not an absolute path"},
	} {
		got, err := workingDir(sandbox.SessionOptions{Cwd: tt.cwd}, imageFacts{workdir: tt.workdir})
		if tt.err != "" {
			require.ErrorIs(t, err, sandbox.ErrInvalidOptions, tt.workdir)
			require.ErrorContains(t, err, tt.err)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, tt.want, got, tt)
	}
}

// Runtimes with different label sets see none of each other's resources,
// also when one set is empty or a subset of the other.
func TestScopeSeparatesLabelSets(t *testing.T) {
	assert.Equal(t, "default", ScopeOf(nil))
	assert.Equal(t, "default", ScopeOf(map[string]string{}))
	a := map[string]string{"run": "1"}
	ab := map[string]string{"run": "1", "test": "x"}
	assert.Equal(t, ScopeOf(ab), ScopeOf(map[string]string{"test": "x", "run": "1"}), "order does not matter")
	assert.NotEqual(t, ScopeOf(a), ScopeOf(ab))
	assert.NotEqual(t, ScopeOf(nil), ScopeOf(a))
	assert.NotEqual(t, ScopeOf(map[string]string{"a": "b=c"}), ScopeOf(map[string]string{"a=b": "c"}), "no ambiguous joins")

	for _, labels := range []map[string]string{nil, a, ab} {
		r := &Runtime{opts: Options{Labels: labels}}
		f := r.filter("")
		assert.True(t, f.ExactMatch("label", LabelScope+"="+ScopeOf(labels)), "listing requires the exact scope")
		assert.Equal(t, ScopeOf(labels), r.labels(nil)[LabelScope], "and every resource carries it")
	}
	_, err := New(context.Background(), Options{Labels: map[string]string{LabelScope: "x"}})
	assert.ErrorContains(t, err, "set by sandboxd itself")
}

func TestSecurityWarnings(t *testing.T) {
	assert.Empty(t, securityWarnings([]string{"name=seccomp,profile=default", "name=apparmor"}))
	assert.Empty(t, securityWarnings([]string{"name=seccomp,profile=default", "name=selinux"}))
	w := securityWarnings([]string{"name=seccomp,profile=default", "name=cgroupns"})
	require.Len(t, w, 1)
	assert.Contains(t, w[0], "no AppArmor")
	w = securityWarnings(nil)
	require.Len(t, w, 2)
	assert.Contains(t, w[0], "WITHOUT a syscall filter")
}

// Code in the sandbox can write to the agent's stderr: a flood of lines
// logs a bounded number of bytes per session, across its streams.
func TestAgentStderrFloodIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf strings.Builder
		var mu sync.Mutex
		w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) })
		r := testRuntime(false)
		r.log = slog.New(slog.NewJSONHandler(w, nil))
		line := []byte(`{"level":"ERROR","msg":"` + strings.Repeat("X", 3000) + `"}` + "\n" + strings.Repeat("Z", 10000) + "\n")
		for _, stream := range []string{"attach", "agent-proxy"} {
			l := &lineLogger{log: r.agentLog("s1").With("stream", stream)}
			for range 2_000 {
				_, _ = l.Write(line)
			}
			l.flush()
		}
		time.Sleep(2 * loglimit.DefaultEvery) // the summary's timer
		synctest.Wait()
		mu.Lock()
		out := buf.String()
		mu.Unlock()
		t.Logf("8,000 lines of stderr: %d bytes of log", len(out))
		assert.Less(t, len(out), 6000)
		assert.Contains(t, out, `"session":"s1"`)
		assert.Contains(t, out, `more log lines suppressed`)
	})
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }
