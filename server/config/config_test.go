package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// pool: N is a fixed pool; pool: {min, max, idle} one that follows demand.
func TestParsePool(t *testing.T) {
	f, err := Parse("c.yaml", []byte("profiles:\n  fixed:\n    pool: 3\n  elastic:\n    pool: {min: 2, max: 20, idle: 5m}\n  default_idle:\n    pool:\n      min: 0\n      max: 4\n"))
	require.NoError(t, err)
	assert.Equal(t, [3]any{3, 0, time.Duration(0)}, [3]any{f.Profiles["fixed"].Pool, f.Profiles["fixed"].PoolMax, f.Profiles["fixed"].PoolIdle})
	assert.Equal(t, [3]any{2, 20, 5 * time.Minute}, [3]any{f.Profiles["elastic"].Pool, f.Profiles["elastic"].PoolMax, f.Profiles["elastic"].PoolIdle})
	assert.Equal(t, [3]any{0, 4, time.Duration(0)}, [3]any{f.Profiles["default_idle"].Pool, f.Profiles["default_idle"].PoolMax, f.Profiles["default_idle"].PoolIdle})
}

func TestParseValid(t *testing.T) {
	skillsA, skillsB := t.TempDir(), t.TempDir()
	src := `# sandboxd serve --config
skills_dirs:
  - ` + skillsA + `
  - ` + skillsB + `
profiles:
  default:
    image: sandboxd-default:latest
    pool: 4
  fuzz:
    image: fuzz-image:1
    env:
      ASAN_OPTIONS: detect_leaks=0
      JOBS: 4
    cwd: /workspace/src
    user: "1000:1000"
    limits:
      memory: 4GiB
      cpus: 2.5
      pids: 2048
      tmpfs: 512MiB
      disk_quota: 20GiB
    network: bridge
    allow_hosts: [github.com, 10.0.0.0/8]
    idle_timeout: 2h
    runtime: runsc
    writable_rootfs: true
    labels: {team: security}
    pool: 2
    skills: [fuzz, review/go]
    skills_install: eager
  forever:
    idle_timeout: never
    skills: all
    limits:
      memory: 1073741824
      disk: 64MiB
  bare:
  task:
    image: sandboxd-task:latest
    user: image
    writable_rootfs: true
    editable_paths: [/testbed, /opt/venv]
  web:
    mcp_servers:
      - name: fetch
        image: mcp-fetch:1
        network: bridge
        allow_hosts: [docs.example.com, 192.0.2.0/24]
      - name: memory
        image: mcp-memory:1
`
	f, err := Parse("config.yaml", []byte(src))
	require.NoError(t, err)
	assert.Equal(t, []string{skillsA, skillsB}, f.SkillsDirs)
	assert.Equal(t, []string{"bare", "default", "forever", "fuzz", "task", "web"}, f.Names())

	assert.Equal(t, sandbox.SessionOptions{Image: "sandboxd-default:latest"}, f.Profiles["default"].Options)
	assert.Equal(t, 4, f.Profiles["default"].Pool)
	assert.Equal(t, sandbox.SessionOptions{
		Image: "fuzz-image:1", Env: map[string]string{"ASAN_OPTIONS": "detect_leaks=0", "JOBS": "4"}, Cwd: "/workspace/src", User: "1000:1000",
		Limits:  sandbox.Limits{Memory: 4 << 30, CPUs: 2.5, Pids: 2048, Tmpfs: 512 << 20, DiskQuota: 20 << 30},
		Network: "bridge", AllowHosts: []string{"github.com", "10.0.0.0/8"}, IdleTimeout: 2 * time.Hour, Runtime: "runsc",
		WritableRootfs: true, Labels: map[string]string{"team": "security"},
		Skills: []string{"fuzz", "review/go"}, SkillsInstall: sandbox.SkillsInstallEager,
	}, f.Profiles["fuzz"].Options)
	assert.Equal(t, 2, f.Profiles["fuzz"].Pool)
	assert.Equal(t, sandbox.SessionOptions{IdleTimeout: sandbox.NoIdleTimeout, Skills: []string{sandbox.SkillsAll},
		Limits: sandbox.Limits{Memory: 1 << 30, Disk: 64 << 20}}, f.Profiles["forever"].Options)
	assert.Equal(t, sandbox.SessionOptions{}, f.Profiles["bare"].Options)
	assert.Equal(t, sandbox.SessionOptions{Image: "sandboxd-task:latest", User: sandbox.UserImage, WritableRootfs: true,
		EditablePaths: []string{"/testbed", "/opt/venv"}}, f.Profiles["task"].Options)
	assert.Equal(t, []sandbox.MCPServer{
		{Name: "fetch", Image: "mcp-fetch:1", Network: sandbox.NetworkBridge, AllowHosts: []string{"docs.example.com", "192.0.2.0/24"}},
		{Name: "memory", Image: "mcp-memory:1"},
	}, f.Profiles["web"].Options.MCPServers, "a sidecar's egress is declared in its profile entry; none unless said")
	require.NoError(t, f.Check(sandbox.SessionOptions{Image: "img"}))

	p, err := f.Lookup("fuzz")
	require.NoError(t, err)
	assert.Equal(t, "fuzz", p.Name)
}

func TestParseEmpty(t *testing.T) {
	for _, src := range []string{"", "# nothing\n", "profiles:\n", "profiles: {}\nskills_dirs: []\n"} {
		f, err := Parse("c.yaml", []byte(src))
		require.NoError(t, err, src)
		assert.Empty(t, f.Profiles)
		assert.Empty(t, f.SkillsDirs)
		assert.NoError(t, f.Check(sandbox.SessionOptions{}))
	}
}

// Anchors, aliases and merge keys share settings between profiles; keys
// written in a profile win over merged ones.
func TestParseAliasesAndMerges(t *testing.T) {
	src := `profiles:
  base: &base
    image: base:1
    env: &env {A: "1"}
    limits: {memory: 2GiB}
  child:
    <<: *base
    image: child:1
  other:
    env: *env
`
	f, err := Parse("c.yaml", []byte(src))
	require.NoError(t, err)
	assert.Equal(t, sandbox.SessionOptions{Image: "child:1", Env: map[string]string{"A": "1"}, Limits: sandbox.Limits{Memory: 2 << 30}},
		f.Profiles["child"].Options)
	assert.Equal(t, map[string]string{"A": "1"}, f.Profiles["other"].Options.Env)
}

func TestParseErrors(t *testing.T) {
	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	for name, c := range map[string]struct{ src, want string }{
		"size": {"profiles:\n  fuzz:\n    limits:\n      memory: 2 GB\n",
			`config.yaml:4:15: profiles.fuzz.limits.memory: "2 GB" is not a size (e.g. 2GiB)`},
		"size type":          {"profiles:\n  a:\n    limits: {tmpfs: [1]}\n", `config.yaml:3:21: profiles.a.limits.tmpfs: want a size such as 2GiB`},
		"negative size":      {"profiles:\n  a:\n    limits:\n      disk: -5\n", `config.yaml:4:13: profiles.a.limits.disk: "-5" is not a size`},
		"unknown top":        {"profile:\n  a: {}\n", `config.yaml:1:1: profile: unknown key (known here: allow_networks, profiles, skills_dirs)`},
		"unknown in profile": {"profiles:\n  a:\n    imagee: x\n", `config.yaml:3:5: profiles.a.imagee: unknown key (known here: allow_hosts, cwd, editable_paths, entrypoint, env, idle_timeout, image, inject, labels, limits, mcp_servers, network, pool, runtime, shell_init, skills, skills_install, snapshot_retention, snapshot_tools, terminal, tool_set, transfer_tools, user, writable_rootfs)`},
		"unknown in limits":  {"profiles:\n  a:\n    limits:\n      mem: 1GiB\n", `config.yaml:4:7: profiles.a.limits.mem: unknown key (known here: cpus, disk, disk_quota, memory, pids, tmpfs)`},
		"profile name":       {"profiles:\n  Fuzz: {}\n", `config.yaml:2:3: profiles.Fuzz: "Fuzz" is not a profile name`},
		"profile name slash": {"profiles:\n  a/b: {}\n", `config.yaml:2:3: profiles.a/b: "a/b" is not a profile name`},
		"mcp server key":     {"profiles:\n  a:\n    mcp_servers:\n      - name: m\n        imagee: x\n", `config.yaml:5:9: profiles.a.mcp_servers[0].imagee: unknown key (known here: allow_hosts, args, command, env, image, limits, name, network, path, port, secrets, start, transport, user, workspace)`},
		"mcp server port":    {"profiles:\n  a:\n    mcp_servers:\n      - name: m\n        port: 70000\n", `config.yaml:5:15: profiles.a.mcp_servers[0].port: 70000: want 1 to 65535`},
		"twice":              {"profiles:\n  a: {}\n  a: {}\n", `config.yaml:3:3: profiles.a: given twice`},
		"env list":           {"profiles:\n  a:\n    env: [A=1]\n", `config.yaml:3:10: profiles.a.env: want a mapping of keys to values, not a list`},
		"env null":           {"profiles:\n  a:\n    env:\n      A:\n", `config.yaml:4:9: profiles.a.env.A: no value`},
		"image list":         {"profiles:\n  a:\n    image: [x]\n", `config.yaml:3:12: profiles.a.image: want a single value, not a list`},
		"image null":         {"profiles:\n  a:\n    image:\n", `profiles.a.image: no value (leave the key out to take the server's default)`},
		"idle":               {"profiles:\n  a:\n    idle_timeout: 30 minutes\n", `config.yaml:3:19: profiles.a.idle_timeout: "30 minutes" is not a duration such as 30m or 1h30m, or never`},
		"no change timeout":  {"profiles:\n  a:\n    terminal:\n      no_change_timeout: 45\n", `config.yaml:4:26: profiles.a.terminal.no_change_timeout: "45" is not a duration such as 30s or 2m`},
		"terminal key":       {"profiles:\n  a:\n    terminal:\n      soft: 1s\n", `config.yaml:4:7: profiles.a.terminal.soft: unknown`},
		"idle number":        {"profiles:\n  a:\n    idle_timeout: 1800\n", `profiles.a.idle_timeout: "1800" is not a duration`},
		"idle negative":      {"profiles:\n  a:\n    idle_timeout: -1s\n", `profiles.a.idle_timeout: "-1s" is not a duration`},
		"pool":               {"profiles:\n  a:\n    pool: -1\n", `config.yaml:3:11: profiles.a.pool: -1: want 0 (no warm pool) to 1000`},
		"pool type":          {"profiles:\n  a:\n    pool: two\n", `config.yaml:3:11: profiles.a.pool: want a whole number, not "two"`},
		"pool min only":      {"profiles:\n  a:\n    pool: {min: 2}\n", `config.yaml:3:11: profiles.a.pool: want both min and max (or pool: N for a fixed pool of N)`},
		"pool max below":     {"profiles:\n  a:\n    pool: {min: 3, max: 2}\n", `config.yaml:3:11: profiles.a.pool: max 2 is below min 3`},
		"pool max range":     {"profiles:\n  a:\n    pool: {min: 3, max: 5000}\n", `profiles.a.pool.max: 5000: want 0 (no warm pool) to 1000`},
		"pool idle":          {"profiles:\n  a:\n    pool: {min: 1, max: 2, idle: 5}\n", `profiles.a.pool.idle: "5" is not a duration such as 30s or 2m`},
		"pool key":           {"profiles:\n  a:\n    pool: {min: 1, max: 2, size: 5}\n", `profiles.a.pool.size: unknown`},
		"cpus":               {"profiles:\n  a:\n    limits: {cpus: lots}\n", `profiles.a.limits.cpus: want a number, not "lots"`},
		"cpus nan":           {"profiles:\n  a:\n    limits: {cpus: .nan}\n", `profiles.a.limits.cpus: ".nan" is not a number`},
		"rootfs":             {"profiles:\n  a:\n    writable_rootfs: yes\n", `profiles.a.writable_rootfs: want true or false, not "yes"`},
		"editable not list":  {"profiles:\n  a:\n    editable_paths: /testbed\n", `profiles.a.editable_paths:`},
		"skills":             {"profiles:\n  a:\n    skills: fuzz\n", `config.yaml:3:13: profiles.a.skills: "fuzz": want "all" or a list of skill path prefixes`},
		"skills item":        {"profiles:\n  a:\n    skills: [fuzz, {x: 1}]\n", `profiles.a.skills[1]: want a single value, not a mapping`},
		"profiles list":      {"profiles: [a, b]\n", `config.yaml:1:11: profiles: want a mapping of keys to values, not a list`},
		"top list":           {"- a\n", `config.yaml:1:1: want a mapping of keys to values, not a list`},
		"skills dir rel":     {"skills_dirs: [skills]\n", `config.yaml:1:15: skills_dirs[0]: "skills" is not an absolute path`},
		"skills dir missing": {"skills_dirs:\n  - /nonexistent/skills\n", `config.yaml:2:5: skills_dirs[0]: stat /nonexistent/skills: no such file or directory`},
		"skills dir file":    {"skills_dirs: [" + file + "]\n", `skills_dirs[0]: "` + file + `" is not a directory`},
		"skills dir unclean": {"skills_dirs: [/tmp/]\n", `skills_dirs[0]: "/tmp/" is not a clean path (did you mean "/tmp"?)`},
		"skills dirs map":    {"skills_dirs: {a: b}\n", `config.yaml:1:14: skills_dirs: want a list, not a mapping`},
		"network own":        {"allow_networks: [corp, sandboxd-abc]\n", `config.yaml:1:24: allow_networks[1]: "sandboxd-abc" names one of sandboxd's own networks`},
		"network sidecar":    {"allow_networks:\n  - sandboxd-mcp-x\n", `config.yaml:2:5: allow_networks[0]: "sandboxd-mcp-x" names one of sandboxd's own networks`},
		"network mode":       {"allow_networks: [bridge]\n", `allow_networks[0]: "bridge" is a network mode of sandboxd's, not an engine network to list`},
		"network host":       {"allow_networks: [host]\n", `allow_networks[0]: "host" is never allowed`},
		"network twice":      {"allow_networks: [corp, corp]\n", `config.yaml:1:24: allow_networks[1]: "corp" is listed twice`},
		"network syntax":     {"allow_networks: [\"a b\"]\n", `allow_networks[0]: "a b" is not a network name`},
		"syntax":             {"profiles:\n  a:\n    image: \"x\n", `config.yaml:3: not valid YAML: found unexpected end of stream`},
		"tab":                {"profiles:\n\ta: {}\n", `config.yaml:2: not valid YAML: found character that cannot start any token`},
		"two docs":           {"profiles: {}\n---\nprofiles: {}\n", `config.yaml:2:1: a second YAML document: the file holds one`},
		"merge scalar":       {"profiles:\n  a:\n    <<: 1\n", `config.yaml:3:9: profiles.a: a merge key (<<) takes a mapping or a list of mappings, not "1"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("config.yaml", []byte(c.src))
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.want)
			var ce *Error
			assert.ErrorAs(t, err, &ce, "a *config.Error")
		})
	}
}

// Every problem is reported, each on its own line.
func TestParseReportsEveryProblem(t *testing.T) {
	_, err := Parse("c.yaml", []byte("profiles:\n  a:\n    limits: {memory: 2 GB}\n    pool: x\n  B: {}\nextra: 1\n"))
	require.Error(t, err)
	lines := strings.Split(err.Error(), "\n")
	assert.Len(t, lines, 4, err.Error())
	assert.Contains(t, lines[0], "c.yaml:3:22: profiles.a.limits.memory:")
	assert.Contains(t, lines[1], "c.yaml:4:11: profiles.a.pool:")
	assert.Contains(t, lines[2], "c.yaml:5:3: profiles.B:")
	assert.Contains(t, lines[3], "c.yaml:6:1: extra: unknown key")
}

// Check resolves each profile over the server's defaults and reports what
// Validate finds at the line of the option, naming the profile.
func TestCheck(t *testing.T) {
	src := `profiles:
  tiny:
    limits:
      memory: 1MiB
  budget:
    limits:
      memory: 128MiB
      tmpfs: 100MiB
  env:
    env:
      1BAD: x
  host:
    network: host
    allow_hosts: [example.com]
  edit:
    editable_paths: [testbed]
  sidecar:
    mcp_servers:
      - name: m
        image: x
        network: host
        allow_hosts: [example.com]
  fine: {}
`
	f, err := Parse("config.yaml", []byte(src))
	require.NoError(t, err)
	err = f.Check(sandbox.SessionOptions{Image: "img"})
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`config.yaml:6:5: profiles.budget.limits: /tmp (limits.tmpfs 100 MiB) = 100 MiB of tmpfs, more than the 80 MiB that limits.memory 128 MiB leaves`,
		`config.yaml:10:5: profiles.env.env: "1BAD" is not a variable name`,
		`config.yaml:13:5: profiles.host.network: "host" is never allowed`,
		`config.yaml:14:5: profiles.host.allow_hosts: needs network "bridge"`,
		`config.yaml:4:7: profiles.tiny.limits.memory: 1 MiB is below the minimum of 64 MiB`,
		`config.yaml:16:5: profiles.edit.editable_paths: [0]: "testbed" is not an absolute path`,
		`profiles.sidecar.mcp_servers[0].network: "host": want "bridge" (egress) or nothing (none)`,
		`profiles.sidecar.mcp_servers[0].allow_hosts: needs network "bridge"`,
	} {
		assert.Contains(t, msg, want)
	}
	assert.NotContains(t, msg, "profiles.fine")
	assert.Len(t, strings.Split(msg, "\n"), 8, msg)

	// A problem the server's defaults cause is reported at the profile,
	// saying so.
	f, err = Parse("config.yaml", []byte("profiles:\n  a:\n    limits: {memory: 64MiB}\n"))
	require.NoError(t, err)
	err = f.Check(sandbox.SessionOptions{Image: "img", Limits: sandbox.Limits{Disk: 1 << 30}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "config.yaml:3:5: profiles.a.limits:")
	err = f.Check(sandbox.SessionOptions{Image: "img", User: "0"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config.yaml:2:3: profiles.a.user: "0" is root; sandboxes never run as root (the server's default: the profile does not set it)`)
}

func TestLookupUnknown(t *testing.T) {
	f, err := Parse("c.yaml", []byte("profiles:\n  b: {}\n  a: {}\n"))
	require.NoError(t, err)
	_, err = f.Lookup("fuzz")
	require.EqualError(t, err, `unknown profile "fuzz" (defined: a, b)`)
	f, err = Parse("c.yaml", nil)
	require.NoError(t, err)
	_, err = f.Lookup("fuzz")
	require.EqualError(t, err, `unknown profile "fuzz": this server defines no profiles`)
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte("profiles:\n  a:\n    limits: {memory: 2 GB}\n"), 0o600))
	_, err := Load(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), path+`:3:22: profiles.a.limits.memory: "2 GB" is not a size (e.g. 2GiB)`)

	_, err = Load(filepath.Join(dir, "missing.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist)

	big := filepath.Join(dir, "big.yaml")
	require.NoError(t, os.WriteFile(big, []byte("#"+strings.Repeat("x", MaxFileBytes)), 0o600))
	_, err = Load(big)
	require.ErrorContains(t, err, "larger than 1024 KiB")
}

// A file of nested merges of aliases (a "billion laughs") is cut off, not
// walked: what the walk follows is counted.
func TestParseAliasBomb(t *testing.T) {
	src := "a: &a {image: x}\n"
	prev := "a"
	for i := range 7 {
		name := string(rune('b' + i))
		src += name + ": &" + name + " {<<: [" + strings.TrimSuffix(strings.Repeat("*"+prev+", ", 10), ", ") + "]}\n"
		prev = name
	}
	src += "profiles:\n  p: *" + prev + "\n"
	_, err := Parse("c.yaml", []byte(src))
	require.ErrorContains(t, err, "profiles.p: too many nodes (more than 100000, aliases counted)")
}

// The example config of docs/configuration.md parses and every profile in it resolves
// (its skill root replaced by one that exists here).
func TestReadmeExample(t *testing.T) {
	readme, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	_, rest, ok := strings.Cut(string(readme), "## Profiles\n")
	require.True(t, ok, "docs/configuration.md has a Profiles section")
	_, rest, ok = strings.Cut(rest, "```yaml\n")
	require.True(t, ok, "with a yaml example")
	example, _, ok := strings.Cut(rest, "```")
	require.True(t, ok)
	example = strings.ReplaceAll(example, "/srv/sandboxd/skills", t.TempDir())
	f, err := Parse("configuration.md", []byte(example))
	require.NoError(t, err)
	assert.Equal(t, []string{"codex", "default", "fuzz", "gvisor", "scratch", "service", "swe", "swe-as-image", "swebench"}, f.Names())
	require.NoError(t, f.Check(sandbox.SessionOptions{Image: "img", Limits: sandbox.Limits{DiskQuota: 10 << 30}}))
	assert.Equal(t, 2, f.Profiles["fuzz"].Pool)
	assert.Equal(t, []string{"/testbed", "/opt/venv"}, f.Profiles["swe"].Options.EditablePaths)
	assert.Equal(t, sandbox.UserImage, f.Profiles["swe-as-image"].Options.User)
	assert.Equal(t, sandbox.ShellInitImage, f.Profiles["swebench"].Options.ShellInit)
	assert.Equal(t, sandbox.EntrypointImage, f.Profiles["service"].Options.Entrypoint)
	assert.Equal(t, sandbox.ToolSetOpenAI, f.Profiles["codex"].Options.ToolSet)
}

// A profile names an engine network only if allow_networks lists it, and
// the error is at the profile's line.
func TestCheckAllowNetworks(t *testing.T) {
	src := `allow_networks: [corp-proxy]
profiles:
  proxied:
    network: corp-proxy
  other:
    network: lab
  own:
    network: sandboxd-abc
  bridged:
    network: bridge
`
	f, err := Parse("config.yaml", []byte(src))
	require.NoError(t, err)
	assert.Equal(t, []string{"corp-proxy"}, f.AllowNetworks)
	err = f.Check(sandbox.SessionOptions{Image: "img"})
	require.Error(t, err)
	msg := err.Error()
	assert.Contains(t, msg, `config.yaml:6:5: profiles.other.network: "lab" is not allowed on this server: ask for "none", "bridge", "internal" or one of the networks the operator lists (corp-proxy)`)
	assert.Contains(t, msg, `config.yaml:8:5: profiles.own.network: "sandboxd-abc" names one of sandboxd's own networks`)
	assert.Len(t, strings.Split(msg, "\n"), 2, msg)

	f.AllowNetworks = append(f.AllowNetworks, "lab") // serve --allow-network lab
	err = f.Check(sandbox.SessionOptions{Image: "img"})
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "profiles.other")
}
