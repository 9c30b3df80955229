package agent

import (
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// The entrypoint tests are not parallel: a parallel Run test kills every
// process descended from the test binary when it ends (killDescendants),
// which would be taken for the entrypoint's failure.

func superviseForTest(t *testing.T, argv []string, tweak func(*entrypointOptions)) (*supervisor, *logWatch, string) {
	t.Helper()
	lw := newLogWatch()
	dir := t.TempDir()
	opts := entrypointOptions{
		Entrypoint: proto.Entrypoint{Argv: argv, Dir: dir},
		Env:        entrypointEnv([]string{"PATH=" + os.Getenv("PATH"), "KEEP=kept", "SANDBOXD_IMAGE_ENTRYPOINT=[]"}),
		Log:        filepath.Join(t.TempDir(), EntrypointLogName),
		Backoff:    time.Millisecond,
		Logger:     slog.New(lw),
	}
	if tweak != nil {
		tweak(&opts)
	}
	s := startEntrypoint(opts)
	t.Cleanup(s.Stop)
	return s, lw, opts.Log
}

func readLog(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

func ended(t *testing.T, s *supervisor) {
	t.Helper()
	select {
	case <-s.done:
	case <-ctxT(t).Done():
		t.Fatal("the supervision did not end")
	}
}

// TestEntrypointOutputAndFinish: output and errors into the log, in the
// image's WORKDIR, with the container's environment minus the runtime's
// facts; an exit 0 is the end, not restarted.
func TestEntrypointOutputAndFinish(t *testing.T) {
	s, lw, log := superviseForTest(t, []string{"sh", "-c", `echo hello; echo oops >&2; echo "[$KEEP][${SANDBOXD_IMAGE_ENTRYPOINT:-unset}][$(pwd)]"; read -r x || echo "stdin: eof"`}, nil)
	lw.wait(t, "entrypoint finished")
	ended(t, s)
	text := readLog(t, log)
	assert.Contains(t, text, "hello\noops\n[kept][unset]["+s.opts.Dir+"]\nstdin: eof\n")
	assert.Contains(t, text, `started the entrypoint ["sh" "-c"`)
	assert.Contains(t, text, "exited with code 0")
	assert.Contains(t, text, "finished, not restarted")
}

// TestEntrypointRestartsAtMost: a failing entrypoint is started again
// MaxRestarts times, then left down, each exit in the log.
func TestEntrypointRestartsAtMost(t *testing.T) {
	s, lw, log := superviseForTest(t, []string{"sh", "-c", "echo run; exit 7"}, func(o *entrypointOptions) { o.MaxRestarts = 2 })
	lw.wait(t, "entrypoint failed; not restarted again")
	ended(t, s)
	text := readLog(t, log)
	assert.Equal(t, 3, strings.Count(text, "run\n"), text)
	assert.Contains(t, text, "exited with code 7")
	assert.Contains(t, text, "restart 1 of 2")
	assert.Contains(t, text, "restart 2 of 2")
	assert.Contains(t, text, "not restarted again (2 restarts)")
}

// TestEntrypointStopEndsItsGroup: the session's end stops the entrypoint
// and what it started in its group, and it is not restarted.
func TestEntrypointStopEndsItsGroup(t *testing.T) {
	s, lw, log := superviseForTest(t, []string{"sh", "-c", "sleep 600 & echo child $!; exec sleep 600"}, nil)
	lw.wait(t, "entrypoint started")
	var child int
	require.Eventually(t, func() bool {
		for _, l := range strings.Split(readLog(t, log), "\n") {
			if v, ok := strings.CutPrefix(l, "child "); ok {
				child, _ = strconv.Atoi(v)
				return child > 0
			}
		}
		return false
	}, time.Minute, time.Millisecond)
	s.mu.Lock()
	main := s.pgid
	s.mu.Unlock()
	require.Positive(t, main)
	s.Stop()
	ended(t, s)
	for _, pid := range []int{main, child} {
		assert.Eventually(t, func() bool { return gone(pid) }, time.Minute, time.Millisecond, "pid %d", pid)
	}
	assert.Contains(t, readLog(t, log), "ended with the session")
	s.Stop() // idempotent
}

// TestEntrypointDaemonKeepsItsLog: an entrypoint that leaves a daemon
// behind and exits 0 has finished, but the daemon's output still reaches
// the log (its pipe is not closed under it, which would kill it with
// SIGPIPE) until the session ends.
func TestEntrypointDaemonKeepsItsLog(t *testing.T) {
	s, lw, log := superviseForTest(t, []string{"sh", "-c", "(sleep 0.5; echo late from the daemon) & echo started"},
		func(o *entrypointOptions) { o.KillGrace = time.Millisecond })
	lw.wait(t, "entrypoint finished")
	require.Eventually(t, func() bool { return strings.Contains(readLog(t, log), "late from the daemon\n") },
		20*time.Second, time.Millisecond)
	s.Stop()
	assert.Contains(t, readLog(t, log), "started\n")
}

// gone: pid has exited (a zombie waiting for its reaper counts).
func gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := strings.LastIndexByte(string(b), ')')
	return i > 0 && len(b) > i+2 && b[i+2] == 'Z'
}

// TestEntrypointCannotStart: a program that does not exist is said so and
// not retried; an image without ENTRYPOINT and CMD starts nothing.
func TestEntrypointCannotStart(t *testing.T) {
	s, _, log := superviseForTest(t, []string{"/nonexistent/program"}, nil)
	ended(t, s)
	assert.Contains(t, readLog(t, log), "could not be started")
	assert.Contains(t, readLog(t, log), "not retried")

	s, _, log = superviseForTest(t, nil, nil)
	ended(t, s)
	assert.Contains(t, readLog(t, log), "the image names no ENTRYPOINT or CMD")
}

// TestRotatingLog: the log keeps at most two files of its size, and a
// path the session's code made a FIFO or a link is not written (and does
// not block).
func TestRotatingLog(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "e.log")
	l := newRotatingLog(path, 100)
	for i := range 25 {
		_, err := l.Write([]byte(strings.Repeat(strconv.Itoa(i%10), 10)))
		require.NoError(t, err)
	}
	l.close()
	cur, old := readLog(t, path), readLog(t, path+".1")
	assert.Len(t, old, 100)
	assert.Len(t, cur, 50)
	assert.True(t, strings.HasSuffix(cur, strings.Repeat("4", 10)), cur)

	fifo := filepath.Join(dir, "fifo.log")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	l = newRotatingLog(fifo, 100)
	n, err := l.Write([]byte("dropped"))
	require.NoError(t, err)
	assert.Equal(t, 7, n)
	l.close()

	link := filepath.Join(dir, "link.log")
	target := filepath.Join(dir, "target")
	require.NoError(t, os.Symlink(target, link))
	l = newRotatingLog(link, 100)
	_, _ = l.Write([]byte("dropped"))
	l.close()
	_, err = os.Stat(target)
	assert.True(t, os.IsNotExist(err), "a link is not followed")
}

// TestRunStartsTheEntrypoint: Run starts the image's entrypoint before it
// serves (its start is logged before "agent started") and stops it when
// it ends; a broken value in the environment starts nothing.
func TestRunStartsTheEntrypoint(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	r := startRun(t, func(o *RunOptions) {
		o.Socket = sock
		o.Entrypoint = &proto.Entrypoint{Argv: []string{"sleep", "600"}}
	})
	r.log.wait(t, "agent started")
	log := filepath.Join(r.opts.StateDir, EntrypointLogName)
	assert.Contains(t, readLog(t, log), `started the entrypoint ["sleep" "600"] in /`)
	r.cancel()
	require.ErrorIs(t, r.result(t), ErrStopped)
	assert.Contains(t, readLog(t, log), "ended with the session")

	t.Setenv(proto.EnvEntrypoint, `{"argv": "not a list"}`)
	o := RunOptions{Logger: slog.New(newLogWatch()), StateDir: t.TempDir()}
	assert.Nil(t, o.startEntrypoint())
	t.Setenv(proto.EnvEntrypoint, proto.Entrypoint{Argv: []string{"true"}}.Encode())
	s := o.startEntrypoint()
	require.NotNil(t, s)
	ended(t, s)
	s.Stop()
}
