//go:build linux

package agent

import (
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// BenchmarkPTYOutput: seq's 1.3 MB through a PTY and the agent protocol
// (net.Pipe), acknowledged as it arrives.
func BenchmarkPTYOutput(b *testing.B) {
	for b.Loop() {
		p := newPair(b)
		ctx := b.Context()
		r := newRec(true)
		term, err := p.cli.OpenPTY(ctx, proto.PTYOptions{Rows: 24, Cols: 80, Command: []string{"sh", "-c", "seq 1 200000; echo done"}}, r.handler())
		if err != nil {
			b.Fatal(err)
		}
		r.set(term)
		for !strings.HasSuffix(r.String(), "done\r\n") {
			<-r.changed
		}
		b.SetBytes(int64(r.Len()))
		<-term.Done()
	}
}
