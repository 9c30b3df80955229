package wsapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/wsproto"
)

// pacingServer serves a handler with opts and returns it with a client
// connection that reads nothing until the test reads (with a small, fixed
// receive buffer if readBuffer is set, so the server's queue fills soon)
// and the server's side of it.
func pacingServer(t *testing.T, opts Options, readBuffer int) (*Handler, *websocket.Conn, *conn) {
	t.Helper()
	cr, token := newTestCore(t)
	h := New(cr, opts)
	hs := httptest.NewServer(h)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.Shutdown(ctx)
		hs.Close()
	})
	d := websocket.Dialer{NetDialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil && readBuffer > 0 {
			err = c.(*net.TCPConn).SetReadBuffer(readBuffer)
		}
		return c, err
	}}
	ws, _, err := d.Dial("ws"+strings.TrimPrefix(hs.URL, "http"), http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	var c *conn
	for c == nil {
		h.mu.Lock()
		for k := range h.conns {
			c = k
		}
		h.mu.Unlock()
		if c == nil {
			time.Sleep(time.Millisecond) // the handler registers it after the upgrade
		}
	}
	return h, ws, c
}

// A connection that reads nothing while its session prints 16 MiB is not
// disconnected, and the server never holds more than its output budget of
// it: the rest is withheld as one gap. Replies queued meanwhile (beyond
// the whole queue's bytes) wait and are all delivered once the client
// reads; the client then finds the output it got, in order, followed by
// exactly one stream.gap naming the withheld seqs and bytes.
func TestSlowReaderGetsGapNotDisconnect(t *testing.T) {
	const budget, queue = 64 << 10, 1 << 20
	_, ws, c := pacingServer(t, Options{OutputBytes: budget, QueueBytes: queue, ReplyWait: time.Minute}, 0)
	const chunks, size = 2048, 8 << 10 // 16 MiB
	data := strings.Repeat("x", size)
	for i := 1; i <= chunks; i++ {
		c.Output("s1", core.Chunk{Seq: uint64(i), CallID: json.RawMessage(`7`), Data: data})
		if q := c.queued.Load(); q > budget {
			t.Fatalf("after chunk %d the queue holds %d bytes, over the output budget of %d", i, q, budget)
		}
	}
	if c.ctx.Err() != nil {
		t.Fatal("the slow reader was disconnected")
	}
	// Replies: 8 of 256 KiB, twice the whole queue, none dropped.
	const replies = 8
	big := strings.Repeat("r", 256<<10)
	var wg sync.WaitGroup
	for i := range replies {
		wg.Go(func() { c.reply(json.RawMessage(fmt.Sprint(100+i)), big) })
	}
	seen := map[string]bool{}
	next, gaps := uint64(1), 0
	for len(seen) < replies || next <= chunks {
		_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		var m wsproto.Message
		if err := ws.ReadJSON(&m); err != nil {
			t.Fatalf("read after seq %d, %d replies: %v", next-1, len(seen), err)
		}
		switch m.Method {
		case wsproto.NotifyStreamOutput:
			var o wsproto.StreamOutput
			_ = json.Unmarshal(m.Params, &o)
			if o.Seq != next || len(o.Data) != size {
				t.Fatalf("chunk %d (%d bytes), want %d: a seq neither sent nor announced in a gap", o.Seq, len(o.Data), next)
			}
			next++
		case wsproto.NotifyStreamGap:
			var gp wsproto.StreamGap
			_ = json.Unmarshal(m.Params, &gp)
			if gp.SessionID != "s1" || gp.FromSeq != next || gp.ToSeq < gp.FromSeq || gp.ToSeq > chunks ||
				gp.Bytes != int64(gp.ToSeq-gp.FromSeq+1)*size || len(gp.CallIDs) != 1 || string(gp.CallIDs[0]) != "7" || gp.MoreCalls {
				t.Fatalf("gap %+v after seq %d", gp, next-1)
			}
			next = gp.ToSeq + 1
			gaps++
		case "":
			if !bytes.Equal(m.Result, []byte(`"`+big+`"`)) {
				t.Fatalf("reply %s: %d bytes", m.ID, len(m.Result))
			}
			seen[string(m.ID)] = true
		default:
			t.Fatalf("unexpected %s", m.Method)
		}
	}
	wg.Wait()
	if gaps == 0 {
		t.Fatal("16 MiB to a client that read nothing went without a gap")
	}
	if v := c.h.core.Metrics().SlowDisconnects; metricCount(t, v) != 0 {
		t.Fatal("counted a slow-client disconnect")
	}
}

// A client that reads nothing at all holds at most its queue (and the
// replies waiting for it): a reply that finds no room for ReplyWait
// disconnects it with 1008, saying why.
func TestClientThatNeverReadsIsDisconnected(t *testing.T) {
	_, ws, c := pacingServer(t, Options{QueueBytes: 256 << 10, ReplyWait: 200 * time.Millisecond}, 8<<10)
	big := strings.Repeat("r", 128<<10)
	var wg sync.WaitGroup
	for i := range 64 { // 8 MiB of replies: more than the socket buffers and the queue
		wg.Go(func() { c.reply(json.RawMessage(fmt.Sprint(i)), big) })
	}
	wg.Wait() // each was queued, or gave up at ReplyWait
	select {
	case <-c.ctx.Done():
	case <-time.After(time.Minute):
		t.Fatal("a client that reads nothing was not disconnected")
	}
	if metricCount(t, c.h.core.Metrics().SlowDisconnects) != 1 {
		t.Fatalf("the disconnect was not counted (closed: %s)", c.closeReason())
	}
	if q := c.queued.Load(); q > 256<<10 {
		t.Fatalf("the queue held %d bytes, over its bound", q)
	}
	// The client finds the close frame behind what was written.
	_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
	for {
		if _, _, err := ws.ReadMessage(); err != nil {
			if !websocket.IsCloseError(err, websocket.ClosePolicyViolation) {
				t.Logf("read ended with %v (the close frame may be lost when the socket is full)", err)
			} else if !strings.Contains(err.Error(), "no room") {
				t.Fatalf("close reason: %v", err)
			}
			return
		}
	}
}

func metricCount(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

// A streaming call of this connection is paced to it (conn.pace, decision
// 0038): output that waits for the drain after each chunk is never
// withheld from its caller, however small the budget: 16 MiB arrive
// whole, in order, without one gap, and the queue stays within the budget
// plus the chunk in hand. (Not with a tiny socket buffer: loopback's
// silly-window avoidance then stalls the sender on its persist timer.)
func TestPacedCallIsNeverWithheld(t *testing.T) {
	const budget = 64 << 10
	_, ws, c := pacingServer(t, Options{OutputBytes: budget, ReplyWait: time.Minute}, 0)
	const chunks, size = 2048, 8 << 10 // 16 MiB
	data := strings.Repeat("x", size)
	over := make(chan int64, 1)
	go func() {
		ctx := context.Background()
		for i := 1; i <= chunks; i++ {
			c.Output("s1", core.Chunk{Seq: uint64(i), CallID: json.RawMessage(`7`), Data: data})
			if q := c.queued.Load(); q > budget+2*size {
				select {
				case over <- q:
				default:
				}
			}
			c.pace(ctx)
		}
	}()
	for next := uint64(1); next <= chunks; {
		_ = ws.SetReadDeadline(time.Now().Add(20 * time.Second))
		var m wsproto.Message
		if err := ws.ReadJSON(&m); err != nil {
			t.Fatalf("read after seq %d: %v", next-1, err)
		}
		if m.Method != wsproto.NotifyStreamOutput {
			t.Fatalf("after seq %d: %s %s: a paced call's output was withheld", next-1, m.Method, m.Params)
		}
		var o wsproto.StreamOutput
		_ = json.Unmarshal(m.Params, &o)
		if o.Seq != next || len(o.Data) != size {
			t.Fatalf("chunk %d (%d bytes), want %d", o.Seq, len(o.Data), next)
		}
		next++
	}
	select {
	case q := <-over:
		t.Fatalf("the queue held %d bytes, over the budget of %d", q, budget)
	default:
	}
}
