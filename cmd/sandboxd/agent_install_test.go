package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// agent-install copies the binary itself, executable, to its one argument
// (the init container of a Kubernetes Pod), and refuses a relative path.
func TestAgentInstallCopiesItself(t *testing.T) {
	t.Parallel()
	dest := filepath.Join(t.TempDir(), "sandboxd")
	out, err := exec.Command(binPath, "agent-install", dest).CombinedOutput()
	require.NoError(t, err, string(out))
	want, err := os.ReadFile(binPath)
	require.NoError(t, err)
	got, err := os.ReadFile(dest)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "the copy differs")
	fi, err := os.Stat(dest)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o555), fi.Mode().Perm())
	entries, err := os.ReadDir(filepath.Dir(dest))
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file left")

	out, err = exec.Command(binPath, "agent-install", "relative/path").CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "want one absolute DEST path")
}
