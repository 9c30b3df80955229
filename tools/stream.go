package tools

import "context"

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
