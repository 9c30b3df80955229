package daemon

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two daemons of one scope refuse each other; another scope, or the same
// one after the first let go, is free.
func TestScopeLock(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("DOCKER_HOST", "unix:///run/test-engine.sock")
	a := Config{Backend: BackendDocker, Labels: KeyValues{"team": "eval"}}

	first, err := lockScope(a, "sandboxd pid 1 (first)")
	require.NoError(t, err)
	_, err = lockScope(a, "sandboxd pid 2 (second)")
	require.ErrorIs(t, err, ErrScopeInUse)
	assert.Contains(t, err.Error(), "held by sandboxd pid 1 (first)")
	assert.Contains(t, err.Error(), "labels team=eval on unix:///run/test-engine.sock")
	assert.Contains(t, err.Error(), "--label KEY=VALUE")

	other, err := lockScope(Config{Backend: BackendDocker, Labels: KeyValues{"team": "rl"}}, "third")
	require.NoError(t, err, "other labels are another scope")
	other.release()
	t.Setenv("DOCKER_HOST", "tcp://10.0.0.2:2376")
	elsewhere, err := lockScope(a, "fourth")
	require.NoError(t, err, "the same labels on another engine are another scope")
	elsewhere.release()
	t.Setenv("DOCKER_HOST", "unix:///run/test-engine.sock")

	first.release()
	first.release() // idempotent
	again, err := lockScope(a, "fifth")
	require.NoError(t, err, "free once the first let go")
	again.release()
}

// A lock folder others can write (a shared temp folder's planted one) is
// not used.
func TestScopeLockFolderMustBePrivate(t *testing.T) {
	base := t.TempDir()
	t.Setenv("XDG_RUNTIME_DIR", base)
	require.NoError(t, os.MkdirAll(filepath.Join(base, "sandboxd", "scopes"), 0o700))
	require.NoError(t, os.Chmod(filepath.Join(base, "sandboxd", "scopes"), 0o777))
	_, err := lockScope(Config{Backend: BackendDocker}, "x")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "only it can write")
}

// A New that fails after taking the lock (here: no engine) gives it back,
// so the next try is not refused as a second daemon (New's result is nil
// by then: the lock is released through its own name).
func TestNewReleasesTheScopeLockWhenItFails(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(t.TempDir(), "no-engine.sock"))
	c := Defaults()
	c.StateDir, c.Token = t.TempDir(), "test-token-0123456789abcdef0123456789"
	c.Logger = slog.New(slog.DiscardHandler)
	for i := range 2 {
		d, err := New(context.Background(), c)
		require.Error(t, err, "try %d", i)
		assert.Nil(t, d)
		assert.NotErrorIs(t, err, ErrScopeInUse, "try %d: %v", i, err)
	}
}
