package e2e

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// taskImage is the benchmark task image (`make task-image`,
// images/build-task-image.sh): /testbed a root-owned git repository with a
// bug in calc/stats.py, /opt/venv a root-owned virtual environment,
// run_tests.sh, USER root, WORKDIR /testbed.
var taskImage = func() string {
	if img := os.Getenv("SANDBOXD_TASK_IMAGE"); img != "" {
		return img
	}
	return "sandboxd-task:latest"
}()

// The fix the agent makes, and what `git diff` must show of it.
const (
	taskBug = "    return sum(xs) / (len(xs) + 1)"
	taskFix = "    return sum(xs) / len(xs)"
)

// shLong runs a terminal command that may go quiet for longer than the
// terminal's 10 s no-output default (pip, the tests, the first git command
// in a new container of the image, which re-reads every file), bounded
// at 5 minutes: a bound, not a figure.
func shLong(t *testing.T, s *sandbox.Session, command string) string {
	t.Helper()
	return call(t, s, "terminal", map[string]any{"command": command, "timeout": 300})
}

// harnessRun is what an evaluation harness does with a session on the task
// image, whatever the mode: the agent fixes the bug with file_editor and
// writes a note, the evaluation script then passes in the same session,
// `git diff` shows exactly the fix, and the note can be downloaded.
func harnessRun(t *testing.T, s *sandbox.Session) {
	t.Helper()
	out := shLong(t, s, `pwd; run_tests.sh >/dev/null 2>&1; echo "before=$?"`)
	assert.Contains(t, out, "/testbed\n", "the image's WORKDIR is the initial cwd")
	assert.Contains(t, out, "before=1\n", "the task's tests fail before the fix")

	call(t, s, "file_editor", map[string]any{"command": "str_replace", "path": "/testbed/calc/stats.py", "old_str": taskBug, "new_str": taskFix})
	call(t, s, "file_editor", map[string]any{"command": "create", "path": "/testbed/NOTES.md", "file_text": "fixed the mean\n"})

	out = shLong(t, s, `run_tests.sh >/tmp/eval.log 2>&1; echo "eval=$?"; tail -n 1 /tmp/eval.log`)
	assert.Contains(t, out, "eval=0\nOK", "run_tests.sh passes in the same session once fixed")

	out = shLong(t, s, `git -C /testbed diff --name-only; echo ---; git -C /testbed diff | grep '^[-+] '; echo ---; git -C /testbed status --porcelain`)
	assert.Equal(t, "calc/stats.py\n---\n-"+taskBug+"\n+"+taskFix+"\n---\n M calc/stats.py\n?? NOTES.md", strings.Split(out, "\n[")[0],
		"git diff shows exactly the fix; the note is the only untracked file")

	var buf bytes.Buffer
	require.NoError(t, s.Download(ctxT(t), "/testbed/NOTES.md", &buf), "a file the agent created can be downloaded")
	tr := tar.NewReader(&buf)
	hdr, err := tr.Next()
	require.NoError(t, err)
	assert.Equal(t, "NOTES.md", hdr.Name)
	body, err := io.ReadAll(tr)
	require.NoError(t, err)
	assert.Equal(t, "fixed the mean\n", string(body))
}

// The hardened way (editable paths): the session user is 1000, the root
// read-only, no capability; /testbed and /opt/venv are volumes seeded from
// the image and owned by the session user, on the disk quota, so the
// agent fixes the bug, `pip install -e .` goes into the image's
// environment, and the evaluation passes in the same session.
func TestHarnessEditablePaths(t *testing.T) {
	t.Parallel()
	needImage(t, taskImage)
	rt := newRuntime(t)
	m := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: taskImage, EditablePaths: []string{"/testbed", "/opt/venv"},
		Limits: sandbox.Limits{DiskQuota: 1 << 30}})
	require.NoError(t, err)

	out := shLong(t, s, `id -u; stat -c '%u:%g %a' /testbed /testbed/calc/stats.py /testbed/.git/index /opt/venv/bin/python3 ~; `+
		`echo "x=1" >> /testbed/setup.py && git -C /testbed checkout -q setup.py && echo append=ok; touch /usr/x /opt/x 2>&1; echo "home=$HOME"`)
	t.Log(out)
	assert.True(t, strings.HasPrefix(out, "1000\n"), out)
	assert.Contains(t, out, "1000:1000 755\n1000:1000 644\n1000:1000 644\n1000:1000 ", "every entry the session user's, modes kept")
	assert.Contains(t, out, "append=ok", "the issue's `echo x=1 >> /testbed/mod.py` works")
	assert.Contains(t, out, "touch: cannot touch '/usr/x': Read-only file system")
	assert.Contains(t, out, "touch: cannot touch '/opt/x': Read-only file system", "only the editable folder, not its parent")
	assert.Contains(t, out, "home=/root")

	out = shLong(t, s, `pip install -q --no-index --no-build-isolation --disable-pip-version-check -e /testbed >/tmp/pip.log 2>&1; echo "pip=$?"; `+
		`python -c 'import calc; print(calc.__file__)'; tail -n 3 /tmp/pip.log`)
	t.Log(out)
	assert.Contains(t, out, "pip=0\n/testbed/calc/__init__.py\n", "pip install -e . into the image's environment")

	harnessRun(t, s)

	info := containerOf(t, s.ID())
	assert.Equal(t, "1000:1000", info.Config.User, "non-root")
	assert.Equal(t, []string{"ALL"}, []string(info.HostConfig.CapDrop))
	assert.Empty(t, info.HostConfig.CapAdd, "no capabilities")
	assert.True(t, info.HostConfig.ReadonlyRootfs, "a read-only root")
	assert.Contains(t, info.HostConfig.SecurityOpt, "no-new-privileges:true")
	assert.Equal(t, "/testbed", info.Config.WorkingDir)
	vols := map[string]bool{}
	for _, mt := range info.Mounts {
		// HOME and the editable paths are overlays bound from the disk
		// directory where the runtime can (decision 0040), volumes else.
		if mt.Type == "volume" || mt.Type == "bind" && strings.Contains(mt.Source, ".overlay/merged/") {
			vols[mt.Destination] = mt.RW
		}
	}
	assert.Equal(t, map[string]bool{"/workspace": true, "/root": true, "/testbed": true, "/opt/venv": true}, vols)
	want := []string{"sandboxd-" + s.ID() + "-workspace"}
	if rt.OverlaySeeding() != nil {
		want = append(want, "sandboxd-"+s.ID()+"-home", "sandboxd-"+s.ID()+"-edit0", "sandboxd-"+s.ID()+"-edit1")
	}
	assert.ElementsMatch(t, want, volumesOf(t, s.ID()))
	require.NoError(t, s.Close(ctxT(t)))
	assert.Zero(t, sessionResources(t, s.ID()), "the editable volumes go with the session")
}

// The image as its harness expects it (user "image", a writable root): the
// session runs as the image's root, writes where the image lets root write,
// and the evaluation passes in the same session, with every capability
// still dropped and the rest of the hardening read back.
func TestHarnessImageUser(t *testing.T) {
	t.Parallel()
	needImage(t, taskImage)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: taskImage, User: sandbox.UserImage, WritableRootfs: true,
		EditablePaths: []string{"/testbed"}})
	require.NoError(t, err)

	out := shLong(t, s, `id -u; stat -c '%u:%g' /testbed/calc/stats.py /opt/venv/bin/python3; touch /usr/local/bin/x && echo usr=ok; `+
		`pip install -q --no-index --no-build-isolation --disable-pip-version-check -e /testbed >/tmp/pip.log 2>&1; echo "pip=$?"; `+
		`grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status`)
	t.Log(out)
	assert.True(t, strings.HasPrefix(out, "0\n0:0\n0:0\n"), "root, with the image's owners: %s", out)
	assert.Contains(t, out, "usr=ok", "the root filesystem is writable")
	assert.Contains(t, out, "pip=0")
	assert.Contains(t, out, "CapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n")

	harnessRun(t, s)

	info := containerOf(t, s.ID())
	assert.Equal(t, "0:0", info.Config.User)
	assert.False(t, info.HostConfig.ReadonlyRootfs)
	assert.Equal(t, []string{"ALL"}, []string(info.HostConfig.CapDrop))
	assert.Empty(t, info.HostConfig.CapAdd)
	assert.False(t, info.HostConfig.Privileged)
	assert.Contains(t, info.HostConfig.SecurityOpt, "no-new-privileges:true")
	assert.True(t, strings.HasPrefix(info.HostConfig.SecurityOpt[1], "seccomp="), info.HostConfig.SecurityOpt)
	assert.Equal(t, "none", string(info.HostConfig.NetworkMode))
	require.NotNil(t, info.HostConfig.PidsLimit)
	assert.EqualValues(t, sandbox.DefaultPids, *info.HostConfig.PidsLimit)
	assert.EqualValues(t, sandbox.DefaultMemory, info.HostConfig.Memory)
	assert.False(t, *info.HostConfig.Init, "the agent is PID 1")
}

// As root in the sandbox (user "image"), the agent's protections hold
// (decisions 0021, 0028): root without CAP_SYS_PTRACE cannot open the stdio
// of the non-dumpable PID 1 or agent through /proc nor ptrace them; the
// agent's folder, a read-only mount of its own with a writable root, can be
// neither written nor moved aside; and nothing raises privileges.
func TestHarnessImageUserAgentProtections(t *testing.T) {
	t.Parallel()
	needImage(t, taskImage)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: taskImage, User: sandbox.UserImage, WritableRootfs: true})
	require.NoError(t, err)
	probe := streamProbe(t, s)
	agent := abuseAgentPid(t, s)
	a := strconv.Itoa(agent)

	text, _ := abuseRun(t, s, `id -u; echo "init=$(tr '\0' ' ' </proc/1/cmdline)"; `+
		probe+` open /proc/1/fd/0 /proc/1/fd/1 /proc/1/fd/2 /proc/`+a+`/fd/0 /proc/`+a+`/fd/1 /proc/`+a+`/fd/2; `+
		probe+` ptrace 1 `+a+`; cat /proc/`+a+`/environ >/dev/null; echo "environ_rc=$?"; `+
		`readlink /proc/1/exe; echo "exe_rc=$?"; ls /proc/1/root/ >/dev/null; echo "root_rc=$?"`, 10)
	t.Logf("as root in the sandbox:\n%s", text)
	assert.True(t, strings.HasPrefix(text, "0\n"), text)
	assert.Contains(t, text, "init="+sandbox.AgentPath+" agent --stdio")
	for _, p := range []string{"1", a} {
		for _, fd := range []string{"0", "1", "2"} {
			assert.Contains(t, text, "open /proc/"+p+"/fd/"+fd+": EACCES\n")
		}
	}
	assert.Contains(t, text, "ptrace 1: EPERM\n")
	assert.Contains(t, text, "ptrace "+a+": EPERM\n")
	assert.Equal(t, 1, abuseInt(t, text, "environ_rc"))
	assert.Equal(t, 1, abuseInt(t, text, "exe_rc"))
	assert.Equal(t, 2, abuseInt(t, text, "root_rc"))

	const bin = sandbox.AgentPath
	for _, c := range []struct{ cmd, want string }{
		{`touch ` + bin, "Permission denied"}, // mode 0555, and root has no CAP_DAC_OVERRIDE; the mount is read-only besides
		{`touch ` + sandbox.AgentDir + `/new`, "Read-only file system"},
		{`mv ` + sandbox.AgentDir + ` /x`, "Device or resource busy"}, // a mount point: the daemon's agent-proxy stays the real one
		{`cp /bin/true ` + bin, "Read-only file system"},
		{`printf x >>/proc/$PPID/exe`, "Permission denied"},
		{`nsenter -t 1 -m true`, "Permission denied"},
		{`mount -t tmpfs none /mnt`, "permission denied"},
		{`unshare -r true`, "Operation not permitted"},
		{`chown 1000 /testbed/setup.py`, "Operation not permitted"},
		{`mknod /tmp/null c 1 3`, "Operation not permitted"},
		{`echo x >/proc/sys/kernel/core_pattern`, "Read-only file system"},
		{`echo x >/sys/kernel/uevent_helper`, "Read-only file system"},
	} {
		text, _ := abuseRun(t, s, c.cmd+` 2>&1; echo "rc=$?"`, 10)
		assert.Contains(t, text, c.want, c.cmd)
		assert.NotEqual(t, 0, abuseInt(t, text, "rc"), "%s: %s", c.cmd, text)
	}
	assert.Equal(t, agent, abuseAgentPid(t, s), "the agent is the one it was")
}
