package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/internal/loglimit"
)

// countingWriter counts the bytes logged, keeping the first few KB.
type countingWriter struct {
	mu   sync.Mutex
	n    int
	head bytes.Buffer
}

func (w *countingWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.n += len(p)
	if w.head.Len() < 8<<10 {
		w.head.Write(p)
	}
	return len(p), nil
}

func (w *countingWriter) bytes() (int, string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n, w.head.String()
}

// A stream flooded with forged frames (as code in a sandbox could write
// them) makes the client log a bounded number of bytes, through the logger
// it was given, and leaves the connection working.
func TestClientForgedFrameFloodIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var logged countingWriter
		log := slog.New(slog.NewJSONHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
		hostEnd, agentEnd := net.Pipe()
		c := NewClient(hostEnd, WithLogger(log.With("session", "s1")))
		defer c.Close()

		msg := strings.Repeat("X", 200)
		huge := strings.Repeat("Y", 64<<10)
		forged := [][]byte{
			mustFrame(t, &proto.Frame{Error: &proto.Error{Code: -32000, Message: msg}}),
			mustFrame(t, &proto.Frame{Method: proto.MethodStream, Params: json.RawMessage(`"` + msg + `"`)}),
			mustFrame(t, &proto.Frame{ID: 1 << 40, Result: json.RawMessage(`{}`)}),
			mustFrame(t, &proto.Frame{Method: msg}),
		}
		const frames = 100_000
		hugeFrame := mustFrame(t, &proto.Frame{Error: &proto.Error{Code: -32000, Message: huge}})
		flooded := make(chan struct{})
		go func() {
			defer close(flooded)
			w := bufio.NewWriter(agentEnd)
			_, _ = w.Write(hugeFrame)
			for i := range frames {
				_, _ = w.Write(forged[i%len(forged)])
			}
			_ = w.Flush()
		}()
		// Then the connection still works: answer a ping.
		pinged := make(chan error, 1)
		go func() { pinged <- c.Ping(context.Background()) }()
		go func() {
			r := bufio.NewReader(agentEnd)
			var hdr [proto.HeaderSize]byte
			body, _, err := proto.ReadFrame(r, &hdr)
			if err != nil {
				return
			}
			var req proto.Frame
			if json.Unmarshal(body, &req) != nil {
				return
			}
			<-flooded // one writer at a time, as in a pipe's frames
			pong, _ := proto.EncodeFrame(&proto.Frame{ID: req.ID, Result: json.RawMessage(`{}`)})
			_, _ = agentEnd.Write(pong)
		}()
		require.NoError(t, <-pinged)
		time.Sleep(2 * loglimit.DefaultEvery) // the summary's timer
		synctest.Wait()

		n, head := logged.bytes()
		t.Logf("%d forged frames: %d bytes of log", frames, n)
		assert.Less(t, n, 6000, head)
		assert.Contains(t, head, `"component":"agent-client"`)
		assert.Contains(t, head, `"session":"s1"`)
		assert.Contains(t, head, `more log lines suppressed`)
		assert.NotContains(t, head, strings.Repeat("Y", 300))
	})
}

func mustFrame(t *testing.T, f *proto.Frame) []byte {
	t.Helper()
	b, err := proto.EncodeFrame(f)
	require.NoError(t, err)
	return b
}
