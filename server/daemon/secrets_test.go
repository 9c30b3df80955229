package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLoadSecrets(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(src), mode))
		require.NoError(t, os.Chmod(p, mode))
		return p
	}
	t.Setenv("SANDBOXD_SECRET_FROM_ENV", "e")
	t.Setenv("HOME_LIKE", "never")
	get, err := loadSecrets(write("ok", "# c\n\nA=1\nB=x=y\n", 0o600))
	require.NoError(t, err)
	for name, want := range map[string]string{"A": "1", "B": "x=y", "FROM_ENV": "e"} {
		v, ok := get(name)
		assert.True(t, ok, name)
		assert.Equal(t, want, v, name)
	}
	_, ok := get("HOME_LIKE")
	assert.False(t, ok, "only SANDBOXD_SECRET_ variables are secrets")

	for name, c := range map[string]struct {
		src  string
		mode os.FileMode
		want string
	}{
		"open":  {"A=1\n", 0o644, "readable by others"},
		"shape": {"A\n", 0o600, "shape:1: want NAME=VALUE"},
		"name":  {"1A=x\n", 0o600, `"1A" is not a secret name`},
		"twice": {"A=1\nA=2\n", 0o600, "A is given twice"},
	} {
		_, err := loadSecrets(write(name, c.src, c.mode))
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), c.want, name)
		assert.NotContains(t, err.Error(), "=1", "no value in errors")
	}
}
