package fileeditor

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ptr[T any](v T) *T { return &v }

func newExec(t testing.TB, opts ...func(*Options)) *Executor {
	t.Helper()
	o := Options{Logger: slog.New(slog.DiscardHandler)}
	for _, f := range opts {
		f(&o)
	}
	e, err := NewExecutor(o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })
	return e
}

func call(t testing.TB, e *Executor, a Action) *tools.Observation {
	t.Helper()
	obs, err := e.Call(context.Background(), a)
	require.NoError(t, err)
	require.NotNil(t, obs)
	return obs
}

// ok runs a and fails the test if the observation is an error.
func ok(t testing.TB, e *Executor, a Action) *tools.Observation {
	t.Helper()
	obs := call(t, e, a)
	require.False(t, obs.IsError, obs.Text())
	return obs
}

// bad runs a and fails the test unless the observation is an error.
func bad(t testing.TB, e *Executor, a Action) string {
	t.Helper()
	obs := call(t, e, a)
	require.True(t, obs.IsError, obs.Text())
	return obs.Text()
}

func writeTemp(t testing.TB, name string, content []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, content, 0o644))
	return p
}

func readString(t testing.TB, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	return string(b)
}

func out(obs *tools.Observation) *Output { return obs.Structured.(*Output) }
