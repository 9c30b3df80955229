package core

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type recorder struct {
	mu     sync.Mutex
	chunks []Chunk
	closed string
}

func (r *recorder) Output(_ string, c Chunk) {
	r.mu.Lock()
	r.chunks = append(r.chunks, c)
	r.mu.Unlock()
}
func (r *recorder) Closed(_, reason string) { r.mu.Lock(); r.closed = reason; r.mu.Unlock() }

func TestStreamRingAndReplay(t *testing.T) {
	s := newStream("s", 100, 1000)
	id := json.RawMessage(`1`)
	for range 30 {
		s.publish(id, []byte("0123456789")) // 300 bytes into a 100-byte ring
	}
	var info ReplayInfo
	r := &recorder{}
	s.subscribe(r, 0, func(i ReplayInfo) { info = i })
	if !info.Missed || info.Replayed != 10 || info.NextSeq != 31 || r.chunks[0].Seq != 21 {
		t.Fatalf("replay from 0: %+v, first %d", info, r.chunks[0].Seq)
	}
	r2 := &recorder{}
	s.subscribe(r2, 25, func(i ReplayInfo) { info = i })
	if info.Missed || info.Replayed != 5 || r2.chunks[0].Seq != 26 {
		t.Fatalf("replay from 25: %+v", info)
	}
	s.publish(id, []byte("live"))
	if len(r2.chunks) != 6 || r2.chunks[5].Data != "live" || r2.chunks[5].Seq != 31 {
		t.Fatalf("live chunk: %+v", r2.chunks[5])
	}
	s.end("bye")
	if r.closed != "bye" || r2.closed != "bye" {
		t.Fatal("subscribers not told of the end")
	}
	r3 := &recorder{}
	s.subscribe(r3, 30, func(ReplayInfo) {})
	if r3.closed != "bye" || len(r3.chunks) != 1 {
		t.Fatalf("late subscriber: %+v", r3)
	}
}

func TestStreamSplitsBigChunksOnCharacters(t *testing.T) {
	s := newStream("s", 1<<20, 1000)
	big := strings.Repeat("é", maxChunkBytes) // 2 bytes each
	s.publish(json.RawMessage(`1`), []byte(big))
	r := &recorder{}
	s.subscribe(r, 0, func(ReplayInfo) {})
	var b strings.Builder
	for _, c := range r.chunks {
		if len(c.Data) > maxChunkBytes || !utf8.ValidString(c.Data) {
			t.Fatalf("chunk of %d bytes, valid %v", len(c.Data), utf8.ValidString(c.Data))
		}
		b.WriteString(c.Data)
	}
	if b.String() != big {
		t.Fatal("data changed")
	}
}

func TestUTF8Carry(t *testing.T) {
	var u utf8Carry
	e := []byte("é") // c3 a9
	if got := u.take([]byte{'a', e[0]}); string(got) != "a" {
		t.Fatalf("first half: %q", got)
	}
	if got := u.take([]byte{e[1], 'b'}); string(got) != "éb" {
		t.Fatalf("second half: %q", got)
	}
	u.take([]byte{0xe2, 0x82}) // two of the three bytes of €
	if got := u.flush(); len(got) != 2 {
		t.Fatalf("flush: %q", got)
	}
}

func TestIdempotencyBounds(t *testing.T) {
	c := newIdempotency(3, 100, time.Minute)
	now := time.Now()
	c.now = func() time.Time { return now }
	runs := 0
	do := func(key string, size int) {
		t.Helper()
		_, err := c.do(context.Background(), key, fingerprint("m", []byte(key)), func() (json.RawMessage, error) {
			runs++
			return json.RawMessage(`"` + strings.Repeat("x", size) + `"`), nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	do("a", 1)
	do("a", 1)
	if runs != 1 {
		t.Fatalf("retry ran again (%d runs)", runs)
	}
	do("b", 1)
	do("c", 1)
	do("d", 1) // four entries in a 3-entry cache: a goes
	do("a", 1)
	if runs != 5 {
		t.Fatalf("evicted entry not run again (%d runs)", runs)
	}
	do("big", 200) // larger than the byte budget: not kept
	do("big", 200)
	if runs != 7 {
		t.Fatalf("oversized result kept (%d runs)", runs)
	}
	now = now.Add(2 * time.Minute) // past the TTL
	do("d", 1)
	if runs != 8 {
		t.Fatalf("expired entry not run again (%d runs)", runs)
	}
	// Failures are not kept: a retry runs again.
	fail := func() (json.RawMessage, error) { runs++; return nil, errors.New("boom") }
	for range 2 {
		if _, err := c.do(context.Background(), "f", fingerprint("m", nil), fail); err == nil {
			t.Fatal("a failing fn returned no error")
		}
	}
	if runs != 10 {
		t.Fatalf("failure kept (%d runs)", runs)
	}
	// Same key, other content: a conflict.
	_, err := c.do(context.Background(), "d", fingerprint("other", nil), fail)
	if apierr.KindOf(err) != apierr.Conflict {
		t.Fatalf("reused key: %v", err)
	}
}

// The store of session token digests lives in directories nobody else may
// enter, even when they existed before with looser modes.
func TestTokenStoreDirsPrivate(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	dir := filepath.Join(state, "sessions")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, mode := range map[string]os.FileMode{state: 0o755, dir: 0o777} {
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := NewTokenStore(dir); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{state, dir} {
		if st, _ := os.Stat(d); st.Mode().Perm() != 0o700 {
			t.Fatalf("%s left at mode %v", d, st.Mode().Perm())
		}
	}
}

func TestEndedSetBounds(t *testing.T) {
	e := endedSet{ttl: time.Minute, max: 3}
	now := time.Now()
	for i, id := range []string{"a", "b", "c", "d"} {
		e.add(id, auth.DigestOf(id), "reason "+id, now.Add(time.Duration(i)*time.Second))
	}
	if _, ok := e.get("a", now.Add(5*time.Second)); ok {
		t.Fatal("oldest kept beyond max")
	}
	if _, _, ok := e.byTokenDigest(auth.DigestOf("a"), now.Add(5*time.Second)); ok {
		t.Fatal("oldest token kept beyond max")
	}
	d, ok := e.get("d", now.Add(5*time.Second))
	if !ok || !d.Matches("d") {
		t.Fatal("newest lost")
	}
	if id, reason, ok := e.byTokenDigest(auth.DigestOf("d"), now.Add(5*time.Second)); !ok || id != "d" || reason != "reason d" {
		t.Fatalf("by token: %q %q %v", id, reason, ok)
	}
	if _, ok := e.get("d", now.Add(2*time.Minute)); ok || len(e.order) != 0 || len(e.byID) != 0 || len(e.byToken) != 0 {
		t.Fatalf("kept past the ttl: %v", e.order)
	}
}
