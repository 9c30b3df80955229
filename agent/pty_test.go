//go:build linux

package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
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

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/internal/pty"
)

// ptyRec records a PTY's output and end. With autoAck it acknowledges
// output as it arrives, as a consumer that keeps up does.
type ptyRec struct {
	autoAck bool

	mu      sync.Mutex
	out     bytes.Buffer
	p       *agentclient.PTY
	owed    int // output received before the PTY was known, to acknowledge
	changed chan struct{}
	exit    chan proto.PTYExit
	exitAt  int // len(out) when Exit came
}

func newRec(autoAck bool) *ptyRec {
	return &ptyRec{autoAck: autoAck, changed: make(chan struct{}, 1), exit: make(chan proto.PTYExit, 1)}
}

func (r *ptyRec) handler() agentclient.PTYHandler {
	return agentclient.PTYHandler{
		Output: func(b []byte) {
			r.mu.Lock()
			r.out.Write(b)
			p := r.p
			if r.autoAck && p == nil {
				r.owed += len(b)
			}
			r.mu.Unlock()
			if r.autoAck && p != nil {
				p.Ack(len(b))
			}
			r.signal()
		},
		Exit: func(st proto.PTYExit) {
			r.mu.Lock()
			r.exitAt = r.out.Len()
			r.mu.Unlock()
			r.exit <- st
			r.signal()
		},
	}
}

func (r *ptyRec) signal() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

func (r *ptyRec) set(p *agentclient.PTY) {
	r.mu.Lock()
	r.p = p
	owed := r.owed
	r.owed = 0
	r.mu.Unlock()
	p.Ack(owed)
}

func (r *ptyRec) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

func (r *ptyRec) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.Len()
}

// waitFor waits until cond holds of the output; ctx bounds it (a hang is
// a failure, not a slow pass).
func (r *ptyRec) waitFor(ctx context.Context, t *testing.T, what string, cond func(out string) bool) {
	t.Helper()
	for !cond(r.String()) {
		select {
		case <-r.changed:
		case <-ctx.Done():
			t.Fatalf("%s: not seen; the output is:\n%q", what, r.String())
		}
	}
}

func (r *ptyRec) waitText(ctx context.Context, t *testing.T, s string) {
	t.Helper()
	r.waitFor(ctx, t, fmt.Sprintf("%q", s), func(out string) bool { return strings.Contains(out, s) })
}

func (r *ptyRec) waitExit(ctx context.Context, t *testing.T) proto.PTYExit {
	t.Helper()
	select {
	case st := <-r.exit:
		return st
	case <-ctx.Done():
		t.Fatalf("the pty did not end; its output:\n%q", r.String())
		return proto.PTYExit{}
	}
}

func openRec(ctx context.Context, t *testing.T, c *agentclient.Client, o proto.PTYOptions) (*agentclient.PTY, *ptyRec) {
	t.Helper()
	r := newRec(true)
	p, err := c.OpenPTY(ctx, o, r.handler())
	require.NoError(t, err)
	r.set(p)
	return p, r
}

// A shell on a PTY of its own: it has the size it was opened with (stty
// size), TERM=xterm-256color, a resize shows in stty size, input runs, and
// its exit status comes after its last output.
func TestPTYShell(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	term, r := openRec(ctx, t, p.cli, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sh"}})
	assert.Positive(t, term.Opened().PID)
	assert.Equal(t, []string{"sh"}, term.Opened().Command)

	require.NoError(t, term.Input(ctx, []byte("stty size; echo \"term=$TERM\"\n")))
	r.waitText(ctx, t, "24 80\r\n")
	r.waitText(ctx, t, "term=xterm-256color\r\n")

	require.NoError(t, term.Resize(ctx, 40, 132))
	require.NoError(t, term.Input(ctx, []byte("stty size\n")))
	r.waitText(ctx, t, "40 132\r\n")

	require.NoError(t, term.Input(ctx, []byte("echo bye; exit 3\n")))
	st := r.waitExit(ctx, t)
	assert.Equal(t, proto.PTYExit{ExitCode: 3}, st)
	assert.Contains(t, r.String()[:r.exitAt], "bye\r\n", "output after the exit notice")
	<-term.Done()

	err := term.Input(ctx, []byte("x"))
	require.ErrorIs(t, err, proto.ErrUnknownPTY)
	st, err = term.Close(ctx)
	require.NoError(t, err, "closing an ended pty tells how it ended")
	assert.Equal(t, 3, st.ExitCode)
}

// Without a command the PTY runs the user's login shell, as a login shell.
func TestPTYLoginShell(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	term, r := openRec(ctx, t, p.cli, proto.PTYOptions{Rows: 24, Cols: 80})
	want := loginShell(os.Getuid())
	if want == "" {
		want = term.Opened().Command[0] // no passwd entry: bash or sh
	}
	assert.Equal(t, []string{want, "-l"}, term.Opened().Command)
	require.NoError(t, term.Input(ctx, []byte("echo \"zero=$0\"; exit\n")))
	r.waitText(ctx, t, "zero=-")
	assert.Equal(t, 0, r.waitExit(ctx, t).ExitCode)
}

// Input arrives in the order it was sent, however fast.
func TestPTYInputOrder(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	term, r := openRec(ctx, t, p.cli, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sh", "-c", "stty -echo; echo ready; exec cat"}})
	r.waitText(ctx, t, "ready\r\n") // before it, the terminal would echo the input
	var want strings.Builder
	want.WriteString("ready\r\n")
	for i := range 200 {
		line := strconv.Itoa(i) + "\n"
		want.WriteString(strconv.Itoa(i) + "\r\n")
		require.NoError(t, term.Input(ctx, []byte(line)))
	}
	r.waitFor(ctx, t, "all 200 lines", func(out string) bool { return strings.HasSuffix(out, "199\r\n") })
	assert.Equal(t, want.String(), r.String())
	_, err := term.Close(ctx)
	require.NoError(t, err)
}

// Close ends the PTY's whole session: the shell and a job that ignores
// SIGHUP in its own process group (SIGKILL after the grace period).
func TestPTYCloseEndsTheSession(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	term, r := openRec(ctx, t, p.cli, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"bash", "--norc", "-i"}})
	require.NoError(t, term.Input(ctx, []byte("(trap '' HUP; exec sleep 1000) & echo \"job\"\"=$!\"\n")))
	jobRE := regexp.MustCompile(`job=(\d+)\r\n`)
	r.waitFor(ctx, t, "the job's pid", jobRE.MatchString)
	job, err := strconv.Atoi(jobRE.FindStringSubmatch(r.String())[1])
	require.NoError(t, err)
	state, sid, ok := pty.ProcStat(job)
	require.True(t, ok)
	require.NotEqual(t, byte('Z'), state)
	require.Equal(t, term.Opened().PID, sid, "the job is in the pty's session")

	st, err := term.Close(ctx)
	require.NoError(t, err)
	assert.Equal(t, 128+1, st.ExitCode, "the shell ends on SIGHUP")
	assert.Equal(t, "SIGHUP", st.Signal)
	if state, _, ok := pty.ProcStat(job); ok {
		assert.Equal(t, byte('Z'), state, "the job that ignores SIGHUP still runs")
	}
	assert.Equal(t, st, r.waitExit(ctx, t))
}

// A PTY belongs to its connection: when the connection ends, its program
// is ended and its slot freed.
func TestPTYEndsWithItsConnection(t *testing.T) {
	p := newPair(t, func(o *ServerOptions) { o.MaxPTYs = 1 })
	ctx := ctxT(t)
	other := p.connect(t)
	term, _ := openRec(ctx, t, other, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sleep", "1000"}})
	pid := term.Opened().PID

	_, err := p.cli.OpenPTY(ctx, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"true"}}, newRec(true).handler())
	require.ErrorIs(t, err, proto.ErrBusy, "the bound of one pty")

	require.NoError(t, other.Close())
	<-term.Done()
	exit, err := term.Close(ctx) // ended: how, at once
	require.NoError(t, err)
	assert.Equal(t, -1, exit.ExitCode)
	assert.Contains(t, exit.Error, "connection ended")
	require.NoError(t, <-p.serveErr) // Serve returns once its ptys have ended
	if state, _, ok := pty.ProcStat(pid); ok {
		assert.Equal(t, byte('Z'), state, "the program outlived its connection")
	}
	again, _ := openRec(ctx, t, p.cli, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"true"}})
	<-again.Done()
}

// The bound on PTYs: past MaxPTYs an open is refused (busy) until one ends.
func TestPTYBound(t *testing.T) {
	p := newPair(t, func(o *ServerOptions) { o.MaxPTYs = 2 })
	ctx := ctxT(t)
	a, _ := openRec(ctx, t, p.cli, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sleep", "1000"}})
	b, _ := openRec(ctx, t, p.cli, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sleep", "1000"}})
	_, err := p.cli.OpenPTY(ctx, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sleep", "1000"}}, newRec(true).handler())
	require.ErrorIs(t, err, proto.ErrBusy)
	assert.Contains(t, err.Error(), "limit 2")
	_, err = a.Close(ctx)
	require.NoError(t, err)
	c, _ := openRec(ctx, t, p.cli, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sleep", "1000"}})
	for _, x := range []*agentclient.PTY{b, c} {
		_, err := x.Close(ctx)
		require.NoError(t, err)
	}
}

// Options are checked before anything runs, with messages for the client.
func TestPTYInvalidOptions(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	for _, c := range []struct {
		o    proto.PTYOptions
		want string
	}{
		{proto.PTYOptions{Rows: 0, Cols: 80}, "rows and cols must be 1 to 1000, got 0x80"},
		{proto.PTYOptions{Rows: 24, Cols: 1001}, "got 24x1001"},
		{proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{""}}, "command[0] (the program) is empty"},
		{proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"echo", "a\x00b"}}, "command[1] holds a NUL byte"},
		{proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sandboxd-no-such-program"}}, `command "sandboxd-no-such-program"`},
		{proto.PTYOptions{Watch: "echo", Command: []string{"sh"}}, "not both"},
		{proto.PTYOptions{Watch: "nope"}, `unknown tool "nope"`},
	} {
		_, err := p.cli.OpenPTY(ctx, c.o, newRec(true).handler())
		require.ErrorIs(t, err, proto.ErrInvalidParams, "%+v", c.o)
		assert.Contains(t, err.Error(), c.want)
	}
	// The agent checks too, whatever a client sends.
	_, err := p.request(t).roundTrip(ctx, proto.MethodPTYOpen, proto.PTYOpenParams{PTY: 99, PTYOptions: proto.PTYOptions{Rows: -1, Cols: 5}})
	require.ErrorIs(t, err, proto.ErrInvalidParams)
	_, err = p.request(t).roundTrip(ctx, proto.MethodPTYResize, proto.PTYResizeParams{PTY: 12345, Rows: 5, Cols: 5})
	require.ErrorIs(t, err, proto.ErrUnknownPTY)
}

// Flow control: without acknowledgements the agent sends one window of
// output and stops reading, so the program blocks in its writes; the
// acknowledgements let the rest through, all of it, in order.
func TestPTYOutputWindow(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	const total = 4 * proto.PTYWindow
	r := newRec(false)
	term, err := p.cli.OpenPTY(ctx, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sh", "-c",
		fmt.Sprintf("stty raw -echo; head -c %d /dev/zero | tr '\\0' x; echo; echo done", total)}}, r.handler())
	require.NoError(t, err)
	r.waitFor(ctx, t, "one window", func(out string) bool { return len(out) >= proto.PTYWindow })
	assert.Less(t, r.Len(), proto.PTYWindow+ptyChunk, "more than a window without acknowledgements")
	select {
	case st := <-r.exit:
		t.Fatalf("the program ended (%+v) though its output was not read", st)
	default:
	}
	acked := 0
	r.waitFor(ctx, t, "the rest, acknowledged", func(out string) bool {
		term.Ack(len(out) - acked)
		acked = len(out)
		return strings.HasSuffix(out, "done\n") || strings.HasSuffix(out, "done\r\n")
	})
	out := r.String()
	assert.Equal(t, strings.Repeat("x", total), out[:total])
	assert.Equal(t, 0, r.waitExit(ctx, t).ExitCode)
}

// A watching PTY follows a tool's output read-only; it cannot be written
// to or resized, and ends with code 0 on close.
func TestPTYWatch(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	term, r := openRec(ctx, t, p.cli, proto.PTYOptions{Watch: "echo"})
	assert.Zero(t, term.Opened().PID)
	p.kit.emit([]byte("$ echo hi\r\nhi\r\n"))
	r.waitText(ctx, t, "$ echo hi\r\nhi\r\n")
	require.ErrorIs(t, term.Input(ctx, []byte("x")), proto.ErrInvalidParams)
	require.ErrorIs(t, term.Resize(ctx, 10, 10), proto.ErrInvalidParams)
	st, err := term.Close(ctx)
	require.NoError(t, err)
	assert.Equal(t, proto.PTYExit{}, st)
	p.kit.mu.Lock()
	assert.Empty(t, p.kit.watchers, "the watch was not stopped")
	p.kit.mu.Unlock()
}

// A watcher that falls behind loses the oldest output, and is told how
// much; the tool never waits for it.
func TestWatchBufferDrops(t *testing.T) {
	w := newWatchBuffer()
	w.write(bytes.Repeat([]byte("a"), watchBound))
	w.write([]byte("tail"))
	buf := make([]byte, 2*watchBound)
	n, err := w.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, "\r\n[sandboxd: 4 bytes of the terminal's output were dropped: this view fell behind]\r\n", string(buf[:n]))
	n, err = w.Read(buf)
	require.NoError(t, err)
	assert.Equal(t, watchBound, n)
	assert.True(t, strings.HasSuffix(string(buf[:n]), "atail"))
	w.close()
	_, err = w.Read(buf)
	assert.ErrorIs(t, err, io.EOF)
}

// Close ends processes that fork and exit at once (a fork bomb churning at
// its pids limit), which a scan of /proc can miss round after round: 8
// chains that ignore SIGHUP and SIGTERM hold a FIFO open, and EOF on the
// test's end proves every link died (pty.Sweeper freezes process groups,
// then kills them).
func TestPTYCloseEndsChurningProcesses(t *testing.T) {
	p := newPair(t)
	ctx := ctxT(t)
	fifo := filepath.Join(t.TempDir(), "alive")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	fr, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	require.NoError(t, err)
	defer fr.Close()
	term, r := openRec(ctx, t, p.cli, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"bash", "--norc", "-i"}})
	sid := term.Opened().PID
	t.Cleanup(func() { // whatever the outcome, leave no chain running on the host
		w := pty.NewSweeper(sid, nil)
		for range 1000 {
			if n, _ := w.Signal(unix.SIGKILL); n == 0 {
				return
			}
		}
	})
	require.NoError(t, term.Input(ctx, []byte(`exec 3>`+fifo+`; trap '' TERM HUP; w(){ sleep 0.01; w & }; for i in 1 2 3 4 5 6 7 8; do w & done; exec 3>&-; echo "sta""rted"`+"\n")))
	r.waitFor(ctx, t, "the chains", func(out string) bool { return strings.Contains(out, "started") })
	_, err = term.Close(ctx)
	require.NoError(t, err)
	require.NoError(t, fr.SetReadDeadline(time.Now().Add(20*time.Second)))
	n, err := fr.Read(make([]byte, 1))
	assert.Equal(t, 0, n)
	require.ErrorIs(t, err, io.EOF, "a process of the pty's session outlived Close (it holds the FIFO open)")
	assert.Empty(t, pty.ScanSession(sid, nil), "nothing of the session is left, stopped or running")
}
