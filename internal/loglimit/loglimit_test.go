package loglimit

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// syncBuffer is a bytes.Buffer safe for the summary's timer goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestFloodIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var buf syncBuffer
		log := slog.New(New(slog.NewJSONHandler(&buf, nil), Options{})).With("session", "s1")
		huge := strings.Repeat("X", 1<<20)
		// 100,000 records of 1 MiB in an instant: the burst passes,
		// truncated, the rest is counted.
		for range 100_000 {
			log.Warn("the agent reported a protocol error", "err", huge)
		}
		time.Sleep(2*DefaultEvery + time.Millisecond) // the summary's timer
		synctest.Wait()
		out := buf.String()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, DefaultBurst+1, out)
		assert.Less(t, len(out), 5000, "log bytes")
		assert.Contains(t, lines[0], `"session":"s1"`)
		assert.Contains(t, lines[0], `…[1048576 bytes]`)
		assert.Contains(t, lines[DefaultBurst], `"msg":"99990 more log lines suppressed (rate limit)"`)
		assert.Contains(t, lines[DefaultBurst], `"session":"s1"`)

		// A steady flood after that: one line per Every, carrying the
		// count of the suppressed ones, and a last summary.
		buf.mu.Lock()
		buf.b.Reset()
		buf.mu.Unlock()
		for range 10 {
			for range 10_000 {
				log.Warn("again", "err", huge)
			}
			time.Sleep(DefaultEvery)
		}
		synctest.Wait()
		out = buf.String()
		n := strings.Count(out, "\n")
		assert.LessOrEqual(t, n, 11, out)
		assert.GreaterOrEqual(t, n, 10, out)
		assert.Contains(t, out, `"suppressed_before":9999`)
	})
}

func TestTruncation(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(New(slog.NewTextHandler(&buf, nil), Options{MaxValue: 8}))
	log.Info(strings.Repeat("m", 20), "s", "short", "long", "0123456789abc", "err", errors.New("éééééé"),
		slog.Group("g", "inner", strings.Repeat("i", 30)), "raw", []byte("0123456789"))
	out := buf.String()
	assert.Contains(t, out, `msg="mmmmmmmm…[20 bytes]"`)
	assert.Contains(t, out, `s=short`)
	assert.Contains(t, out, `long="01234567…[13 bytes]"`)
	assert.Contains(t, out, `err="éééé…[12 bytes]"`, "cut at a rune boundary")
	assert.Contains(t, out, `g.inner="iiiiiiii…[30 bytes]"`)
	assert.Contains(t, out, `raw="01234567…[10 bytes]"`)
}

func TestDisabledLevelsTakeNoToken(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(New(slog.NewTextHandler(&buf, nil), Options{Burst: 1}))
	for range 100 {
		log.Debug("not logged")
	}
	log.Warn("logged")
	assert.Contains(t, buf.String(), "logged")
}

func TestNewLoggerDoesNotWrapTwice(t *testing.T) {
	l := NewLogger(slog.New(slog.DiscardHandler), Options{})
	assert.True(t, Limited(l))
	assert.Same(t, l, NewLogger(l, Options{}))
	assert.False(t, Limited(slog.Default()))
}
