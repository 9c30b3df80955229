package skill

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
)

// A skill tool's effect is seen in the workspace: the script runs there,
// with SKILL_DIR and $HOME/.local/bin first on PATH.
func TestSkillToolWritesIntoTheWorkspace(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "files/write-file", Exec: execOf(
		skills.Param{Name: "path", Kind: skills.Positional, Position: 0, Required: true, Type: "string"},
		skills.Param{Name: "content", Kind: skills.Named, Required: true, Type: "string"},
	)}, map[string]string{"scripts/run.sh": `set -e
[ "$2" = --content ]
printf '%s' "$3" > "$1"
echo "wrote $1 in $PWD"
echo "SKILL_DIR=$SKILL_DIR"
echo "PATH=$PATH"
`})
	ts := toolset(t, f.executor(s))
	obs := call(t, ts, "write-file", `{"path":"out.txt","content":"hello from a skill"}`)
	require.False(t, obs.IsError, obs.Text())
	got, err := os.ReadFile(filepath.Join(f.workspace, "out.txt"))
	require.NoError(t, err)
	assert.Equal(t, "hello from a skill", string(got))
	text := obs.Text()
	assert.Contains(t, text, "wrote out.txt in "+f.workspace+"\n")
	assert.Contains(t, text, "SKILL_DIR="+filepath.Join(f.root, "files/write-file")+"\n")
	assert.Contains(t, text, "PATH="+filepath.Join(f.home, ".local/bin")+":"+os.Getenv("PATH")+"\n")
	assert.True(t, strings.HasSuffix(text, "\n[The skill exited with code 0.]"), text)
	assert.DirExists(t, filepath.Join(f.home, ".local/bin"), "created for installers")
	assert.Nil(t, obs.Structured)
}

func TestNonZeroExitIsAnError(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "fails", Exec: execOf()}, map[string]string{"scripts/run.sh": "echo out; echo err >&2; exit 3\n"})
	obs := call(t, toolset(t, f.executor(s)), "fails", `{}`)
	assert.True(t, obs.IsError)
	assert.Equal(t, "out\nerr\n[The skill exited with code 3.]", obs.Text())
}

func TestScriptThatCannotStart(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "noexec", Exec: &skills.Exec{Entry: "bin/tool"}}, nil)
	require.NoError(t, os.MkdirAll(filepath.Join(s.Dir, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir, "bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o644))
	obs := call(t, toolset(t, f.executor(s)), "noexec", `{}`)
	assert.True(t, obs.IsError)
	assert.Contains(t, obs.Text(), `The script of skill "noexec" could not start: `)
	assert.Contains(t, obs.Text(), "permission denied")
	assert.Contains(t, obs.Text(), "it must be executable")
}

func TestPythonSkill(t *testing.T) {
	f := newFixture(t)
	if _, err := lookPath("python3", f.environ); err != nil {
		t.Skip("no python3")
	}
	s := f.skill(&skills.Skill{Path: "py", Exec: &skills.Exec{Entry: "scripts/run.py", Params: []skills.Param{
		{Name: "n", Kind: skills.Positional, Required: true, Type: "integer"},
	}}}, map[string]string{"scripts/run.py": "import sys\nprint(int(sys.argv[1]) * 2)\n"})
	obs := call(t, toolset(t, f.executor(s)), "py", `{"n":21}`)
	assert.Equal(t, "42\n[The skill exited with code 0.]", obs.Text())
}

// returns_json: stdout parsed as structured content (an object as it is,
// anything else under "result"), stderr apart so it cannot break the JSON.
func TestReturnsJSON(t *testing.T) {
	f := newFixture(t)
	mk := func(path, script string) *skills.Skill {
		return f.skill(&skills.Skill{Path: path, ReturnsJSON: true, Exec: execOf()}, map[string]string{"scripts/run.sh": script})
	}
	ts := toolset(t, f.executor(
		mk("obj", `echo "progress..." >&2; echo '{"ok": true, "count": 12345678901234567890, "files": ["a"]}'`+"\n"),
		mk("arr", `echo '[1, 2]'`+"\n"),
		mk("bad", `echo 'not json'`+"\n"),
		mk("failed", `echo 'oops'; exit 2`+"\n"),
		// Valid JSON that clients cannot take (attacks-2026-11b K12): 9,000
		// deep (under Go's limit of 10,000), and a number no double holds.
		mk("deep", `printf '%.0s[' $(seq 9000); printf '%.0s]' $(seq 9000); echo`+"\n"),
		mk("hugenum", `echo '{"n": -1e999999}'`+"\n"),
	))
	obs := call(t, ts, "obj", `{}`)
	require.False(t, obs.IsError, obs.Text())
	b, err := json.Marshal(obs.Structured)
	require.NoError(t, err)
	assert.JSONEq(t, `{"ok": true, "count": 12345678901234567890, "files": ["a"]}`, string(b), "big numbers kept exactly")
	assert.Contains(t, obs.Text(), "progress...\n")
	assert.Contains(t, obs.Text(), `{"ok": true`)

	obs = call(t, ts, "arr", `{}`)
	b, err = json.Marshal(obs.Structured)
	require.NoError(t, err)
	assert.JSONEq(t, `{"result": [1, 2]}`, string(b))

	obs = call(t, ts, "bad", `{}`)
	assert.False(t, obs.IsError, "the script succeeded")
	assert.Nil(t, obs.Structured)
	assert.Contains(t, obs.Text(), "not json\n[The skill exited with code 0.]\n[The skill returns JSON, but its stdout is not valid JSON: ")

	obs = call(t, ts, "failed", `{}`)
	assert.True(t, obs.IsError)
	assert.Nil(t, obs.Structured)
	assert.Equal(t, "oops\n[The skill exited with code 2.]", obs.Text(), "no JSON note on a failure")

	obs = call(t, ts, "deep", `{}`)
	assert.False(t, obs.IsError, "the script succeeded")
	assert.Nil(t, obs.Structured, "9,000-deep JSON is not passed as structured content")
	assert.Contains(t, obs.Text(), "[Its stdout is valid JSON but is passed as text only: it is nested deeper than 64 levels.]")

	obs = call(t, ts, "hugenum", `{}`)
	assert.False(t, obs.IsError, "the script succeeded")
	assert.Nil(t, obs.Structured, "-1e999999 is not passed as structured content")
	assert.Contains(t, obs.Text(), "[Its stdout is valid JSON but is passed as text only: its number -1e999999 is out of the range of a double.]")
	_, err = json.Marshal(obs)
	require.NoError(t, err, "the observation encodes")
}

// A call past the skill's timeout is killed with its whole process group
// (a background child included) and says so.
func TestCallTimeout(t *testing.T) {
	f := newFixture(t)
	// 2 s: the script must print and start its child before the timeout,
	// which a loaded machine may not do in 0.2 s; only a hang misses 2 s.
	s := f.skill(&skills.Skill{Path: "slow", Timeout: 2 * time.Second, Exec: execOf()}, map[string]string{
		"scripts/run.sh": "echo started\nsleep 1000 &\necho $! > \"$FIXTURE/child\"\nwait\n",
	})
	obs := call(t, toolset(t, f.executor(s)), "slow", `{}`)
	assert.True(t, obs.IsError)
	assert.Equal(t, "started\n[The skill timed out after 2 seconds and was killed.]", obs.Text())
	assertGone(t, filepath.Join(f.state, "child"))
}

// What a script leaves running in its group is killed when it exits.
func TestLeftoversAreKilledAtExit(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "bg", Exec: execOf()}, map[string]string{
		"scripts/run.sh": "sleep 1000 &\necho $! > \"$FIXTURE/child\"\necho done\n",
	})
	obs := call(t, toolset(t, f.executor(s)), "bg", `{}`)
	assert.Equal(t, "done\n[The skill exited with code 0.]", obs.Text())
	assertGone(t, filepath.Join(f.state, "child"))
}

// assertGone checks that the process whose pid is in file ends: the call
// has killed it (its exit may still be under way when the call returns, so
// this waits for it on a pidfd, bounded).
func assertGone(t *testing.T, file string) {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return // gone
	}
	require.NoError(t, err)
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 10_000) // readable once the process has ended
		if errors.Is(err, unix.EINTR) {
			continue
		}
		require.NoError(t, err)
		require.Equal(t, 1, n, "process %d still runs 10 s after the call returned", pid)
		return
	}
}

// A cancelled call kills the script and returns what it printed.
func TestCancelledCall(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "wait", Exec: execOf()}, map[string]string{"scripts/run.sh": "echo started\nsleep 1000\n"})
	ts := toolset(t, f.executor(s))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	ctx = tools.WithStream(ctx, func(p []byte) {
		if bytes.Contains(p, []byte("started")) {
			once.Do(cancel)
		}
	})
	obs, err := ts.Call(ctx, "wait", json.RawMessage(`{}`))
	require.NoError(t, err)
	assert.True(t, obs.IsError)
	assert.Equal(t, "started\n[The call was cancelled and the skill was killed.]", obs.Text())
}

// Output is streamed while the script runs.
func TestOutputIsStreamed(t *testing.T) {
	f := newFixture(t)
	fifo := filepath.Join(f.state, "go")
	require.NoError(t, mkfifo(fifo))
	s := f.skill(&skills.Skill{Path: "stream", Exec: execOf()}, map[string]string{
		"scripts/run.sh": "echo first\nread line < \"$FIXTURE/go\"\necho second\n",
	})
	ts := toolset(t, f.executor(s))
	var mu sync.Mutex
	var streamed []string
	ctx := tools.WithStream(context.Background(), func(p []byte) {
		mu.Lock()
		streamed = append(streamed, string(p))
		mu.Unlock()
		if bytes.Contains(p, []byte("first")) {
			// The script waits for this: "first" came while it ran.
			go func() {
				w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
				if err == nil {
					_, _ = w.WriteString("go\n")
					w.Close()
				}
			}()
		}
	})
	obs := callCtx(ctx, t, ts, "stream", `{}`)
	assert.Equal(t, "first\nsecond\n[The skill exited with code 0.]", obs.Text())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, "first\nsecond\n", strings.Join(streamed, ""))
}

// Output longer than the limit is cut as the terminal cuts it, the full
// output saved under the state directory.
func TestOutputCap(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "loud", Exec: execOf()}, map[string]string{"scripts/run.sh": "seq 1 20000\n"})
	x := f.executorWith(Options{Skills: []*skills.Skill{s}, MaxOutputChars: 2000})
	obs := call(t, toolset(t, x), "loud", `{}`)
	text := obs.Text()
	assert.LessOrEqual(t, len(text), 2000+len("\n[The skill exited with code 0.]"))
	assert.True(t, strings.HasPrefix(text, "1\n2\n3\n"), text)
	assert.True(t, strings.HasSuffix(text, "19999\n20000\n[The skill exited with code 0.]"), text)
	m := regexp.MustCompile(`The complete output has been saved to (\S+) - `).FindStringSubmatch(text)
	require.NotNil(t, m, text)
	assert.Equal(t, filepath.Join(f.state, "skills"), filepath.Dir(m[1]))
	assert.True(t, strings.HasPrefix(filepath.Base(m[1]), outputPrefix))
	saved, err := os.ReadFile(m[1])
	require.NoError(t, err)
	assert.Equal(t, 20000, strings.Count(string(saved), "\n"))
}

func TestLoadSkill(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "docs/pdf", Name: "pdf", Description: "Work with PDFs.", Body: "# PDF\n\nUse scripts/extract.py to extract text.\n"},
		map[string]string{"scripts/extract.py": "SECRET_SCRIPT_CONTENT\n", "references/forms.md": "FORMS_CONTENT\n"})
	exe := f.skill(&skills.Skill{Path: "tools/echo", Exec: execOf()}, map[string]string{"scripts/run.sh": "echo hi\n"})
	ts := toolset(t, f.executor(s, exe))
	obs := call(t, ts, LoadName, `{"name":"pdf"}`)
	require.False(t, obs.IsError, obs.Text())
	want := `<skill_content name="pdf">
# PDF

Use scripts/extract.py to extract text.

Skill folder: ` + s.Dir + ` (read-only). Relative paths in this skill are relative to it.
<skill_resources>
<file>references/forms.md</file>
<file>scripts/extract.py</file>
</skill_resources>
</skill_content>`
	assert.Equal(t, want, obs.Text())
	assert.NotContains(t, obs.Text(), "name: pdf", "no front matter")
	assert.NotContains(t, obs.Text(), "CONTENT", "resources are listed, not read")
	out, ok := obs.Structured.(LoadOutput)
	require.True(t, ok)
	assert.Equal(t, LoadOutput{Name: "pdf", Path: "docs/pdf", Folder: s.Dir, Resources: []string{"references/forms.md", "scripts/extract.py"}}, out)

	// Read at call time: an edited SKILL.md shows.
	require.NoError(t, os.WriteFile(filepath.Join(s.Dir, "SKILL.md"), []byte("---\nname: pdf\ndescription: x\n---\nNew body.\n"), 0o644))
	assert.Contains(t, call(t, ts, LoadName, `{"name":"pdf"}`).Text(), "\nNew body.\n")

	obs = call(t, ts, LoadName, `{"name":"echo"}`)
	assert.Contains(t, obs.Text(), "This skill's script is also the tool `echo`")

	obs = call(t, ts, LoadName, `{"name":"nope"}`)
	assert.True(t, obs.IsError)
	assert.Contains(t, obs.Text(), "`name` must be one of pdf, echo")
}

func TestLoadSkillUnknownNameListsNames(t *testing.T) {
	f := newFixture(t)
	x := f.executor(f.skill(&skills.Skill{Path: "b"}, nil), f.skill(&skills.Skill{Path: "a"}, nil))
	obs, err := x.load(context.Background(), loadAction{Name: "zzz"})
	require.NoError(t, err)
	assert.True(t, obs.IsError)
	assert.Equal(t, `Unknown skill "zzz". The skills are: a, b.`, obs.Text())
}

func TestSkillBody(t *testing.T) {
	for in, want := range map[string]string{
		"---\nname: x\n---\nbody\n":        "body\n",
		"\uFEFF---\r\nname: x\r\n---\r\nb": "b",
		"no front matter":                  "no front matter",
		"---\nname: x\nunterminated":       "---\nname: x\nunterminated",
	} {
		assert.Equal(t, want, skillBody(in), in)
	}
}

// The tools an executor serves are exactly what Definitions lists for the
// same skills, so the daemon's list matches the agent's.
func TestExecutorToolsMatchDefinitions(t *testing.T) {
	f := newFixture(t)
	ss := []*skills.Skill{
		f.skill(&skills.Skill{Path: "fuzz/run", Exec: &skills.Exec{Entry: "scripts/run.sh", Params: fuzzParams}}, nil),
		f.skill(&skills.Skill{Path: "docs/pdf"}, nil),
		f.skill(&skills.Skill{Path: "x/grep", Exec: execOf()}, nil),
	}
	x := f.executor(ss...)
	ts, warnings := x.Tools()
	defs, wantWarnings := Definitions(ss, builtins)
	assert.Equal(t, wantWarnings, warnings)
	require.Len(t, ts, len(defs))
	for i, tool := range ts {
		got, err := json.Marshal(tool.Definition())
		require.NoError(t, err)
		want, err := json.Marshal(defs[i])
		require.NoError(t, err)
		assert.JSONEq(t, string(want), string(got))
	}
}

func TestClosedExecutorRefusesCalls(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "c", Exec: execOf()}, map[string]string{"scripts/run.sh": "echo hi\n"})
	x, err := New(Options{Dir: f.root, Skills: []*skills.Skill{s}, Workspace: f.workspace, StateDir: f.state, Environ: f.environ})
	require.NoError(t, err)
	ts := toolset(t, x)
	require.NoError(t, ts.Close())
	_, err = x.call(context.Background(), s, "c", json.RawMessage(`{}`))
	require.ErrorIs(t, err, tools.ErrClosed)
	require.NoError(t, x.Close(), "idempotent")
}

// $HOME/.local/bin comes first on PATH once, wherever it was.
func TestScriptEnvPath(t *testing.T) {
	home := t.TempDir()
	bin := filepath.Join(home, ".local/bin")
	for path, want := range map[string]string{
		"/usr/bin:/bin":             bin + ":/usr/bin:/bin",
		bin + ":/usr/bin:/bin":      bin + ":/usr/bin:/bin",
		"/usr/bin:" + bin + ":/bin": bin + ":/usr/bin:/bin",
		"":                          bin + ":/usr/local/bin:/usr/bin:/bin",
	} {
		env := scriptEnv([]string{"HOME=" + home, "PATH=" + path, "SKILL_DIR=/stale"}, nil)
		assert.Equal(t, []string{"HOME=" + home, "PATH=" + want}, env, path)
	}
}
