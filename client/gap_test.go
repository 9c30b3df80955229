package client_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/internal/servertest"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/wsproto"
)

// slowCall runs a 16 MiB stream call whose stream function holds its first
// chunk until the fake has printed everything (the client reads nothing
// meanwhile: the server withholds what its queue cannot take), then takes
// the rest at full speed. It returns the bytes and seqs delivered, what
// OnLost was told, and the call's error.
func slowCall(t *testing.T, ts *servertest.Server) (got int64, seqs []uint64, toldLost int64, err error) {
	t.Helper()
	c := dial(t, ts.URL, ts.Token, client.Options{})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	s.OnOutput = func(o wsproto.StreamOutput) { mu.Lock(); seqs = append(seqs, o.Seq); mu.Unlock() }
	s.OnLost = func(l *client.OutputLost) { mu.Lock(); toldLost += l.Bytes; mu.Unlock() }
	release := make(chan struct{})
	var once sync.Once
	type result struct {
		text string
		err  error
	}
	done := make(chan result, 1)
	cctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // reading back is slow under -race
	defer cancel()
	go func() {
		obs, err := s.Call(cctx, "stream", map[string]int{"chunks": chunks, "size": size}, func(b []byte) {
			once.Do(func() { <-release })
			mu.Lock()
			got += int64(len(b))
			mu.Unlock()
		})
		r := result{err: err}
		if obs != nil {
			r.text = obs.Text()
		}
		done <- r
	}()
	// The fake has printed it all once the call's latency is recorded.
	for deadline := time.Now().Add(20 * time.Second); testutil.CollectAndCount(ts.Core().Metrics().CallDuration) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the stream call did not finish printing")
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(release)
	r := <-done
	if r.text != "done" {
		t.Fatalf("call: %q, %v", r.text, r.err)
	}
	if testutil.ToFloat64(ts.Core().Metrics().StreamGaps) < 1 {
		t.Fatal("no gap: the test did not make the client slow")
	}
	mu.Lock()
	defer mu.Unlock()
	return got, seqs, toldLost, r.err
}

const chunks, size = 1000, 16 << 10 // 16 MiB: more than the socket buffers and the queue take

// A client that reads nothing for a while gets a gap, not a disconnect;
// with a ring that holds the whole output, it reads the gap back and the
// call delivers every chunk once, in order.
func TestSlowStreamRefilledFromRing(t *testing.T) {
	ts := servertest.Start(t, func(o *server.Options) { o.RingBytes = 2 * chunks * size })
	got, seqs, lost, err := slowCall(t, ts)
	if err != nil || lost != 0 {
		t.Fatalf("call: %v (lost told %d)", err, lost)
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
// client reads it back: the call returns its observation and an
// *OutputLost whose bytes, with those delivered, are all the output;
// OnLost was told the same; what was delivered is in order.
func TestSlowStreamLossReported(t *testing.T) {
	ts := servertest.Start(t, nil)
	got, seqs, told, err := slowCall(t, ts)
	var lost *client.OutputLost
	if !errors.As(err, &lost) {
		t.Fatalf("call: %v, want an *OutputLost", err)
	}
	if got+lost.Bytes != chunks*size || told != lost.Bytes || len(lost.Ranges) == 0 {
		t.Fatalf("%d bytes delivered + %d lost (OnLost told %d) != %d printed; %v", got, lost.Bytes, told, chunks*size, lost)
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("chunk %d after %d", seqs[i], seqs[i-1])
		}
	}
	var inRanges uint64
	for _, r := range lost.Ranges {
		inRanges += r.To - r.From + 1
	}
	if uint64(len(seqs))+inRanges != chunks {
		t.Fatalf("%d chunks delivered + %d in lost ranges != %d", len(seqs), inRanges, chunks)
	}
}
