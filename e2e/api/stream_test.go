package api

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"os/exec"
	"testing"
)

// seqOutput is what `seq 1 n` prints.
func seqOutput(n int) []byte {
	var b bytes.Buffer
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.Bytes()
}

// A command printing at full speed never loses output silently through
// `sandboxd run`: several MiB arrive between two of its polls, more than
// the terminal buffers, so the command is paced instead of cut. The run
// either exits 0 with every byte, or (a WebSocket client slower than its
// bounded queue is still disconnected with 1008: pacing the connection is
// open work of issue 15) exits non-zero saying the connection was lost;
// never exit 0 with a short output, as it did (0.4% of the lines missing).
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
		if !bytes.Contains(errOut.Bytes(), []byte("connection to sandboxd lost")) {
			t.Fatalf("run seq: %v, without saying what was lost: %s", err, errOut.String())
		}
		t.Logf("run seq failed loudly (%d of %d bytes): %s", out.Len(), len(seqOutput(n)), errOut.String())
		serve.stop(t) // closes the session the lost client could not
		return
	}
	want := seqOutput(n)
	if sha256.Sum256(out.Bytes()) != sha256.Sum256(want) {
		t.Fatalf("run seq 1 %d: %d bytes, want %d, not byte-exact", n, out.Len(), len(want))
	}
	serve.stop(t)
}
