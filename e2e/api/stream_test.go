package api

import (
	"bytes"
	"context"
	"crypto/md5"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server"
)

// seqOutput is what `seq 1 n` prints.
func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.Bytes()
}

// `sandboxd run -- seq 1 5000000` through a real server prints exactly
// what seq prints (md5 equal; 38.9 MB), or exits 1 saying exactly how
// many bytes were lost (issue 15: "byte-exact, or a non-zero exit that
// says what was lost"): the command's output streams in one call, output
// the connection could not take at once comes back from the session's
// ring, and what the ring no longer held is reported. On an idle machine
// it is byte-exact; in CI, with the other suites beside it, a reader that
// fell more than the output budget and the ring behind lost ~0.26% (the
// missed target is in decision 0036: pacing the command is not built).
func TestCLIRunFastOutputByteExact(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	state := t.TempDir()
	serve := startServe(t, state)
	const n = 5000000
	cmd := exec.Command(binary, "run", "--server", serve.url, "--state-dir", state, "--", "seq", "1", fmt.Sprint(n))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	err := cmd.Run()
	took := time.Since(start).Round(time.Millisecond)
	want := seqOutput(n)
	if err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("run seq 1 %d: %v after %d bytes: %s", n, err, out.Len(), errOut.String())
		}
		m := regexp.MustCompile(`(\d+) bytes of the output of session \S+ were lost \(chunks [0-9, -]+\)`).FindStringSubmatch(errOut.String())
		if m == nil {
			t.Fatalf("run seq 1 %d exited 1 without saying what was lost: %s", n, errOut.String())
		}
		lost, _ := strconv.Atoi(m[1])
		if out.Len()+lost != len(want) {
			t.Fatalf("run seq 1 %d: %d bytes printed and %d reported lost, want %d in all", n, out.Len(), lost, len(want))
		}
		t.Logf("NOT byte-exact (target missed): run seq 1 %d: %d bytes in %v, %d bytes (%.2f%%) lost and reported, exit 1",
			n, out.Len(), took, lost, 100*float64(lost)/float64(len(want)))
		serve.stop(t)
		return
	}
	t.Logf("run seq 1 %d: %d bytes in %v, byte-exact", n, out.Len(), took)
	if md5.Sum(out.Bytes()) != md5.Sum(want) {
		t.Fatalf("run seq 1 %d: %d bytes, want %d, not byte-exact", n, out.Len(), len(want))
	}
	serve.stop(t)
}

// A WebSocket client that reads its stream far more slowly than the
// command prints keeps its connection (it was disconnected with 1008):
// the server withholds what it cannot take (stream.gap), the client reads
// it back from the ring, and the call returns every byte, or says exactly
// how many bytes were lost (an *OutputLost with the observation); what
// arrived plus what was reported lost is all of it.
func TestWSSlowReaderKeepsConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	s := startServerWith(t, func(o *server.Options) { o.WSOutputBytes = 64 << 10 })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, s.ws, s.token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	sess, err := c.CreateSession(ctx, client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sess.Close(context.Background()) }()
	var lostTold atomic.Int64
	sess.OnLost = func(l *client.OutputLost) { lostTold.Add(l.Bytes) }
	const n = 400000 // 2.7 MB, more than the 1 MiB ring
	var got bytes.Buffer
	obs, err := sess.Call(ctx, "terminal", map[string]any{"command": fmt.Sprintf("seq 1 %d", n), "timeout": 240}, func(b []byte) {
		got.Write(b)
		time.Sleep(5 * time.Millisecond) // a slow reader: under 1 MB/s in chunks of a few KiB
	})
	want := seqOutput(n)
	var lost *client.OutputLost
	switch {
	case errors.As(err, &lost):
		t.Logf("slow reader: %d bytes arrived, %d reported lost: %v", got.Len(), lost.Bytes, lost)
		if obs == nil || int64(got.Len())+lost.Bytes != int64(len(want)) || lostTold.Load() != lost.Bytes {
			t.Fatalf("slow reader: %d bytes arrived + %d lost (OnLost told %d) != %d printed", got.Len(), lost.Bytes, lostTold.Load(), len(want))
		}
	case err != nil:
		t.Fatalf("slow reader's call: %v (did it lose its connection?)", err)
	case !bytes.Equal(got.Bytes(), want):
		t.Fatalf("slow reader: %d bytes, want %d, and no loss reported", got.Len(), len(want))
	}
	if obs.IsError {
		t.Fatalf("call: %s", obs.Text())
	}
	if g := metric(t, s, "sandboxd_ws_stream_gaps_total"); g < 1 {
		t.Fatalf("no stream.gap was sent (%v): the reader was not slow enough to test pacing", g)
	}
	if d := metric(t, s, "sandboxd_ws_slow_client_disconnects_total"); d != 0 {
		t.Fatalf("%v slow-client disconnects", d)
	}
	// Still the same connection, and it works.
	if _, err := sess.Call(ctx, "terminal", map[string]any{"command": "echo ok"}, nil); err != nil {
		t.Fatalf("next call: %v", err)
	}
	select {
	case <-c.Done():
		t.Fatalf("client stopped: %v", c.Err())
	default:
	}
	if strings.Contains(got.String(), "\r") {
		t.Fatal("carriage returns in the stream")
	}
}

// metric reads an unlabelled counter or gauge of s's /metrics.
func metric(t *testing.T, s *apiServer, name string) float64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := metricValue(ctx, s.base, s.token, name)
	if err != nil {
		t.Fatal(err)
	}
	var f float64
	if _, err := fmt.Sscan(v, &f); err != nil {
		t.Fatalf("%s = %q: %v", name, v, err)
	}
	return f
}
