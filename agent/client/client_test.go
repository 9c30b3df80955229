package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/agent/proto"
)

var quiet = slog.New(slog.DiscardHandler)

func TestCallReturnsPromptlyOnAStalledStream(t *testing.T) {
	// In a bubble the clock only moves when every goroutine waits: a call
	// that returns at its deadline returns after exactly 20ms.
	synctest.Test(t, func(t *testing.T) {
		hostEnd, agentEnd := net.Pipe() // nobody reads agentEnd: every write blocks
		defer func() { _ = agentEnd.Close() }()
		cli := NewClient(hostEnd, WithLogger(quiet))
		defer func() { _ = cli.Close() }()
		for range writeQueue + 2 { // more than the write queue holds
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			start := time.Now()
			_, err := cli.Call(ctx, "echo", json.RawMessage(`{"text":"x"}`), nil)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Equal(t, 20*time.Millisecond, time.Since(start), "the call returns when its ctx ends, not when the stream frees up")
		}
	})
}

// An agent that streams past its window (it ignores stream/ack) cannot make
// the host hold more: the excess is dropped and the call fails saying so.
func TestStreamPastTheWindowFailsTheCall(t *testing.T) {
	hostEnd, agentEnd := net.Pipe()
	cli := NewClient(hostEnd, WithLogger(quiet))
	t.Cleanup(func() { _ = cli.Close(); _ = agentEnd.Close() })
	done := make(chan error, 1)
	var got int
	hold := make(chan struct{}) // the host takes nothing until the agent is done
	go func() {
		_, err := cli.Call(ctxT(t), "stream", nil, func(b []byte) { <-hold; got += len(b) })
		done <- err
	}()
	var hdr [proto.HeaderSize]byte
	body, _, err := proto.ReadFrame(agentEnd, &hdr)
	require.NoError(t, err)
	go func() { _, _ = io.Copy(io.Discard, agentEnd) }() // the acks
	var f proto.Frame
	require.NoError(t, json.Unmarshal(body, &f))
	var cp proto.CallParams
	require.NoError(t, json.Unmarshal(f.Params, &cp))
	require.Equal(t, int64(StreamWindow), cp.Window, "a streaming call asks for a window")
	chunk := bytes.Repeat([]byte("y"), 256<<10)
	for seq := uint64(1); seq <= 8; seq++ { // 2 MiB: twice the window, no ack awaited
		raw, _ := json.Marshal(proto.StreamParams{ID: f.ID, Seq: seq})
		_, err := agentEnd.Write(mustFrame(t, &proto.Frame{Method: proto.MethodStream, Params: raw, Data: chunk}))
		require.NoError(t, err)
	}
	_, err = agentEnd.Write(mustFrame(t, &proto.Frame{ID: f.ID, Result: json.RawMessage(`{"content":[{"type":"text","text":"x"}]}`)}))
	require.NoError(t, err)
	close(hold)
	err = <-done
	require.ErrorIs(t, err, ErrStreamWindow)
	assert.LessOrEqual(t, got, StreamWindow)
}

// ctxT bounds a test's calls: a guard on a hang, not a timing assert (a
// loaded machine is slow, issue 23).
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
