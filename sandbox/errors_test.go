package sandbox

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Named renames options wherever a problem names them, in the field and in
// the text, and keeps the order of the problems.
func TestOptionsErrorNamed(t *testing.T) {
	_, rerr := SessionOptions{Image: "img", Limits: Limits{Memory: 128 << 20, Tmpfs: 100 << 20, CPUs: 0.001}}.Resolve(SessionOptions{})
	var oe *OptionsError
	require.ErrorAs(t, rerr, &oe, rerr)
	require.Len(t, oe.Details, len(oe.Problems))
	wire := map[Field]string{"limits.memory": "limits.memory_mb", "limits.tmpfs": "limits.tmp_mb"}
	named := oe.Named(func(f Field) string {
		if n, ok := wire[f]; ok {
			return n
		}
		return string(f)
	})
	assert.Equal(t, []string{
		"limits.cpus: 0.001 is below the minimum of 0.01",
		"limits: /tmp (limits.tmp_mb 100 MiB) = 100 MiB of tmpfs, more than the 80 MiB that limits.memory_mb 128 MiB leaves beside its headroom of 48 MiB (max(48 MiB, a quarter)): " +
			"tmpfs pages are charged to memory and cannot be swapped out, so filling them would get the session OOM-killed; " +
			"raise limits.memory_mb to at least 148 MiB, or lower limits.tmp_mb or limits.disk",
	}, named.Problems)
	assert.Contains(t, oe.Error(), "raise limits.memory to at least 148 MiB, or lower limits.tmpfs or limits.disk", "the package's own names stay")
	require.ErrorIs(t, named, ErrInvalidOptions)

	// An error made from text alone has no details: Named keeps it.
	text := &OptionsError{Problems: []string{"network: the engine has no network \"x\""}}
	assert.Same(t, text, text.Named(func(Field) string { return "renamed" }))
}

// A busy create says when to retry, in whole seconds between 1 s and
// maxRetryAfter, and is never a context error (the API would call it a
// timeout).
func TestBusyError(t *testing.T) {
	for in, want := range map[time.Duration]time.Duration{
		0: time.Second, 300 * time.Millisecond: time.Second, 1500 * time.Millisecond: 2 * time.Second,
		7 * time.Second: 7 * time.Second, time.Hour: maxRetryAfter, -time.Minute: time.Second,
	} {
		err := fmt.Errorf("session x: %w", busy(in, "all %d start slots stayed taken", 4))
		require.ErrorIs(t, err, ErrBusy)
		require.NotErrorIs(t, err, context.DeadlineExceeded)
		d, ok := RetryAfter(err)
		require.True(t, ok)
		assert.Equal(t, want, d, "retry after for %v", in)
		assert.Contains(t, err.Error(), fmt.Sprintf("sandboxd is busy: all 4 start slots stayed taken; retry after %d s", int(want/time.Second)))
	}
	_, ok := RetryAfter(errors.New("other"))
	assert.False(t, ok)
}
