package kubernetes

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"
)

// klog is the log of client-go and of Kubernetes' stream libraries. It
// wrote raw lines to stderr, e.g. each time an exec stream was cut
// ("Copying stdin failed", "Websocket Ping failed" from client-go's own
// goroutines), bypassing the daemon's structured, levelled log. It is
// routed through slog when this package is initialized (klog's logger may
// only be set while nothing logs: an init is the one safe moment), to a
// handler that forwards each record to klogSink: New points that at its
// Config.Logger (the last runtime made wins; until then slog.Default()).
var klogSink atomic.Pointer[slog.Logger]

// klogLimit bounds klog's warnings (decision 0048).
var klogLimit = &limiter{now: time.Now, every: time.Minute, seen: map[string]time.Time{}}

func init() {
	klog.SetSlogLogger(slog.New(klogHandler{}))
}

// limiter lets a message through at its level once per period; its
// repeats within it go at debug level. Every cut exec stream makes
// client-go log the same four lines ("Copying stdin failed", ...):
// the first say what happens, the thousandth adds nothing.
type limiter struct {
	now   func() time.Time
	every time.Duration
	mu    sync.Mutex
	seen  map[string]time.Time // message → when it last went through
}

// maxSeen bounds limiter.seen: past it the map starts again.
const maxSeen = 256

// reset forgets every message (tests).
func (l *limiter) reset() {
	l.mu.Lock()
	clear(l.seen)
	l.mu.Unlock()
}

// pass says whether msg goes through at its level now.
func (l *limiter) pass(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if last, ok := l.seen[msg]; ok && now.Sub(last) < l.every {
		return false
	}
	if len(l.seen) >= maxSeen {
		clear(l.seen)
	}
	l.seen[msg] = now
	return true
}

// routeKlog sends klog's records to log, with component=client-go.
func routeKlog(log *slog.Logger) { klogSink.Store(log.With("component", "client-go")) }

// klogHandler forwards klog's records to klogSink's handler, one level
// lower: klog's errors are client-go's complaints about streams that ended
// (the error that matters reaches the runtime as a return value, and is
// logged or answered there), so they are warnings; its info lines
// (reflectors starting, and the like) are debug. A message above debug
// goes at its level once a minute (klogLimit), its repeats at debug.
type klogHandler struct {
	ops []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, in order
}

func (k klogHandler) sink() slog.Handler {
	l := klogSink.Load()
	if l == nil {
		l = slog.Default().With("component", "client-go")
	}
	h := l.Handler()
	for _, op := range k.ops {
		h = op(h)
	}
	return h
}

func demote(l slog.Level) slog.Level {
	switch {
	case l >= slog.LevelError:
		return slog.LevelWarn
	case l >= slog.LevelWarn:
		return l
	}
	return l - (slog.LevelInfo - slog.LevelDebug)
}

func (k klogHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return k.sink().Enabled(ctx, demote(l))
}

func (k klogHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	if r.Level > slog.LevelDebug && !klogLimit.pass(r.Message) {
		r.Level = slog.LevelDebug
	}
	h := k.sink()
	if !h.Enabled(ctx, r.Level) {
		return nil
	}
	return h.Handle(ctx, r)
}

func (k klogHandler) with(op func(slog.Handler) slog.Handler) klogHandler {
	return klogHandler{ops: append(append([]func(slog.Handler) slog.Handler{}, k.ops...), op)}
}

func (k klogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return k.with(func(h slog.Handler) slog.Handler { return h.WithAttrs(as) })
}

func (k klogHandler) WithGroup(name string) slog.Handler {
	return k.with(func(h slog.Handler) slog.Handler { return h.WithGroup(name) })
}
