package kubernetes

import (
	"fmt"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// lingering are goroutines client-go's stream libraries leave behind an
// exec that was cut off (Close, a cancelled context) and that end on their
// own: spdystream's shutdown hands its close error over for at most 1 s;
// the WebSocket executor's heartbeat stops at its next ping (5 s) once the
// connection is closed.
var lingering = []goleak.Option{
	goleak.IgnoreTopFunction("github.com/moby/spdystream.(*Connection).shutdown"),
	goleak.IgnoreTopFunction("k8s.io/client-go/tools/remotecommand.(*heartbeat).start"),
}

// TestMain checks for leaks at once, but for the lingering goroutines, and
// then waits for those to end too: bounded is what is checked, not absent.
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(lingering...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	if code == 0 {
		deadline := time.Now().Add(15 * time.Second)
		err := goleak.Find()
		for err != nil && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			err = goleak.Find()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "goleak: client-go's goroutines did not end: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
