package tools

import (
	"context"
	"errors"
)

// StreamFunc receives output of a running call as it is produced. It must
// not block for long: it runs on the executor's reading goroutine.
type StreamFunc func(chunk []byte)

type streamKey struct{}

// WithStream returns a context whose tool calls report output to f.
func WithStream(ctx context.Context, f StreamFunc) context.Context {
	return context.WithValue(ctx, streamKey{}, f)
}

// StreamFrom returns the stream sink of ctx, or a no-op one.
func StreamFrom(ctx context.Context) StreamFunc {
	if f, ok := ctx.Value(streamKey{}).(StreamFunc); ok && f != nil {
		return f
	}
	return func([]byte) {}
}

// Watcher is an executor whose output can be followed live, whoever calls
// it and whether or not a call streams: the terminal's screen. fn gets the
// bytes as the executor sees them (escape sequences included), on the
// executor's reading goroutine, so it must not block; once stop has
// returned, fn is not called again.
type Watcher interface {
	Watch(fn StreamFunc) (stop func())
}

// ErrNotWatchable: Toolset.Watch named a tool whose executor is not a
// Watcher.
var ErrNotWatchable = errors.New("tool cannot be followed")
