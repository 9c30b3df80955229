package docker

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// skillRoot is a skill root holding cat/okskill (with SKILL.md) and a host
// folder outside it holding a marker.
func skillRoot(t *testing.T) (root, host string) {
	t.Helper()
	base := t.TempDir()
	root, host = filepath.Join(base, "root"), filepath.Join(base, "host")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "cat", "okskill"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "cat", "okskill", "SKILL.md"), []byte("x"), 0o644))
	require.NoError(t, os.MkdirAll(host, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(host, "secret.txt"), []byte("HOST-ONLY"), 0o644))
	return root, host
}

// swap replaces the folder p by a symbolic link to target.
func swap(t *testing.T, p, target string) {
	t.Helper()
	require.NoError(t, os.Rename(p, p+".old"))
	require.NoError(t, os.Symlink(target, p))
}

// TestOpenSkillDir (K17): a skill folder is opened under its root only
// through real directories; a component swapped for a link (the folder or
// a folder above it, to a host folder or to a folder inside the root) or
// for a file is refused with the skill's name and the component, and no
// host path.
func TestOpenSkillDir(t *testing.T) {
	mountOf := func(root string) sandbox.SkillMount {
		return sandbox.SkillMount{Path: "cat/okskill", Source: filepath.Join(root, "cat", "okskill")}
	}
	t.Run("real folders", func(t *testing.T) {
		root, _ := skillRoot(t)
		d, err := openSkillDir(mountOf(root))
		require.NoError(t, err)
		defer d.close()
		assert.Equal(t, root, d.root)
		require.NoError(t, d.check())
		_, err = d.dir.Stat("SKILL.md")
		assert.NoError(t, err, "the open folder is the skill's")
	})
	for _, tc := range []struct {
		name, swapped, want string
		toHost              bool
	}{
		{"folder to a host folder", "cat/okskill", "cat/okskill is a symbolic link", true},
		{"parent to a host folder", "cat", "cat is a symbolic link", true},
		{"folder to a folder in the root", "cat/okskill", "cat/okskill is a symbolic link", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, host := skillRoot(t)
			target := host
			if !tc.toHost {
				require.NoError(t, os.MkdirAll(filepath.Join(root, "other", "okskill"), 0o755))
				target = filepath.Join(root, "other")
				if tc.swapped == "cat/okskill" {
					target = filepath.Join(root, "other", "okskill")
				}
			}
			swap(t, filepath.Join(root, filepath.FromSlash(tc.swapped)), target)
			if tc.swapped == "cat" && tc.toHost {
				require.NoError(t, os.MkdirAll(filepath.Join(host, "okskill"), 0o755))
			}
			_, err := openSkillDir(mountOf(root))
			require.Error(t, err)
			require.ErrorIs(t, err, sandbox.ErrInvalidOptions, "the client can drop the skill")
			require.ErrorContains(t, err, "skill cat/okskill cannot be mounted: "+tc.want)
			assert.NotContains(t, err.Error(), root, "no host path for the client")
		})
	}
	t.Run("a file", func(t *testing.T) {
		root, _ := skillRoot(t)
		p := filepath.Join(root, "cat", "okskill")
		require.NoError(t, os.RemoveAll(p))
		require.NoError(t, os.WriteFile(p, nil, 0o644))
		_, err := openSkillDir(mountOf(root))
		assert.ErrorContains(t, err, "cat/okskill is a file, not a directory")
	})
	t.Run("gone", func(t *testing.T) {
		root, _ := skillRoot(t)
		require.NoError(t, os.RemoveAll(filepath.Join(root, "cat")))
		_, err := openSkillDir(mountOf(root))
		require.ErrorContains(t, err, "skill cat/okskill cannot be mounted: cat: ")
		require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	})
	t.Run("source not under its path", func(t *testing.T) {
		_, err := openSkillDir(sandbox.SkillMount{Path: "cat/okskill", Source: "/srv/elsewhere"})
		assert.ErrorContains(t, err, "is not <skill root>/cat/okskill")
	})
}

// TestSkillDirCheck (K17): a folder opened and then swapped (for a link, or
// for another real folder) fails check, which re-reads the path the engine
// resolves when the container starts; swapped back, it passes again.
func TestSkillDirCheck(t *testing.T) {
	for _, tc := range []struct{ name, swapped, want string }{
		{"folder to a link", "cat/okskill", "cat/okskill is a symbolic link under its skill root"},
		{"parent to a link", "cat", "cat is a symbolic link under its skill root"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, host := skillRoot(t)
			require.NoError(t, os.MkdirAll(filepath.Join(host, "okskill"), 0o755))
			d, err := openSkillDir(sandbox.SkillMount{Path: "cat/okskill", Source: filepath.Join(root, "cat", "okskill")})
			require.NoError(t, err)
			defer d.close()
			p := filepath.Join(root, filepath.FromSlash(tc.swapped))
			swap(t, p, host)
			require.ErrorContains(t, skillDirs{d}.check(), tc.want)
			require.NoError(t, os.Remove(p))
			require.NoError(t, os.Rename(p+".old", p))
			assert.NoError(t, skillDirs{d}.check())
		})
	}
	t.Run("another real folder", func(t *testing.T) {
		root, _ := skillRoot(t)
		d, err := openSkillDir(sandbox.SkillMount{Path: "cat/okskill", Source: filepath.Join(root, "cat", "okskill")})
		require.NoError(t, err)
		defer d.close()
		p := filepath.Join(root, "cat", "okskill")
		require.NoError(t, os.Rename(p, p+".old"))
		require.NoError(t, os.Mkdir(p, 0o755))
		assert.ErrorContains(t, d.check(), "cat/okskill was replaced while the sandbox was made")
	})
}
