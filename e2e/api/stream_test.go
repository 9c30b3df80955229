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
