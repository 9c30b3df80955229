package fileeditor

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBatchRollsBackAfterFailedWrite: the third write of a batch fails;
// the two made before it are undone (a delete, a create in new folders).
func TestBatchRollsBackAfterFailedWrite(t *testing.T) {
	e := newExec(t)
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a.txt"), filepath.Join(dir, "b.txt"), filepath.Join(dir, "new/deep/c.txt")
	require.NoError(t, os.WriteFile(a, []byte("alpha\n"), 0o640))
	require.NoError(t, os.WriteFile(b, []byte("beta\n"), 0o604))
	renames := 0
	e.rename = func(o, n string) error {
		if renames++; renames == 1 { // a's write, after b's removal and c's create (a link)
			return &os.LinkError{Op: "rename", Old: o, New: n, Err: syscall.EIO}
		}
		return os.Rename(o, n)
	}
	err := e.Batch(context.Background(), []string{a, b, c}, func(fs *BatchFiles) ([]BatchWrite, error) {
		fa, err := fs.Read(a)
		require.NoError(t, err)
		require.Equal(t, "alpha\n", fa.Text)
		return []BatchWrite{{Path: b, Delete: true}, {Path: c, Text: "gamma\n"}, {Path: a, Text: "ALPHA\n"}}, nil
	})
	var be *BatchError
	require.ErrorAs(t, err, &be)
	require.Contains(t, be.Msg, "put back")
	got, err := os.ReadFile(a)
	require.NoError(t, err)
	require.Equal(t, "alpha\n", string(got))
	got, err = os.ReadFile(b)
	require.NoError(t, err)
	require.Equal(t, "beta\n", string(got))
	fi, err := os.Stat(b)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o604), fi.Mode().Perm(), "a deleted file comes back with its mode")
	require.NoDirExists(t, filepath.Join(dir, "new"))
	// Nothing went into the undo history.
	obs := call(t, e, Action{Command: "undo_edit", Path: a})
	require.True(t, obs.IsError)
}

func TestBatchRefusesUnnamedAndRelativePaths(t *testing.T) {
	e := newExec(t)
	dir := t.TempDir()
	err := e.Batch(context.Background(), []string{"rel.txt"}, func(*BatchFiles) ([]BatchWrite, error) { return nil, nil })
	require.ErrorContains(t, err, "not an absolute, clean path")
	err = e.Batch(context.Background(), []string{filepath.Join(dir, "x")}, func(*BatchFiles) ([]BatchWrite, error) {
		return []BatchWrite{{Path: filepath.Join(dir, "y"), Text: "q"}}, nil
	})
	require.ErrorContains(t, err, "was not named")
	require.NoFileExists(t, filepath.Join(dir, "y"))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "d"), 0o755))
	err = e.Batch(context.Background(), []string{filepath.Join(dir, "d")}, func(*BatchFiles) ([]BatchWrite, error) { return nil, nil })
	require.ErrorContains(t, err, "is a directory")
}
