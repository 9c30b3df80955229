package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

// binPath is the sandboxd binary built once for the tests that run it as a
// child process, the way a sandbox runs it.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sandboxd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binPath = filepath.Join(dir, "sandboxd")
	args := []string{"build", "-o", binPath}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, ".")...)
	if !raceEnabled {
		build.Env = append(os.Environ(), "CGO_ENABLED=0") // the shipped build
	}
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building sandboxd: %v\n%s", err, out)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

func TestDispatch(t *testing.T) {
	cases := []struct {
		name    string
		args    []string
		code    int
		out     string
		errText string
	}{
		{"no command", nil, exitUsage, "", "usage: sandboxd <command>"},
		{"help", []string{"help"}, exitOK, "agent-proxy", ""},
		{"--help", []string{"--help"}, exitOK, "commands:", ""},
		{"unknown", []string{"frobnicate"}, exitUsage, "", `unknown command "frobnicate"`},
		{"agent -h", []string{"agent", "-h"}, exitOK, "", "--stdio"},
		{"agent without a mode", []string{"agent"}, exitUsage, "", "give --stdio, --socket PATH, or both"},
		{"agent bad flag", []string{"agent", "--nope"}, exitUsage, "", "flag provided but not defined: -nope"},
		{"agent extra args", []string{"agent", "--stdio", "extra"}, exitUsage, "", "unexpected arguments: extra"},
		{"agent bad tools", []string{"agent", "--stdio", "--tools", "{"}, exitUsage, "", "not a JSON array of tool specs"},
		{"agent nameless tool", []string{"agent", "--stdio", "--tools", "[{}]"}, exitUsage, "", "spec 0 has no name"},
		{"agent tools file missing", []string{"agent", "--stdio", "--tools", "@/nonexistent.json"}, exitUsage, "", "no such file"},
		{"agent bad log level", []string{"agent", "--stdio", "--log-level", "loud"}, exitUsage, "", "want debug, info, warn or error"},
		{"agent unknown tool", []string{"agent", "--socket", filepath.Join(t.TempDir(), "a.sock"), "--workspace", t.TempDir(), "--state-dir", t.TempDir(),
			"--tools", `[{"name":"nope"}]`}, exitError, "", `starting the tools: tools: no factory "nope"`},
		{"proxy without socket", []string{"agent-proxy"}, exitUsage, "", "--socket PATH is required"},
		{"shell -h", []string{"shell", "-h"}, exitOK, "", "--follow SESSION"},
		{"shell --follow without a token", []string{"shell", "--follow", "abc", "--session-token", ""}, exitUsage, "", "--follow needs the session's token"},
		{"shell --follow and --session", []string{"shell", "--follow", "abc", "--session", "def", "--session-token", "t"}, exitUsage, "", "--follow watches a session: it takes no --session"},
		{"version", []string{"version"}, exitOK, "sandboxd ", ""},
		{"--version", []string{"--version"}, exitOK, "go1.", ""},
		{"version -h", []string{"version", "-h"}, exitOK, "", "usage: sandboxd version"},
		{"proxy, no agent", []string{"agent-proxy", "--socket", "/nonexistent.sock"}, exitError, "", "no agent socket at /nonexistent.sock"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(c.args, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
			assert.Equal(t, c.code, code, "stderr: %s", errOut.String())
			assert.Contains(t, out.String(), c.out)
			assert.Contains(t, errOut.String(), c.errText)
		})
	}
}

// A bad flag is one line and the hint to -h, not the whole help; a
// duration given as a bare number names the unit it lacks.
func TestBadFlagIsOneLine(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"tools", "--nope"}, "sandboxd tools: flag provided but not defined: -nope\nrun 'sandboxd tools -h' for help\n"},
		{[]string{"run", "--timeout", "5", "--", "true"}, "sandboxd run: invalid value \"5\" for flag -timeout: a duration needs a unit: did you mean 5s?\nrun 'sandboxd run -h' for help\n"},
		{[]string{"run", "--timeout=0.5", "--", "true"}, "did you mean 0.5s?"},
		{[]string{"run", "--timeout", "soon", "--", "true"}, "sandboxd run: invalid value \"soon\" for flag -timeout: want a duration such as 90s, 15m or 1h30m\n"},
		{[]string{"serve", "--drain-timeout", "30"}, "for flag -drain-timeout: a duration needs a unit: did you mean 30s?"},
		{[]string{"tools", "--format"}, "sandboxd tools: flag needs an argument: -format\n"},
	} {
		var out, errOut bytes.Buffer
		code := run(c.args, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
		assert.Equal(t, exitUsage, code, "%v", c.args)
		assert.Contains(t, errOut.String(), c.want, "%v", c.args)
		assert.NotContains(t, errOut.String(), "usage:", "%v: the whole help was printed", c.args)
		assert.LessOrEqual(t, strings.Count(errOut.String(), "\n"), 2, "%v: %s", c.args, errOut.String())
	}
}

// The methods on a session need its token: without SANDBOXD_SESSION_TOKEN
// the snapshot commands say so before they dial (the operator token alone
// reaches no session, and the server would answer "no session").
func TestSnapshotCommandsNeedTheSessionToken(t *testing.T) {
	t.Setenv("SANDBOXD_SESSION_TOKEN", "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"snapshot", "create", "--session", "abc"}, "snapshot create --session needs the session's token in SANDBOXD_SESSION_TOKEN"},
		{[]string{"restore", "--session", "abc", "snap"}, "restore needs the session's token in SANDBOXD_SESSION_TOKEN"},
		{[]string{"fork", "--session", "abc"}, "fork --session needs the session's token in SANDBOXD_SESSION_TOKEN"},
		{[]string{"pause", "abc"}, "the session's token is needed: SANDBOXD_SESSION_TOKEN"},
	} {
		var out, errOut bytes.Buffer
		code := run(c.args, stdio{in: strings.NewReader(""), out: &out, err: &errOut})
		assert.Equal(t, exitUsage, code, "%v: %s", c.args, errOut.String())
		assert.Contains(t, errOut.String(), c.want, "%v", c.args)
	}
}
