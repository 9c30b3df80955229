// Package loglimit bounds what untrusted input can make the daemon log.
//
// Everything the daemon reads from a sandbox (the agent's frames, its
// stderr) is hostile input: code in the session may forge it. A Handler
// wraps the daemon's configured slog.Handler for the logs such input
// causes: every record is truncated (its message and each string, error or
// raw-bytes attribute to MaxValue bytes) and rate-limited by a token bucket
// (Burst records, then one per Every). Suppressed records are counted:
// the next record let through carries the count (suppressed_before), or,
// if none comes within 2×Every, a summary record says it ("N more log lines
// suppressed"). Handlers derived with WithAttrs or WithGroup share the
// bucket, so one Handler per session bounds that session's log output
// whatever it logs through.
package loglimit

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"

	"golang.org/x/time/rate"
)

// Defaults of Options.
const (
	DefaultBurst = 10
	// DefaultEvery: after the burst, a flood from inside a sandbox adds
	// one line (~0.5 KB) per 10 s per session: ~180 KB an hour, where one
	// a second was ~1.8 MB an hour for each session under attack.
	DefaultEvery    = 10 * time.Second
	DefaultMaxValue = 200
)

// Options configure a Handler; zero values take the defaults.
type Options struct {
	// Burst records pass at once, then one per Every.
	Burst int
	Every time.Duration
	// MaxValue bounds the message and each string-like attribute, in
	// bytes (plus a short marker saying how long it was).
	MaxValue int
}

// Handler is a slog.Handler that truncates and rate-limits records before
// passing them to the handler it wraps.
type Handler struct {
	inner slog.Handler
	st    *state
}

type state struct {
	o     Options
	last  slog.Handler // the handler of the last suppressed record: the summary goes there
	mu    sync.Mutex
	lim   *rate.Limiter
	supp  int         // records suppressed since the last summary
	timer *time.Timer // pending summary, nil when none
}

// New wraps h. Records h would not log (Enabled false) never take a token.
func New(h slog.Handler, o Options) *Handler {
	if o.Burst <= 0 {
		o.Burst = DefaultBurst
	}
	if o.Every <= 0 {
		o.Every = DefaultEvery
	}
	if o.MaxValue <= 0 {
		o.MaxValue = DefaultMaxValue
	}
	return &Handler{inner: h, st: &state{o: o, lim: rate.NewLimiter(rate.Every(o.Every), o.Burst)}}
}

// NewLogger is slog.New(New(l.Handler(), o)), or l itself when it is
// already limited (so a caller can pass a per-session limited logger down
// without it being limited twice).
func NewLogger(l *slog.Logger, o Options) *slog.Logger {
	if Limited(l) {
		return l
	}
	return slog.New(New(l.Handler(), o))
}

// Limited reports whether l's records go through a Handler.
func Limited(l *slog.Logger) bool {
	_, ok := l.Handler().(*Handler)
	return ok
}

// Enabled implements slog.Handler.
func (h *Handler) Enabled(ctx context.Context, l slog.Level) bool { return h.inner.Enabled(ctx, l) }

// WithAttrs implements slog.Handler; the result shares h's bucket.
func (h *Handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &Handler{inner: h.inner.WithAttrs(truncAttrs(as, h.st.o.MaxValue)), st: h.st}
}

// WithGroup implements slog.Handler; the result shares h's bucket.
func (h *Handler) WithGroup(name string) slog.Handler {
	return &Handler{inner: h.inner.WithGroup(name), st: h.st}
}

// Handle implements slog.Handler.
func (h *Handler) Handle(ctx context.Context, r slog.Record) error {
	ok, before := h.st.allow(h.inner)
	if !ok {
		return nil
	}
	limit := h.st.o.MaxValue
	nr := slog.NewRecord(r.Time, r.Level, truncString(r.Message, limit), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		nr.AddAttrs(truncAttr(a, limit))
		return true
	})
	if before > 0 {
		nr.AddAttrs(slog.Int("suppressed_before", before))
	}
	return h.inner.Handle(ctx, nr)
}

// allow takes a token, or counts the record as suppressed and makes sure a
// summary is on its way (to inner, with its attributes). A record that
// gets a token while records are suppressed carries their count instead
// (before), and the summary is called off: a steady flood logs one line
// per Every, not two.
func (s *state) allow(inner slog.Handler) (ok bool, before int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lim.Allow() {
		before, s.supp, s.last = s.supp, 0, nil
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
		return true, before
	}
	s.supp++
	s.last = inner
	if s.timer == nil {
		// Two periods: a flood that goes on takes the next token (within
		// one) and carries the count, so the summary is only for its end.
		s.timer = time.AfterFunc(2*s.o.Every, s.summarize)
	}
	return false, 0
}

func (s *state) summarize() {
	s.mu.Lock()
	n, h := s.supp, s.last
	s.supp, s.last, s.timer = 0, nil, nil
	s.mu.Unlock()
	if n == 0 {
		return
	}
	ctx := context.Background()
	if !h.Enabled(ctx, slog.LevelWarn) {
		return
	}
	r := slog.NewRecord(time.Now(), slog.LevelWarn, fmt.Sprintf("%d more log lines suppressed (rate limit)", n), 0)
	r.AddAttrs(slog.Int("suppressed", n), slog.String("limit", fmt.Sprintf("%d, then 1 per %v", s.o.Burst, s.o.Every)))
	_ = h.Handle(ctx, r)
}

func truncAttrs(as []slog.Attr, limit int) []slog.Attr {
	out := make([]slog.Attr, len(as))
	for i, a := range as {
		out[i] = truncAttr(a, limit)
	}
	return out
}

func truncAttr(a slog.Attr, limit int) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		if len(v.String()) > limit {
			return slog.String(a.Key, truncString(v.String(), limit))
		}
	case slog.KindGroup:
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(truncAttrs(v.Group(), limit)...)}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			if s := x.Error(); len(s) > limit {
				return slog.String(a.Key, truncString(s, limit))
			}
		case json.RawMessage:
			if len(x) > limit {
				return slog.String(a.Key, truncString(string(x), limit))
			}
		case []byte:
			if len(x) > limit {
				return slog.String(a.Key, truncString(string(x), limit))
			}
		case fmt.Stringer:
			if s := x.String(); len(s) > limit {
				return slog.String(a.Key, truncString(s, limit))
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}

// truncString keeps at most limit bytes of s (cut at a rune boundary) and
// says how long s was.
func truncString(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s…[%d bytes]", s[:cut], len(s))
}
