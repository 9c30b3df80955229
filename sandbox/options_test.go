package sandbox

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
)

func TestResolveDefaults(t *testing.T) {
	r, err := SessionOptions{}.Resolve(SessionOptions{Image: "img:1", Env: map[string]string{"A": "1", "B": "2"}})
	require.NoError(t, err)
	assert.Equal(t, "img:1", r.Image)
	assert.Equal(t, DefaultUser, r.User)
	assert.Empty(t, r.Cwd, "the image's WORKDIR, else /workspace: the runtime's to resolve")
	assert.Empty(t, r.EditablePaths)
	assert.Equal(t, NetworkNone, r.Network)
	assert.Equal(t, DefaultIdleTimeout, r.IdleTimeout)
	assert.Equal(t, 10*time.Second, r.Terminal.NoChangeTimeout)
	assert.Equal(t, Limits{Memory: DefaultMemory, CPUs: DefaultCPUs, Pids: DefaultPids, Tmpfs: DefaultTmpfs}, r.Limits)

	r, err = SessionOptions{Env: map[string]string{"B": "x", "C": "3"}, Limits: Limits{Memory: 128 << 20}}.
		Resolve(SessionOptions{Image: "img:1", Env: map[string]string{"A": "1", "B": "2"}})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"A": "1", "B": "x", "C": "3"}, r.Env, "call env overrides defaults")
	assert.EqualValues(t, 128<<20, r.Limits.Memory)
	assert.EqualValues(t, DefaultPids, r.Limits.Pids)
}

func TestValidate(t *testing.T) {
	valid, err := SessionOptions{}.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	tests := []struct {
		name   string
		change func(*SessionOptions)
		want   string // substring of the error; "" = valid
	}{
		{"defaults", func(o *SessionOptions) {}, ""},
		{"image ref", func(o *SessionOptions) { o.Image = "reg.example:5000/a/b:tag@sha256:abc" }, ""},
		{"bad image", func(o *SessionOptions) { o.Image = "has space" }, "image:"},
		{"root user", func(o *SessionOptions) { o.User = "0:0" }, "user: \"0:0\" is root"},
		{"root group", func(o *SessionOptions) { o.User = "1000:0" }, "is root"},
		{"named user", func(o *SessionOptions) { o.User = "agent" }, "not a numeric uid"},
		{"uid only", func(o *SessionOptions) { o.User = "1234" }, ""},
		{"relative cwd", func(o *SessionOptions) { o.Cwd = "work" }, "cwd: \"work\" is not an absolute path"},
		{"unclean cwd", func(o *SessionOptions) { o.Cwd = "/workspace/../etc" }, "not a clean path"},
		{"proc cwd", func(o *SessionOptions) { o.Cwd = "/proc/self/fd/7" }, "inside /proc"},
		{"tmp cwd", func(o *SessionOptions) { o.Cwd = "/tmp" }, ""},
		{"cwd in tmp", func(o *SessionOptions) { o.Cwd = "/tmp/x" }, "cwd: \"/tmp/x\" is inside /tmp, which is empty when the session starts"},
		{"cwd in run dir", func(o *SessionOptions) { o.Cwd = RunDir + "/x" }, "inside /run/sandboxd"},
		{"cwd under workspace", func(o *SessionOptions) { o.Cwd = "/workspace/a/b" }, ""},
		{"cwd elsewhere", func(o *SessionOptions) { o.Cwd = "/usr/src" }, ""},
		{"image user", func(o *SessionOptions) { o.User = UserImage }, ""},
		{"image user misspelt", func(o *SessionOptions) { o.User = "Image" }, "user: \"Image\" is not a numeric uid"},
		{"editable", func(o *SessionOptions) {
			o.EditablePaths = []string{"/testbed", "/opt/venv", "/usr/local/lib/python3.11/site-packages", "/home/agent"}
		}, ""},
		{"editable relative", func(o *SessionOptions) { o.EditablePaths = []string{"testbed"} }, "editable_paths: [0]: \"testbed\" is not an absolute path"},
		{"editable unclean", func(o *SessionOptions) { o.EditablePaths = []string{"/testbed/"} }, "not a clean path (did you mean \"/testbed\"?)"},
		{"editable root", func(o *SessionOptions) { o.EditablePaths = []string{"/"} }, "the root or a top-level system folder"},
		{"editable usr", func(o *SessionOptions) { o.EditablePaths = []string{"/usr"} }, "the root or a top-level system folder"},
		{"editable etc", func(o *SessionOptions) { o.EditablePaths = []string{"/opt", "/etc"} }, "[1]: \"/etc\" is the root or a top-level system folder"},
		{"editable proc", func(o *SessionOptions) { o.EditablePaths = []string{"/proc/1"} }, "is inside /proc"},
		{"editable sys", func(o *SessionOptions) { o.EditablePaths = []string{"/sys/fs"} }, "is inside /sys"},
		{"editable dev", func(o *SessionOptions) { o.EditablePaths = []string{"/dev/shm"} }, "is inside /dev"},
		{"editable agent", func(o *SessionOptions) { o.EditablePaths = []string{AgentDir} }, "sandboxd's own /.sandboxd"},
		{"editable run dir", func(o *SessionOptions) { o.EditablePaths = []string{RunDir + "/x"} }, "sandboxd's own /run/sandboxd"},
		{"editable tmp", func(o *SessionOptions) { o.EditablePaths = []string{"/tmp/x"} }, "writable already"},
		{"editable workspace", func(o *SessionOptions) { o.EditablePaths = []string{"/workspace"} }, "a writable volume already"},
		{"editable skills", func(o *SessionOptions) { o.EditablePaths = []string{"/skills/x"} }, "mounted read-only"},
		{"editable control", func(o *SessionOptions) { o.EditablePaths = []string{"/a\nb"} }, "control character"},
		{"editable long", func(o *SessionOptions) { o.EditablePaths = []string{"/" + strings.Repeat("a", 1024)} }, "longer than 1024 bytes"},
		{"editable twice", func(o *SessionOptions) { o.EditablePaths = []string{"/testbed", "/testbed"} }, "\"/testbed\" is listed twice"},
		{"editable nested", func(o *SessionOptions) { o.EditablePaths = []string{"/opt", "/opt/venv"} }, "\"/opt\" and \"/opt/venv\" are inside one another"},
		{"editable many", func(o *SessionOptions) {
			for i := range MaxEditablePaths + 1 {
				o.EditablePaths = append(o.EditablePaths, fmt.Sprintf("/e%d", i))
			}
		}, "17 entries, above the limit of 16"},
		{"editable tmpfs", func(o *SessionOptions) { o.EditablePaths = []string{"/testbed"}; o.Limits.Disk = 256 << 20 }, "cannot be combined with limits.disk"},
		{"env name", func(o *SessionOptions) { o.Env = map[string]string{"1X": "a"} }, "env: \"1X\""},
		{"env nul", func(o *SessionOptions) { o.Env = map[string]string{"X": "a\x00b"} }, "NUL"},
		{"env size", func(o *SessionOptions) { o.Env = map[string]string{"X": strings.Repeat("a", maxEnvBytes)} }, "above the limit"},
		{"memory", func(o *SessionOptions) { o.Limits.Memory = 1 << 20 }, "limits.memory"},
		{"cpus", func(o *SessionOptions) { o.Limits.CPUs = 0.001 }, "limits.cpus"},
		{"pids", func(o *SessionOptions) { o.Limits.Pids = 4 }, "limits.pids"},
		{"tmpfs", func(o *SessionOptions) { o.Limits.Tmpfs = 100 }, "limits.tmpfs"},
		{"disk", func(o *SessionOptions) { o.Limits.Disk = 1 << 20 }, "limits.disk"},
		{"disk ok", func(o *SessionOptions) { o.Limits.Disk = 256 << 20 }, ""},
		{"runtime runsc", func(o *SessionOptions) { o.Runtime = "runsc" }, ""},
		{"runtime dotted", func(o *SessionOptions) { o.Runtime = "io.containerd.runc.v2" }, ""},
		{"runtime upper", func(o *SessionOptions) { o.Runtime = "RunSC" }, "runtime: \"RunSC\" is not a runtime name"},
		{"runtime path", func(o *SessionOptions) { o.Runtime = "/usr/bin/runsc" }, "not a runtime name"},
		{"runtime flag", func(o *SessionOptions) { o.Runtime = "-runsc" }, "not a runtime name"},
		{"runtime long", func(o *SessionOptions) { o.Runtime = strings.Repeat("a", 65) }, "not a runtime name"},
		// tmpfs against memory: budget = memory - max(48 MiB, memory/4).
		{"tmpfs at budget", func(o *SessionOptions) { o.Limits.Tmpfs = 768 << 20 }, ""},
		{"tmpfs over budget", func(o *SessionOptions) { o.Limits.Tmpfs = 768<<20 + 1 },
			"limits: /tmp (limits.tmpfs 768.0 MiB) = 768.0 MiB of tmpfs, more than the 768 MiB that limits.memory 1024 MiB leaves beside its headroom of 256 MiB (max(48 MiB, a quarter))"},
		{"tmpfs equal to memory", func(o *SessionOptions) { o.Limits.Memory, o.Limits.Tmpfs = 512<<20, 512<<20 },
			"raise limits.memory to at least 683 MiB, or lower limits.tmpfs or limits.disk"},
		{"tmpfs above memory", func(o *SessionOptions) { o.Limits.Memory, o.Limits.Tmpfs = 256<<20, 1<<30 }, "1024 MiB of tmpfs, more than the 192 MiB"},
		{"small memory, floor headroom", func(o *SessionOptions) { o.Limits.Memory, o.Limits.Tmpfs = 128<<20, 80<<20 }, ""},
		{"small memory, over floor", func(o *SessionOptions) { o.Limits.Memory, o.Limits.Tmpfs = 128<<20, 81<<20 },
			"more than the 80 MiB that limits.memory 128 MiB leaves beside its headroom of 48 MiB"},
		{"minimum memory", func(o *SessionOptions) { o.Limits.Memory, o.Limits.Tmpfs = MinMemory, 16<<20 }, ""},
		{"minimum memory, 17 MiB tmp", func(o *SessionOptions) { o.Limits.Memory, o.Limits.Tmpfs = MinMemory, 17<<20 }, "raise limits.memory to at least 65 MiB"},
		{"disk counts twice", func(o *SessionOptions) { o.Limits.Disk = 256<<20 + 1<<20 },
			"/tmp (limits.tmpfs 256 MiB) + /workspace and the home volume (2 x limits.disk 257 MiB) = 770 MiB of tmpfs"},
		{"home in workspace: disk counts once", func(o *SessionOptions) {
			o.Limits.Disk, o.Env = 512<<20, map[string]string{"HOME": "/workspace/home"}
		}, ""},
		{"home in tmp: disk counts once, over", func(o *SessionOptions) {
			o.Limits.Disk, o.Env = 513<<20, map[string]string{"HOME": "/tmp"}
		}, "+ /workspace (limits.disk 513 MiB) = 769 MiB"},
		{"home elsewhere: disk counts twice", func(o *SessionOptions) {
			o.Limits.Disk, o.Env = 512<<20, map[string]string{"HOME": "/workspacex"}
		}, "2 x limits.disk 512 MiB"},
		{"invalid sizes reported once", func(o *SessionOptions) { o.Limits.Memory, o.Limits.Tmpfs = 1<<20, 1<<30 }, "limits.memory: 1 MiB is below"},
		{"host network", func(o *SessionOptions) { o.Network = "host" }, "never allowed"},
		{"container network", func(o *SessionOptions) { o.Network = "container:abc" }, "network:"},
		{"named network", func(o *SessionOptions) { o.Network = "my-net_1" }, ""},
		{"bridge", func(o *SessionOptions) { o.Network = NetworkBridge }, ""},
		{"internal", func(o *SessionOptions) { o.Network = NetworkInternal }, ""},
		{"idle too short", func(o *SessionOptions) { o.IdleTimeout = time.Millisecond }, "idle_timeout"},
		{"no idle", func(o *SessionOptions) { o.IdleTimeout = NoIdleTimeout }, ""},
		{"no_change_timeout 2s", func(o *SessionOptions) { o.Terminal.NoChangeTimeout = 2 * time.Second }, ""},
		{"no_change_timeout too short", func(o *SessionOptions) { o.Terminal.NoChangeTimeout = time.Millisecond },
			"terminal.no_change_timeout: 1ms is outside 100ms to 24h0m0s"},
		{"no_change_timeout negative", func(o *SessionOptions) { o.Terminal.NoChangeTimeout = -time.Second }, "terminal.no_change_timeout"},
		{"no_change_timeout too long", func(o *SessionOptions) { o.Terminal.NoChangeTimeout = 25 * time.Hour }, "terminal.no_change_timeout"},
		{"reserved label", func(o *SessionOptions) { o.Labels = map[string]string{"sandboxd.session": "x"} }, "reserved prefix"},
		{"label ok", func(o *SessionOptions) { o.Labels = map[string]string{"team": "a", "example.com/x": "y"} }, ""},
		{"tools ok", func(o *SessionOptions) {
			o.Tools = []tools.Spec{{Name: "terminal", Params: json.RawMessage(`{"soft_timeout_seconds":30}`)}, {Name: "grep"}}
		}, ""},
		{"tool name", func(o *SessionOptions) { o.Tools = []tools.Spec{{Name: "bad name"}} }, "not a tool factory name"},
		{"tool twice", func(o *SessionOptions) { o.Tools = []tools.Spec{{Name: "grep"}, {Name: "grep"}} }, "listed twice"},
		{"tool params", func(o *SessionOptions) { o.Tools = []tools.Spec{{Name: "grep", Params: json.RawMessage(`[1]`)}} }, "not a JSON object"},
		{"writable rootfs", func(o *SessionOptions) { o.WritableRootfs = true }, ""},
		{"writable rootfs with disk", func(o *SessionOptions) { o.WritableRootfs = true; o.Limits.Disk = 1 << 30 }, "writable_rootfs: cannot be combined with limits.disk"},
		{"disk quota", func(o *SessionOptions) { o.Limits.DiskQuota = 10 << 30 }, ""},
		{"disk quota small", func(o *SessionOptions) { o.Limits.DiskQuota = 1 << 20 }, "limits.disk_quota: 1 MiB is below the minimum of 16 MiB"},
		{"disk quota negative", func(o *SessionOptions) { o.Limits.DiskQuota = -1 }, "limits.disk_quota"},
		{"disk quota huge", func(o *SessionOptions) { o.Limits.DiskQuota = 17 << 40 }, "above the maximum of 16384 GiB"},
		{"disk quota and tmpfs disk", func(o *SessionOptions) { o.Limits.DiskQuota = 1 << 30; o.Limits.Disk = 64 << 20 }, "limits.disk_quota: cannot be combined with limits.disk"},
		{"disk quota is not memory", func(o *SessionOptions) {
			o.Limits.Memory = MinMemory
			o.Limits.Tmpfs = 16 << 20
			o.Limits.DiskQuota = 1 << 40
		}, ""},
		{"writable rootfs with disk quota", func(o *SessionOptions) { o.WritableRootfs = true; o.Limits.DiskQuota = 1 << 30 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := valid
			o.Env, o.Labels = nil, nil
			tt.change(&o)
			err := o.Validate()
			if tt.want == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.ErrorIs(t, err, ErrInvalidOptions)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

// One mistake, one problem: sizes below their minimum are not checked
// against memory as well.
func TestValidateTmpfsMemoryOnce(t *testing.T) {
	o, err := SessionOptions{}.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	o.Limits.Memory, o.Limits.Tmpfs = 1<<20, 1<<30
	var oe *OptionsError
	require.ErrorAs(t, o.Validate(), &oe)
	assert.Len(t, oe.Problems, 1, oe.Problems)
}

// The default /tmp follows Memory (and Disk): DefaultTmpfs where it
// fits, else what the budget leaves, so setting Memory alone is always
// valid; an explicit size, in the call or the manager's defaults, is
// kept and checked.
func TestDefaultTmpfsFollowsMemory(t *testing.T) {
	for _, c := range []struct {
		limits Limits
		env    map[string]string
		tmpfs  int64 // 0: invalid
	}{
		{Limits{}, nil, DefaultTmpfs},
		{Limits{Memory: 4 << 30}, nil, DefaultTmpfs},
		{Limits{Memory: 512 << 20}, nil, DefaultTmpfs},
		{Limits{Memory: 256 << 20}, nil, 192 << 20},
		{Limits{Memory: 128 << 20}, nil, 80 << 20},
		{Limits{Memory: MinMemory}, nil, 16 << 20},
		{Limits{Memory: 100<<20 + 12345}, nil, 52 << 20},
		{Limits{Memory: 256 << 20, Disk: 32 << 20}, nil, 128 << 20},
		{Limits{Memory: 256 << 20, Disk: 32 << 20}, map[string]string{"HOME": "/workspace"}, 160 << 20},
		{Limits{Memory: 1 << 30, Disk: 256 << 20}, nil, DefaultTmpfs},
		{Limits{Memory: 1 << 30, Disk: 300 << 20}, nil, 168 << 20},
		{Limits{Memory: MinMemory, Disk: 16 << 20}, nil, 0}, // 32 MiB of volumes leave no /tmp
	} {
		r, err := SessionOptions{Limits: c.limits, Env: c.env}.Resolve(SessionOptions{Image: "img"})
		if c.tmpfs == 0 {
			require.Error(t, err, "%+v", c.limits)
			assert.Contains(t, err.Error(), "/tmp (limits.tmpfs 1 MiB) + /workspace and the home volume (2 x limits.disk 16 MiB) = 33 MiB of tmpfs, more than the 16 MiB")
			continue
		}
		require.NoError(t, err, "%+v", c.limits)
		assert.Equal(t, c.tmpfs, r.Limits.Tmpfs, "%+v", c.limits)
	}

	// Every memory limit alone resolves to valid options.
	for m := int64(MinMemory); m <= 8<<30; m += 7<<20 + 4093 {
		r, err := SessionOptions{Limits: Limits{Memory: m}}.Resolve(SessionOptions{Image: "img"})
		require.NoError(t, err, m)
		assert.LessOrEqual(t, r.TmpfsBytes(), m-MemoryHeadroom(m))
	}

	// An explicit size is not lowered: it is checked.
	_, err := SessionOptions{Limits: Limits{Memory: 128 << 20}}.Resolve(SessionOptions{Image: "img", Limits: Limits{Tmpfs: 256 << 20}})
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "limits.tmpfs 256 MiB")
	r, err := SessionOptions{Limits: Limits{Memory: 128 << 20}}.Resolve(SessionOptions{Image: "img", Limits: Limits{Tmpfs: 8 << 20}})
	require.NoError(t, err)
	assert.EqualValues(t, 8<<20, r.Limits.Tmpfs, "the manager's default size")
}

// The memory the error suggests is enough, and whole MiB.
func TestMemoryFor(t *testing.T) {
	for tmpfs := int64(1); tmpfs < 4<<30; tmpfs = tmpfs*3 + 12345 {
		m := memoryFor(tmpfs)
		assert.Zero(t, m%(1<<20), tmpfs)
		assert.GreaterOrEqual(t, m-MemoryHeadroom(m), tmpfs, "memoryFor(%d) = %d", tmpfs, m)
		less := m - 1<<20
		assert.True(t, less < MinMemory || less-MemoryHeadroom(less) < tmpfs, "memoryFor(%d) = %d is not the least", tmpfs, m)
	}
}

func TestValidateReportsEveryProblem(t *testing.T) {
	err := SessionOptions{Image: "i", User: "0", Cwd: "x", Network: "host", Limits: Limits{Memory: 1, CPUs: 1, Pids: 100, Tmpfs: 1 << 20}, IdleTimeout: time.Hour}.Validate()
	var oe *OptionsError
	require.ErrorAs(t, err, &oe)
	assert.Len(t, oe.Problems, 4, oe.Problems)
}

func TestKey(t *testing.T) {
	base, err := SessionOptions{}.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	same, err := SessionOptions{Image: "img", User: DefaultUser, Limits: Limits{Memory: DefaultMemory}}.Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, base.Key(), same.Key(), "explicit defaults give the same key")

	for name, change := range map[string]func(*SessionOptions){
		"image":   func(o *SessionOptions) { o.Image = "other" },
		"env":     func(o *SessionOptions) { o.Env = map[string]string{"A": "1"} },
		"memory":  func(o *SessionOptions) { o.Limits.Memory *= 2 },
		"network": func(o *SessionOptions) { o.Network = NetworkBridge },
		"labels":  func(o *SessionOptions) { o.Labels = map[string]string{"a": "b"} },
		"idle":    func(o *SessionOptions) { o.IdleTimeout = time.Minute },
		"tools":   func(o *SessionOptions) { o.Tools = []tools.Spec{{Name: "grep"}} },
		"rootfs":  func(o *SessionOptions) { o.WritableRootfs = true },
		"quota":   func(o *SessionOptions) { o.Limits.DiskQuota = 1 << 30 },
		"runtime": func(o *SessionOptions) { o.Runtime = "runsc" },
	} {
		o := base
		change(&o)
		assert.NotEqual(t, base.Key(), o.Key(), name)
	}
	// Map order does not matter.
	a := base
	a.Env = map[string]string{"A": "1", "B": "2", "C": "3"}
	b := base
	b.Env = map[string]string{"C": "3", "B": "2", "A": "1"}
	assert.Equal(t, a.Key(), b.Key())
}

func TestOptionsLabelRoundTrip(t *testing.T) {
	o, err := SessionOptions{Env: map[string]string{"X": "1"}, Labels: map[string]string{"k": "v"}, IdleTimeout: 90 * time.Second}.
		Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	back, err := decodeOptions(o.encode())
	require.NoError(t, err)
	assert.Equal(t, o, back)
	assert.Equal(t, o.Key(), back.Key())
	assert.NotContains(t, o.encode(), "writable_rootfs", "off is left out, so existing labels and pool keys stay as they were")

	o.WritableRootfs = true
	assert.Contains(t, o.encode(), `"writable_rootfs":true`)
	back, err = decodeOptions(o.encode())
	require.NoError(t, err)
	assert.True(t, back.WritableRootfs, "adoption gets it back from the label")
	assert.Equal(t, o.Key(), back.Key())
}

func TestWritableRootfsDefaults(t *testing.T) {
	r, err := SessionOptions{}.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	assert.False(t, r.WritableRootfs, "read-only root by default")
	r, err = SessionOptions{}.Resolve(SessionOptions{Image: "img", WritableRootfs: true})
	require.NoError(t, err)
	assert.True(t, r.WritableRootfs, "a manager default turns it on")
	r, err = SessionOptions{WritableRootfs: true}.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	assert.True(t, r.WritableRootfs)
	_, err = SessionOptions{Limits: Limits{Disk: 64 << 20}}.Resolve(SessionOptions{Image: "img", WritableRootfs: true})
	assert.ErrorIs(t, err, ErrInvalidOptions, "a default cannot lift the disk bound of a session")
}

// The runtime comes from the defaults unless the session names one, and an
// empty one (the engine's default) stays out of the label and the pool key.
func TestRuntimeDefaults(t *testing.T) {
	r, err := SessionOptions{}.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	assert.Empty(t, r.Runtime)
	assert.NotContains(t, r.encode(), "runtime", "older labels and pool keys stay as they were")
	r, err = SessionOptions{}.Resolve(SessionOptions{Image: "img", Runtime: "runsc"})
	require.NoError(t, err)
	assert.Equal(t, "runsc", r.Runtime, "serve --runtime is every session's default")
	r, err = SessionOptions{Runtime: "runc"}.Resolve(SessionOptions{Image: "img", Runtime: "runsc"})
	require.NoError(t, err)
	assert.Equal(t, "runc", r.Runtime, "a session may name another")
	back, err := decodeOptions(r.encode())
	require.NoError(t, err)
	assert.Equal(t, "runc", back.Runtime, "adoption gets it back from the label")
}

// A session that bounds its volumes one way takes no bound of the other way
// from the defaults.
func TestDiskQuotaDefaults(t *testing.T) {
	d := SessionOptions{Image: "img", Limits: Limits{DiskQuota: 10 << 30}}
	r, err := SessionOptions{}.Resolve(d)
	require.NoError(t, err)
	assert.Equal(t, int64(10<<30), r.Limits.DiskQuota)
	assert.Zero(t, r.Limits.Disk)
	r, err = SessionOptions{Limits: Limits{Disk: 64 << 20}}.Resolve(d)
	require.NoError(t, err)
	assert.Equal(t, Limits{Disk: 64 << 20}, Limits{Disk: r.Limits.Disk, DiskQuota: r.Limits.DiskQuota})
	r, err = SessionOptions{Limits: Limits{DiskQuota: 1 << 30}}.Resolve(SessionOptions{Image: "img", Limits: Limits{Disk: 64 << 20}})
	require.NoError(t, err)
	assert.Equal(t, Limits{DiskQuota: 1 << 30}, Limits{Disk: r.Limits.Disk, DiskQuota: r.Limits.DiskQuota})
	assert.NotContains(t, SessionOptions{}.encode(), "disk_quota", "no quota is left out: older labels and pool keys stay as they were")
	back, err := decodeOptions(r.encode())
	require.NoError(t, err)
	assert.Equal(t, r.Limits.DiskQuota, back.Limits.DiskQuota, "adoption gets it back from the label")
}

func TestParseUser(t *testing.T) {
	uid, gid, err := ParseUser("1000:1001")
	require.NoError(t, err)
	assert.Equal(t, []int{1000, 1001}, []int{uid, gid})
	uid, gid, err = ParseUser("42")
	require.NoError(t, err)
	assert.Equal(t, []int{42, 42}, []int{uid, gid})
	for _, bad := range []string{"", "0", "root", "1:x", "-1:5", "5:0"} {
		_, _, err := ParseUser(bad)
		assert.Error(t, err, bad)
	}
}

func TestStateMachine(t *testing.T) {
	assert.True(t, canMove(StateStarting, StateReady))
	assert.True(t, canMove(StateReady, StateFailed))
	assert.True(t, canMove(StateFailed, StateClosing))
	assert.True(t, canMove(StateClosing, StateClosed))
	assert.False(t, canMove(StateClosed, StateReady))
	assert.False(t, canMove(StateClosing, StateFailed), "a failure noticed during close is not a failure")
	assert.False(t, canMove(StateFailed, StateReady))
	assert.Equal(t, "ready", StateReady.String())
	b, _ := StateFailed.MarshalText()
	assert.Equal(t, "failed", string(b))
}

func TestStatusDescribe(t *testing.T) {
	assert.Contains(t, Status{ExitCode: 137}.Describe(), "SIGKILL")
	assert.Contains(t, Status{ExitCode: 137, OOMKilled: true}.Describe(), "out of memory")
	assert.Contains(t, Status{ExitCode: 1, Error: "boom"}.Describe(), "code 1: boom")
	// OOMKilled stays set after any process was OOM-killed: a clean exit
	// later is not "out of memory".
	assert.Equal(t, "its container exited with code 0", Status{ExitCode: 0, OOMKilled: true}.Describe())
	assert.Contains(t, Status{ExitCode: 137}.Describe(), "or by a process in the sandbox")
	// A runtime that knows why the engine ended it says so in place of
	// the guess from the exit code.
	assert.Equal(t, "its container exited with code 137 (evicted: disk limit): usage exceeds 10Gi",
		Status{ExitCode: 137, Reason: "evicted: disk limit", Error: "usage exceeds 10Gi"}.Describe())
}

func TestManagerOptionsValidation(t *testing.T) {
	o := ManagerOptions{
		Defaults: SessionOptions{User: "0"},
		Pools:    []PoolOptions{{Size: -1}},
	}
	err := o.setDefaults()
	require.Error(t, err)
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "defaults: user")
	assert.Contains(t, err.Error(), "pools[0].size")
}

// A request's fields overlay a profile's: set fields win, maps merge, and
// the manager's defaults fill what neither sets.
func TestOverlayOnProfile(t *testing.T) {
	profile := SessionOptions{Image: "prof", Env: map[string]string{"A": "1", "B": "2"}, Cwd: "/src", Limits: Limits{Memory: 2 << 30},
		Skills: []string{"fuzz"}, SkillsInstall: SkillsInstallEager, WritableRootfs: true}
	req := SessionOptions{Env: map[string]string{"B": "3"}, Limits: Limits{CPUs: 2}}
	r, err := req.Over(profile).Resolve(SessionOptions{Image: "default", User: "1234"})
	require.NoError(t, err)
	assert.Equal(t, "prof", r.Image)
	assert.Equal(t, map[string]string{"A": "1", "B": "3"}, r.Env)
	assert.Equal(t, "/src", r.Cwd)
	assert.Equal(t, "1234", r.User, "the manager's default")
	assert.Equal(t, Limits{Memory: 2 << 30, CPUs: 2, Pids: DefaultPids, Tmpfs: DefaultTmpfs}, r.Limits)
	assert.Equal(t, []string{"fuzz"}, r.Skills)
	assert.Equal(t, SkillsInstallEager, r.SkillsInstall)
	assert.True(t, r.WritableRootfs)

	r, err = SessionOptions{Image: "mine", Skills: []string{}}.Over(profile).Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, "mine", r.Image)
	assert.Empty(t, r.Skills, "an empty list selects none, over the profile's")

	// allow_hosts comes with the profile's network, not over another one.
	web := SessionOptions{Image: "web", Network: NetworkBridge, AllowHosts: []string{"example.com"}}
	r, err = SessionOptions{}.Over(web).Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"example.com"}, r.AllowHosts)
	r, err = SessionOptions{AllowHosts: []string{"go.dev"}}.Over(web).Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"go.dev"}, r.AllowHosts)
	r, err = SessionOptions{Network: NetworkNone}.Over(web).Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Empty(t, r.AllowHosts, "a request's own network takes none of the profile's hosts")
}

// shell_init and entrypoint: "image" or "none" (resolved as "", the same
// pool key as options that never name them), overlaid like the other
// strings, anything else refused naming the key; the runtime's variables
// are not a session's to set.
func TestImageEnvironmentOptions(t *testing.T) {
	plain, err := SessionOptions{}.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	none, err := SessionOptions{ShellInit: ShellInitNone, Entrypoint: EntrypointNone}.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	assert.Equal(t, plain.Key(), none.Key(), `"none" is the default, spelled out`)
	assert.Empty(t, none.ShellInit)

	profile := SessionOptions{Image: "img", ShellInit: ShellInitImage, Entrypoint: EntrypointImage}
	r, err := SessionOptions{}.Over(profile).Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, ShellInitImage, r.ShellInit)
	assert.Equal(t, EntrypointImage, r.Entrypoint)
	assert.NotEqual(t, plain.Key(), r.Key(), "a pool of one is not a pool of the other")
	r, err = SessionOptions{ShellInit: ShellInitNone}.Over(profile).Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Empty(t, r.ShellInit, "a request turns the profile's off")
	assert.Equal(t, EntrypointImage, r.Entrypoint)
	back, err := decodeOptions(r.encode())
	require.NoError(t, err)
	assert.Equal(t, r, back)

	_, err = SessionOptions{ShellInit: "bashrc", Entrypoint: "yes"}.Resolve(SessionOptions{Image: "img"})
	require.ErrorIs(t, err, ErrInvalidOptions)
	require.ErrorContains(t, err, `shell_init: "bashrc" is not "none" or "image"`)
	require.ErrorContains(t, err, `entrypoint: "yes" is not "none" or "image"`)

	_, err = SessionOptions{Env: map[string]string{"SANDBOXD_IMAGE_HOME": "/x"}}.Resolve(SessionOptions{Image: "img"})
	assert.ErrorContains(t, err, `env: "SANDBOXD_IMAGE_HOME" is under SANDBOXD_IMAGE_, which is reserved`)
}
