package kubernetes

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/klog/v2"
)

// records keeps the records of a recordHandler and its derived handlers.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
	got  chan struct{}
}

// recordHandler is a slog.Handler that keeps every record, with the
// attributes of its With calls.
type recordHandler struct {
	*records
	attrs []slog.Attr
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.attrs...)
	h.mu.Lock()
	h.recs = append(h.recs, r)
	h.mu.Unlock()
	select {
	case h.got <- struct{}{}:
	default:
	}
	return nil
}

func (h recordHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return recordHandler{records: h.records, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h recordHandler) WithGroup(string) slog.Handler { return h }

// find returns the first record with msg, and whether there is one.
func (rs *records) find(msg string) (slog.Record, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, r := range rs.recs {
		if r.Message == msg {
			return r, true
		}
	}
	return slog.Record{}, false
}

func attrOf(r slog.Record, key string) string {
	v := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == key {
			v = a.Value.String()
			return false
		}
		return true
	})
	return v
}

// A stream cut in the middle makes client-go log from its own goroutines
// (SPDY's "Copying stdin failed"): that line reaches the daemon's slog,
// demoted to a warning with component=client-go, and nothing is written
// to stderr.
func TestCutStreamLogsThroughSlog(t *testing.T) {
	rs := &records{got: make(chan struct{}, 1)}
	before := klogSink.Load()
	routeKlog(slog.New(recordHandler{records: rs}))
	klogLimit.reset() // earlier tests' cut streams said it already
	t.Cleanup(func() { klogSink.Store(before) })
	stderr := os.Stderr
	pr, pw, err := os.Pipe()
	require.NoError(t, err)
	os.Stderr = pw
	restored := false
	restore := func() {
		if !restored {
			restored = true
			os.Stderr = stderr
			_ = pw.Close()
		}
	}
	t.Cleanup(restore)
	raw := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(pr)
		raw <- b
	}()

	env := newExecEnv(t, refuse) // SPDY: its stdin copier logs when the stream is cut
	rwc, err := env.exec(t.Context(), "ns", "pod", "agent", []string{"cat"})
	require.NoError(t, err)
	_, err = rwc.Write([]byte("ping"))
	require.NoError(t, err)
	buf := make([]byte, 4)
	_, err = io.ReadFull(rwc, buf)
	require.NoError(t, err)
	require.NoError(t, rwc.Close())
	t.Logf("the command ended with %v", <-env.ctr.ended)

	const msg = "Copying stdin failed"
	guard, cancel := context.WithTimeout(t.Context(), 2*time.Minute) // a hang guard: the line comes at once
	defer cancel()
	var rec slog.Record
	for found := false; !found; {
		select {
		case <-rs.got:
		case <-guard.Done():
			t.Fatal("the cut stream logged nothing through slog")
		}
		rec, found = rs.find(msg)
	}
	klog.Flush()
	restore()
	assert.Equal(t, slog.LevelWarn, rec.Level, "klog's errors are warnings")
	assert.Equal(t, "client-go", attrOf(rec, "component"))
	assert.NotEmpty(t, attrOf(rec, "err"))
	assert.Empty(t, string(<-raw), "nothing reached stderr")
}

// A message goes at its level once per period; its repeats within the
// period at debug; the map of messages is bounded.
func TestKlogLimiter(t *testing.T) {
	now := time.Unix(0, 0)
	l := &limiter{now: func() time.Time { return now }, every: time.Minute, seen: map[string]time.Time{}}
	assert.True(t, l.pass("Copying stdin failed"))
	assert.False(t, l.pass("Copying stdin failed"), "a repeat within the minute")
	assert.True(t, l.pass("Copying stdout failed"), "another message")
	now = now.Add(time.Minute)
	assert.True(t, l.pass("Copying stdin failed"), "a minute later")
	for i := range 2 * maxSeen {
		l.pass(fmt.Sprint(i))
	}
	assert.LessOrEqual(t, len(l.seen), maxSeen)
}

func TestKlogLevels(t *testing.T) {
	for _, c := range []struct{ in, want slog.Level }{
		{slog.LevelError, slog.LevelWarn},
		{slog.LevelWarn, slog.LevelWarn},
		{slog.LevelInfo, slog.LevelDebug},
		{slog.LevelInfo - 2, slog.LevelDebug - 2},
		{slog.LevelDebug, slog.LevelDebug - 4},
	} {
		assert.Equal(t, c.want, demote(c.in), "%v", c.in)
	}
}
