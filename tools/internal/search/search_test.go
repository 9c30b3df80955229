package search

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/tools/internal/walk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRun(t *testing.T) {
	files := []walk.Found{{Path: "old", ModTime: 1}, {Path: "b", ModTime: 2}, {Path: "a", ModTime: 2}}
	found := func(err error) func(context.Context) ([]walk.Found, error) {
		return func(context.Context) ([]walk.Found, error) { return append([]walk.Found(nil), files...), err }
	}
	newestFirst := []walk.Found{{Path: "a", ModTime: 2}, {Path: "b", ModTime: 2}, {Path: "old", ModTime: 1}}

	got, incomplete, err := Run(context.Background(), time.Minute, found(nil))
	require.NoError(t, err)
	assert.False(t, incomplete)
	assert.Equal(t, newestFirst, got)

	// Out of its own time: what was found, marked incomplete.
	got, incomplete, err = Run(context.Background(), time.Minute, found(context.DeadlineExceeded))
	require.NoError(t, err)
	assert.True(t, incomplete)
	assert.Equal(t, newestFirst, got)

	boom := errors.New("boom")
	_, _, err = Run(context.Background(), time.Minute, found(boom))
	require.ErrorIs(t, err, boom)

	// The call's context ended: its error, whatever the search returned.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, _, err = Run(ctx, time.Minute, found(nil))
	require.ErrorIs(t, err, context.Canceled)

	// The budget is the search's context deadline.
	_, _, err = Run(context.Background(), time.Minute, func(ctx context.Context) ([]walk.Found, error) {
		_, ok := ctx.Deadline()
		assert.True(t, ok)
		return nil, nil
	})
	require.NoError(t, err)
}

func TestPaths(t *testing.T) {
	found := []walk.Found{{Path: "a"}, {Path: "b"}, {Path: "c"}}
	for limit, want := range map[int][]string{2: {"a", "b"}, 3: {"a", "b", "c"}, 5: {"a", "b", "c"}} {
		paths, truncated := Paths(found, limit)
		assert.Equal(t, want, paths, limit)
		assert.Equal(t, limit < 3, truncated, limit)
	}
	paths, truncated := Paths(nil, 100)
	assert.NotNil(t, paths, "an empty list, not null, in the output")
	assert.Empty(t, paths)
	assert.False(t, truncated)
}

func TestPathProblem(t *testing.T) {
	assert.Empty(t, PathProblem(nil))
	assert.Equal(t, ": it does not exist", PathProblem(os.ErrNotExist))
	assert.Equal(t, ": permission denied", PathProblem(os.ErrPermission))
	assert.Equal(t, ": boom", PathProblem(errors.New("boom")))
}

func TestPatternProblem(t *testing.T) {
	_, err := walk.CompilePattern("{a", false)
	require.Error(t, err)
	assert.Regexp(t, `^Invalid glob pattern '\{a': '\{' without '\}'`, PatternProblem("Invalid glob pattern", "{a", err))
	assert.Equal(t, "Invalid include pattern 'x': boom", PatternProblem("Invalid include pattern", "x", errors.New("boom")))
}
