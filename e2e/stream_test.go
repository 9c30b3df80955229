package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/loglimit"
	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
)

// countingLog is a daemon's log output: it counts the bytes and keeps the
// lines (they are few, or the test fails).
type countingLog struct {
	mu  sync.Mutex
	n   int
	buf bytes.Buffer
}

func (w *countingLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += len(p)
	if w.buf.Len() < 1<<20 {
		w.buf.Write(p)
	}
	return len(p), nil
}

func (w *countingLog) size() (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.buf.String()
}

// streamProbe builds e2e/testdata/streamprobe statically and uploads it
// into the session's workspace, executable.
func streamProbe(t *testing.T, s *sandbox.Session) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "streamprobe")
	cmd := exec.Command("go", "build", "-o", bin, "./testdata/streamprobe")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile(bin)
	require.NoError(t, err)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: "streamprobe", Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(b))}))
	_, err = tw.Write(b)
	require.NoError(t, err)
	require.NoError(t, tw.Close())
	require.NoError(t, s.Upload(ctxT(t), sandbox.WorkspaceDir, &buf))
	return sandbox.WorkspaceDir + "/streamprobe"
}

// The host⇄agent stream is out of reach of the session's code (decision
// 0021): PID 1 and the agent are non-dumpable, so a tool process can
// neither open the stdio pipes they hold through /proc (E12 of the
// 2026-11 attack report) nor ptrace them (E11). What code in a session can
// still do, replace the agent's socket with its own and wait for the
// daemon to reconnect through it, makes it a forger of frames on that one
// connection: a flood of 100,000 forged frames (25 MB) then grows the
// daemon's log by a few KB, in the daemon's log format, and the session
// keeps working.
func TestAbuseAgentStreamUnreachable(t *testing.T) {
	t.Parallel()
	var daemonLog countingLog
	log := slog.New(slog.NewJSONHandler(&daemonLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	t.Cleanup(func() {
		if t.Failed() {
			_, lines := daemonLog.size()
			t.Logf("daemon log:\n%s", abuseTail(lines))
		}
	})
	rt := newRuntime(t, func(o *sdocker.Options) { o.Logger = log })
	ctx := ctxT(t)
	m1, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: testImage, Runtime: e2eRuntime}, Logger: log})
	require.NoError(t, err)
	s1, err := m1.Create(ctx, sandbox.SessionOptions{IdleTimeout: time.Hour})
	require.NoError(t, err)
	probe := streamProbe(t, s1)
	agent := abuseAgentPid(t, s1)

	text, _ := abuseRun(t, s1, `echo "init=$(tr '\0' ' ' </proc/1/cmdline)"; ls /proc/1/fd; `+
		probe+` open /proc/1/fd/0 /proc/1/fd/1 /proc/1/fd/2 /proc/$PPID/fd/0 /proc/$PPID/fd/1 /proc/$PPID/fd/2; `+
		probe+` ptrace 1 $PPID; cat /proc/$PPID/environ >/dev/null; echo "environ_rc=$?"`, 10)
	t.Logf("from a tool process:\n%s", text)
	assert.Contains(t, text, "init="+sandbox.AgentPath+" agent --stdio", "the agent binary is PID 1, not docker-init")
	assert.Contains(t, text, "ls: can't open '/proc/1/fd': Permission denied")
	for _, p := range []string{"1", "$PPID"} {
		for _, fd := range []string{"0", "1", "2"} {
			path := "/proc/" + strings.ReplaceAll(p, "$PPID", strconv.Itoa(agent)) + "/fd/" + fd
			assert.Contains(t, text, "open "+path+": EACCES\n", path)
		}
	}
	assert.Contains(t, text, "ptrace 1: EPERM\n")
	assert.Contains(t, text, "ptrace "+strconv.Itoa(agent)+": EPERM\n")
	assert.Equal(t, 1, abuseInt(t, text, "environ_rc"))

	// The socket is the session user's (documented): code in the session
	// puts itself in front of it and waits for the next reconnect, here a
	// daemon restart.
	text, _ = abuseRun(t, s1, `(setsid `+probe+` mitm `+sandbox.AgentSocket+` 100000 >/tmp/mitm.out 2>&1 &); `+
		`for i in $(seq 50); do [ -s /tmp/mitm.out ] && break; sleep 0.1; done; cat /tmp/mitm.out`, 10)
	require.Contains(t, text, "listening")
	require.NoError(t, m1.Shutdown(ctx, true)) // as if the daemon stopped

	before, _ := daemonLog.size()
	start := time.Now()
	m2 := newManager(t, rt, sandbox.ManagerOptions{Logger: log})
	s, err := m2.Get(s1.ID())
	require.NoError(t, err, "adopted through the forger")
	var done string
	for end := time.Now().Add(5 * time.Minute); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		done = sh(t, s, "cat "+sandbox.AgentSocket+".done 2>/dev/null; true")
		if strings.Contains(done, "frames=") || strings.Contains(done, "error") {
			break
		}
	}
	require.Contains(t, done, "frames=100000", "the flood went through")
	flood := time.Since(start)
	// The agent-proxy that carries the flood: non-dumpable too.
	text, _ = abuseRun(t, s, `for p in /proc/[0-9]*; do case "$(tr '\0' ' ' <$p/cmdline 2>/dev/null)" in *agent-proxy*) echo "proxy=${p#/proc/}";; esac; done`, 10)
	proxy := strconv.Itoa(abuseInt(t, text, "proxy"))
	text, _ = abuseRun(t, s, probe+` open /proc/`+proxy+`/fd/1; `+probe+` ptrace `+proxy, 10)
	assert.Contains(t, text, "open /proc/"+proxy+"/fd/1: EACCES\n")
	assert.Contains(t, text, "ptrace "+proxy+": EPERM\n")

	assert.Contains(t, sh(t, s, "echo still-$((6*7))"), "still-42", "the session keeps working")
	after, lines := daemonLog.size()
	grown := after - before
	t.Logf("%s in %v; the daemon's log grew by %d bytes", strings.TrimSpace(done), flood.Round(time.Millisecond), grown)
	// The restart's own lines (~1 KB), the burst of 10 truncated lines
	// (~5 KB), then one line (~500 bytes) per loglimit.DefaultEvery (10 s)
	// of flood. (The suppression counts and the closing summary are the
	// unit tests' to check: internal/loglimit.)
	periods := int(flood / loglimit.DefaultEvery)
	assert.Less(t, grown, 6<<10+600*(periods+2), "the daemon's log grows by a few KB:\n%s", lines)
	if periods >= 2 {
		assert.Contains(t, lines, `"suppressed_before"`, "a line let through counts what was dropped")
	}
	for _, l := range strings.Split(strings.TrimSpace(lines), "\n") {
		assert.True(t, json.Valid([]byte(l)), "every line in the configured format: %s", l)
		assert.Less(t, len(l), 1024, "every line truncated")
	}
	require.NoError(t, s.Close(context.Background()))
}
