package skills

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// builtinDirs are the folders of this package's directory that hold a
// SKILL.md (testdata aside): the built-in skills.
func builtinDirs(t *testing.T) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "testdata" {
			return filepath.SkipDir
		}
		if d.Name() == SkillFile {
			dirs = append(dirs, filepath.ToSlash(filepath.Dir(p)))
		}
		return nil
	})
	require.NoError(t, err)
	return dirs
}

// TestBuiltinEmbeddedAndValid: every skill folder under skills/ is embedded
// whole, passes Validate, and loads without a warning.
func TestBuiltinEmbeddedAndValid(t *testing.T) {
	dirs := builtinDirs(t)
	require.NotEmpty(t, dirs)
	for _, dir := range dirs {
		t.Run(dir, func(t *testing.T) {
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() {
					return err
				}
				want, err := os.ReadFile(p)
				require.NoError(t, err)
				got, err := fs.ReadFile(Builtin(), filepath.ToSlash(p))
				require.NoError(t, err, "%s is not embedded: add its folder to the go:embed line in builtin.go", p)
				assert.Equal(t, want, got, p)
				return nil
			})
			require.NoError(t, err)
			assert.Empty(t, problemStrings(Validate(dir)))
		})
	}
	skills, skipped := LoadFS(Builtin(), RootBuiltin)
	assert.Empty(t, skipped)
	assert.Equal(t, dirs, paths(skills))
	for _, s := range skills {
		assert.Empty(t, s.Warnings, s.Path)
		assert.Equal(t, RootBuiltin, s.Root)
		assert.Empty(t, s.Dir)
		require.NotNil(t, s.Exec, "%s: built-in skills are tools", s.Path)
		assert.True(t, s.ReturnsJSON, s.Path)
		assert.Equal(t, "scripts/"+strings.ReplaceAll(s.Path, "-", "_")+".sh", s.Exec.Entry)
	}
}

// TestExtractBuiltin: a content-addressed, read-only copy, made once,
// repaired when changed, safe to make concurrently.
func TestExtractBuiltin(t *testing.T) {
	base := t.TempDir()
	t.Cleanup(func() { _ = removeTree(base) })
	dir, err := ExtractBuiltin(base)
	require.NoError(t, err)
	assert.Equal(t, base, filepath.Dir(dir))
	assert.Len(t, filepath.Base(dir), 16)

	modes := map[string]fs.FileMode{}
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		require.NoError(t, err)
		rel, _ := filepath.Rel(dir, p)
		modes[filepath.ToSlash(rel)] = fi.Mode()
		return nil
	}))
	assert.Equal(t, fs.ModeDir|0o555, modes["."])
	assert.Equal(t, fs.ModeDir|0o555, modes["run-tests"])
	assert.Equal(t, fs.ModeDir|0o555, modes["run-tests/scripts"])
	assert.Equal(t, fs.FileMode(0o444), modes["run-tests/SKILL.md"])
	assert.Equal(t, fs.FileMode(0o555), modes["run-tests/scripts/run_tests.sh"])
	assert.Equal(t, fs.FileMode(0o555), modes["repo-summary/scripts/repo_summary.sh"])

	// Loaded from the copy, as the daemon mounts it.
	lib := NewLibrary(BuiltinRoot(dir))
	s, ok := lib.Get("run-tests")
	require.True(t, ok)
	assert.Equal(t, filepath.Join(dir, "run-tests"), s.Dir)
	skills, skipped := Load(dir, RootBuiltin)
	assert.Empty(t, skipped)
	assert.Len(t, skills, 2)

	// Again: the same folder, untouched.
	again, err := ExtractBuiltin(base)
	require.NoError(t, err)
	assert.Equal(t, dir, again)

	// Changed by hand: replaced.
	script := filepath.Join(dir, "run-tests", "scripts", "run_tests.sh")
	require.NoError(t, os.Chmod(filepath.Dir(script), 0o755))
	require.NoError(t, os.Chmod(script, 0o755))
	require.NoError(t, os.WriteFile(script, []byte("#!/bin/sh\necho tampered\n"), 0o755))
	again, err = ExtractBuiltin(base)
	require.NoError(t, err)
	assert.Equal(t, dir, again)
	want, err := fs.ReadFile(Builtin(), "run-tests/scripts/run_tests.sh")
	require.NoError(t, err)
	got, err := os.ReadFile(script)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary folder is left behind")
}

func TestExtractBuiltinConcurrent(t *testing.T) {
	base := t.TempDir()
	t.Cleanup(func() { _ = removeTree(base) })
	const n = 6
	var wg sync.WaitGroup
	dirs := make([]string, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { dirs[i], errs[i] = ExtractBuiltin(base) })
	}
	wg.Wait()
	for i := range n {
		require.NoError(t, errs[i])
		assert.Equal(t, dirs[0], dirs[i])
	}
	entries, err := os.ReadDir(base)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary folder is left behind")
	files, _, err := readTree(Builtin())
	require.NoError(t, err)
	assert.True(t, complete(dirs[0], files))
}
