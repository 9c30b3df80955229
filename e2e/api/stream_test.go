package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"os/exec"
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

// A command printing at full speed reaches `sandboxd run` byte for byte:
// several MiB arrive between two of its polls, more than the terminal
// buffers, so the command is paced instead of cut.
func TestCLIRunFastOutputByteExact(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	state := t.TempDir()
	serve := startServe(t, state)
	const n = 2000000 // 14.9 MB
	cmd := exec.Command(binary, "run", "--server", serve.url, "--state-dir", state, "--", "seq", "1", fmt.Sprint(n))
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		t.Fatalf("run seq: %v: %s", err, errOut.String())
	}
	want := seqOutput(n)
	if sha256.Sum256(out.Bytes()) != sha256.Sum256(want) {
		t.Fatalf("run seq 1 %d: %d bytes, want %d, not byte-exact", n, out.Len(), len(want))
	}
}

// A client that reads its stream slower than the command prints keeps its
// connection and gets every byte: the output is paced to it (the queue of
// the connection is made small so the reader is behind at once).
func TestWSSlowReaderGetsAllOutput(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Docker")
	}
	s := startServerWith(t, func(o *server.Options) { o.WSQueueBytes, o.WSQueueMessages = 64<<10, 4 })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
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
	const n = 300000 // 2.1 MB
	var got bytes.Buffer
	obs, err := sess.Call(ctx, "terminal", map[string]any{"command": fmt.Sprintf("seq 1 %d", n), "timeout": 120}, func(b []byte) {
		got.Write(b)
		time.Sleep(2 * time.Millisecond) // a slow reader
	})
	if err != nil {
		t.Fatalf("call: %v (the slow reader lost its connection?)", err)
	}
	if obs.IsError {
		t.Fatalf("call: %s", obs.Text())
	}
	want := seqOutput(n)
	if !bytes.Equal(bytes.ReplaceAll(got.Bytes(), []byte("\r\n"), []byte("\n")), want) {
		t.Fatalf("slow reader: %d bytes, want %d, not byte-exact", got.Len(), len(want))
	}
}
