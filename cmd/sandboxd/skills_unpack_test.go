package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/kubernetes/skilltar"
)

// skills-unpack unpacks the archive the Kubernetes runtime makes (the init
// container of a Pod with skills), read-only, and refuses relative paths
// and a broken archive.
func TestSkillsUnpack(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "hello", "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello", "SKILL.md"), []byte("---\nname: hello\n---\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(root, "hello", "scripts", "hi.sh"), []byte("echo hi\n"), 0o755))
	archive := filepath.Join(t.TempDir(), "skills.tar.gz")
	f, err := os.Create(archive)
	require.NoError(t, err)
	_, err = skilltar.Pack(f, []sandbox.SkillMount{{Path: "hello", Source: filepath.Join(root, "hello")}})
	require.NoError(t, err)
	require.NoError(t, f.Close())

	dst := t.TempDir()
	t.Cleanup(func() {
		_ = filepath.Walk(dst, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o755) })
	})
	out, err := exec.Command(binPath, "skills-unpack", archive, dst).CombinedOutput()
	require.NoError(t, err, string(out))
	fi, err := os.Stat(filepath.Join(dst, "hello", "scripts", "hi.sh"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o555), fi.Mode().Perm())

	out, err = exec.Command(binPath, "skills-unpack", "rel/archive", dst).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "want two absolute paths")

	bad := filepath.Join(t.TempDir(), "bad.tar.gz")
	require.NoError(t, os.WriteFile(bad, []byte("not gzip"), 0o644))
	out, err = exec.Command(binPath, "skills-unpack", bad, t.TempDir()).CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "skills archive")
}
