package client_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

// slowObserver runs a 16 MiB stream call on one connection while a second
// connection, attached to the session, holds its first chunk until the
// call has ended (it reads nothing meanwhile: the server withholds what its
// queue cannot take), then takes the rest at full speed. The caller's own
// connection reads at full speed: its call is paced to it (decision 0038)
// and must get every byte with no loss. It returns what the observer got:
// bytes, seqs, and what OnLost was told, once they account for all the
// output.
func slowObserver(t *testing.T, ts *servertest.Server) (got int64, seqs []uint64, toldLost int64) {
	t.Helper()
	caller := dial(t, ts.URL, ts.Token, client.Options{})
	s, err := caller.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	release := make(chan struct{})
	var once sync.Once
	obs := dial(t, ts.URL, ts.Token, client.Options{})
	o, err := obs.AttachOutput(ctx(t), s.ID, s.Token, 0, func(out wsproto.StreamOutput) {
		once.Do(func() { <-release })
		mu.Lock()
		seqs = append(seqs, out.Seq)
		got += int64(len(out.Data))
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	o.OnLost = func(l *client.OutputLost) { mu.Lock(); toldLost += l.Bytes; mu.Unlock() }

	var callerGot int64
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // slow under -race
	defer cancel()
	r, err := s.Call(cctx, "stream", map[string]int{"chunks": chunks, "size": size}, func(b []byte) { callerGot += int64(len(b)) })
	if err != nil || r.Text() != "done" || callerGot != chunks*size {
		t.Fatalf("the caller's call: %v, %d of %d bytes: a paced call lost output", err, callerGot, chunks*size)
	}
	close(release)
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
		mu.Lock()
		all := got+toldLost >= chunks*size
		mu.Unlock()
		if all {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("the observer accounts for %d + %d lost of %d bytes", got, toldLost, chunks*size)
		}
	}
	if v := gaps(t, ts); v < 1 {
		t.Fatal("no gap: the test did not make the observer slow")
	}
	mu.Lock()
	defer mu.Unlock()
	return got, seqs, toldLost
}

const chunks, size = 1000, 16 << 10 // 16 MiB: more than the socket buffers and the queue take

// A connection that reads nothing for a while gets a gap, not a
// disconnect; with a ring that holds the whole output, it reads the gap
// back and gets every chunk once, in order.
func TestSlowStreamRefilledFromRing(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.RingBytes = 2 * chunks * size })
	got, seqs, lost := slowObserver(t, ts)
	if lost != 0 {
		t.Fatalf("lost told %d", lost)
	}
	if got != chunks*size || len(seqs) != chunks {
		t.Fatalf("%d bytes in %d chunks, want %d in %d", got, len(seqs), chunks*size, chunks)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] != seqs[i-1]+1 {
			t.Fatalf("chunk %d after %d", seqs[i], seqs[i-1])
		}
	}
}

// With the default ring (1 MiB) most of a 16 MiB gap is gone when the
// observer reads it back: OnLost is told, and its bytes with those
// delivered are all the output; what was delivered is in order.
func TestSlowStreamLossReported(t *testing.T) {
	ts := servertest.Start(t, nil)
	got, seqs, told := slowObserver(t, ts)
	if told == 0 || got+told != chunks*size {
		t.Fatalf("%d bytes delivered + %d lost != %d printed", got, told, chunks*size)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("chunk %d after %d", seqs[i], seqs[i-1])
		}
	}
}

// gaps is the server's count of stream gaps (sandboxd_ws_stream_gaps_total).
func gaps(t *testing.T, ts *servertest.Server) float64 {
	t.Helper()
	fams, err := ts.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == "sandboxd_ws_stream_gaps_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
