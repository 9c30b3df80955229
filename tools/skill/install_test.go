package skill

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
)

// installing is the note a call waiting for an installer streams.
var installing = []byte("[Installing the dependencies of skill ")

// Ten concurrent first calls run the installer exactly once: the installer
// counts its runs and blocks until all ten calls wait for it.
func TestTenConcurrentFirstCallsInstallOnce(t *testing.T) {
	f := newFixture(t)
	fifo := filepath.Join(f.state, "release")
	require.NoError(t, mkfifo(fifo))
	counter := filepath.Join(f.state, "count")
	s := f.skill(&skills.Skill{Path: "deps/user", Installer: "deps/install.sh", Exec: execOf()}, map[string]string{
		"deps/install.sh": "echo run >> \"$FIXTURE/count\"\nread line < \"$FIXTURE/release\"\necho installed > \"$HOME/.local/bin/marker-from-installer\"\n",
		"scripts/run.sh":  "cat \"$HOME/.local/bin/marker-from-installer\"\n",
	})
	ts := toolset(t, f.executor(s))

	const n = 10
	var waiting, done sync.WaitGroup
	waiting.Add(n)
	results := make([]*tools.Observation, n)
	for i := range n {
		done.Go(func() {
			var once sync.Once
			ctx := tools.WithStream(context.Background(), func(p []byte) {
				if bytes.HasPrefix(p, installing) {
					once.Do(waiting.Done)
				}
			})
			obs, err := ts.Call(ctx, "user", json.RawMessage(`{}`))
			assert.NoError(t, err)
			results[i] = obs
		})
	}
	waiting.Wait() // all ten wait for the installer
	w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = w.WriteString("go\n")
	require.NoError(t, err)
	require.NoError(t, w.Close())
	done.Wait()

	assert.Equal(t, 1, countLines(t, counter), "the installer ran once")
	for _, obs := range results {
		require.NotNil(t, obs)
		assert.False(t, obs.IsError, obs.Text())
		assert.Equal(t, "installed\n[The skill exited with code 0.]", obs.Text())
	}
	stem := filepath.Join(f.state, "skills", stateName("deps/user"))
	assert.FileExists(t, stem+".done")
	assert.FileExists(t, stem+".log")

	// Later calls, and a new executor of the same session, do not run it
	// again.
	call(t, ts, "user", `{}`)
	ts2 := toolset(t, f.executor(s))
	obs := call(t, ts2, "user", `{}`)
	assert.False(t, obs.IsError, obs.Text())
	assert.Equal(t, 1, countLines(t, counter), "the marker stands")
}

// A failing installer and a hanging one make their skills' calls fail with
// a clear error (skill, installer, exit status, log tail), for the rest of
// the session, while another skill works.
func TestFailingAndHangingInstallers(t *testing.T) {
	f := newFixture(t)
	bad := f.skill(&skills.Skill{Path: "broken/bad", Installer: "deps/install.sh", Exec: execOf()}, map[string]string{
		"deps/install.sh": "echo bad >> \"$FIXTURE/count-bad\"\nfor i in $(seq 1 30); do echo \"step $i\"; done\necho 'E: Unable to locate package libfoo-dev' >&2\nexit 100\n",
		"scripts/run.sh":  "echo should-not-run\n",
	})
	// The hanging installer's first line must be logged before its
	// timeout, which a loaded machine may not do in 0.2 s: 2 s.
	hang := f.skill(&skills.Skill{Path: "broken/hang", Installer: "deps/fuzz/install.sh", InstallTimeout: 2 * time.Second, Exec: execOf()}, map[string]string{
		"deps/fuzz/install.sh": "echo 'fetching the toolchain'\nsleep 1000\n",
		"scripts/run.sh":       "echo should-not-run\n",
	})
	good := f.skill(&skills.Skill{Path: "fine/good", Exec: execOf()}, map[string]string{"scripts/run.sh": "echo good\n"})
	ts := toolset(t, f.executor(bad, hang, good))

	obs := call(t, ts, "bad", `{}`)
	assert.True(t, obs.IsError)
	text := obs.Text()
	stem := filepath.Join(f.state, "skills", stateName("broken/bad"))
	assert.True(t, strings.HasPrefix(text, `Skill "broken/bad" cannot be used in this session: its dependency installer deps/install.sh exited with code 100.`), text)
	assert.Contains(t, text, "The installer's log is "+stem+".log; its last lines:\n")
	assert.True(t, strings.HasSuffix(text, "step 30\nE: Unable to locate package libfoo-dev"), text)
	assert.Contains(t, text, "step 12\n", "20 lines of tail")
	assert.NotContains(t, text, "step 11\n")
	assert.NotContains(t, text, "should-not-run")

	obs = call(t, ts, "hang", `{}`)
	assert.True(t, obs.IsError)
	assert.True(t, strings.HasPrefix(obs.Text(), `Skill "broken/hang" cannot be used in this session: its dependency installer deps/fuzz/install.sh timed out after 2s and was killed.`), obs.Text())
	assert.True(t, strings.HasSuffix(obs.Text(), "its last lines:\nfetching the toolchain"), obs.Text())

	obs = call(t, ts, "good", `{}`)
	assert.False(t, obs.IsError)
	assert.Equal(t, "good\n[The skill exited with code 0.]", obs.Text())

	// Sticky: the next call fails the same way without running it again,
	// in this executor and in a new one of the same session.
	again := call(t, ts, "bad", `{}`)
	assert.Equal(t, text, again.Text())
	again = call(t, toolset(t, f.executor(bad, good)), "bad", `{}`)
	assert.Equal(t, text, again.Text())
	assert.Equal(t, 1, countLines(t, filepath.Join(f.state, "count-bad")))

	// load_skill says it too, and still gives the instructions.
	obs = call(t, ts, LoadName, `{"name":"bad"}`)
	assert.True(t, obs.IsError)
	assert.True(t, strings.HasPrefix(obs.Text(), `Skill "broken/bad" cannot be used`), obs.Text())
	assert.Contains(t, obs.Text(), "The skill's instructions follow, but its scripts may not work without their dependencies.\n\n<skill_content name=\"bad\">")
}

// The log of a chatty installer is capped at 1 MiB, head and tail kept.
func TestInstallerLogIsCapped(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "chatty", Installer: "deps/install.sh"}, map[string]string{
		"deps/install.sh": "seq 1 300000\n",
	})
	x := f.executor(s)
	require.NoError(t, x.InstallAll(context.Background()))
	log, err := os.ReadFile(filepath.Join(f.state, "skills", stateName("chatty")+".log"))
	require.NoError(t, err)
	assert.Len(t, log, maxLogBytes)
	assert.True(t, bytes.HasPrefix(log, []byte("1\n2\n3\n")))
	assert.True(t, bytes.HasSuffix(log, []byte("299999\n300000\n")))
	assert.Contains(t, string(log), "bytes of output cut here")
}

// InstallAll runs every pending installer by priority, then path; a
// failure is named in the joined error and does not stop the others.
func TestInstallAllOrderAndErrors(t *testing.T) {
	f := newFixture(t)
	mk := func(path string, prio int, script string) *skills.Skill {
		return f.skill(&skills.Skill{Path: path, Priority: prio, Installer: "deps/install.sh"}, map[string]string{"deps/install.sh": script})
	}
	order := "echo \"$SKILL_DIR\" >> \"$FIXTURE/order\"\n"
	ss := []*skills.Skill{
		mk("z-first", 1, order),
		mk("b-second", 2, order),
		mk("a-third", 3, order+"exit 7\n"),
		mk("c-fourth", 3, order),
		f.skill(&skills.Skill{Path: "no-installer"}, nil),
	}
	x := f.executor(ss...)
	err := x.InstallAll(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `Skill "a-third" cannot be used in this session: its dependency installer deps/install.sh exited with code 7.`)
	assert.NotContains(t, err.Error(), "c-fourth")
	b, rerr := os.ReadFile(filepath.Join(f.state, "order"))
	require.NoError(t, rerr)
	var got []string
	for _, l := range strings.Fields(string(b)) {
		got = append(got, filepath.Base(l))
	}
	assert.Equal(t, []string{"z-first", "b-second", "a-third", "c-fourth"}, got)

	// Again: nothing runs, the failure stands.
	err = x.InstallAll(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"a-third"`)
	assert.Equal(t, 4, countLines(t, filepath.Join(f.state, "order")))

	require.NoError(t, f.executor(f.skill(&skills.Skill{Path: "plain"}, nil)).InstallAll(context.Background()), "nothing to install")
}

// A caller that gives up stops waiting; the installer goes on for the
// others, and Close stops it.
func TestWaitingCallerGivesUp(t *testing.T) {
	f := newFixture(t)
	s := f.skill(&skills.Skill{Path: "slow", Installer: "deps/install.sh", Exec: execOf()}, map[string]string{
		"deps/install.sh": "sleep 1000\n",
		"scripts/run.sh":  "echo hi\n",
	})
	x := f.executor(s)
	ts := toolset(t, x)
	ctx, cancel := context.WithCancel(context.Background())
	ctx = tools.WithStream(ctx, func(p []byte) {
		if bytes.HasPrefix(p, installing) {
			cancel()
		}
	})
	_, err := ts.Call(ctx, "slow", json.RawMessage(`{}`))
	require.ErrorIs(t, err, context.Canceled)
	x.mu.Lock()
	in := x.installs["slow"]
	x.mu.Unlock()
	require.NotNil(t, in)
	select {
	case <-in.done:
		t.Fatal("the installer ended with its first caller")
	default:
	}
	require.NoError(t, x.Close())
	<-in.done
	assert.Contains(t, in.err.Error(), "was stopped: the session is ending")
	assert.NoFileExists(t, filepath.Join(f.state, "skills", stateName("slow")+".failed"), "a stop at Close is not a failure of the session")
}

func TestStateName(t *testing.T) {
	a, b := stateName("a/b"), stateName("a__b")
	assert.True(t, strings.HasPrefix(a, "a__b-"), a)
	assert.NotEqual(t, a, b)
	assert.Regexp(t, `^[A-Za-z0-9._-]+$`, stateName("weird path/ü/../x"))
	assert.LessOrEqual(t, len(stateName(strings.Repeat("x/", 200))), 110)
}
