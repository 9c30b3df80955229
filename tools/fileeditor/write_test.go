package fileeditor

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// tempFiles lists leftover temporary files of writeFile in dir.
func tempFiles(t testing.TB, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, ".*.tmp"))
	require.NoError(t, err)
	return m
}

func statOwner(fi os.FileInfo) [2]uint32 {
	st := fi.Sys().(*syscall.Stat_t)
	return [2]uint32{st.Uid, st.Gid}
}

// A rename that fails (injected: as root, permissions cannot make a real one
// fail) must leave the original bytes, mode and no temporary file, and must
// not record an undo step.
func TestFailedWriteKeepsOriginal(t *testing.T) {
	e := newExec(t)
	e.rename = func(string, string) error { return errors.New("injected failure") }
	const orig = "keep\nme\n"
	p := writeTemp(t, "f.txt", []byte(orig))
	require.NoError(t, os.Chmod(p, 0o640))

	cases := []Action{
		{Command: "str_replace", Path: p, OldStr: ptr("keep"), NewStr: ptr("lose")},
		{Command: "insert", Path: p, InsertLine: ptr(1), NewStr: ptr("x")},
	}
	for _, a := range cases {
		msg := bad(t, e, a)
		assert.Equal(t, "Ran into injected failure while trying to write to "+p+". The file was not changed.", msg)
		assert.Equal(t, orig, readString(t, p))
		fi, err := os.Stat(p)
		require.NoError(t, err)
		assert.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
		assert.Empty(t, tempFiles(t, filepath.Dir(p)))
	}
	assert.Contains(t, bad(t, e, Action{Command: "undo_edit", Path: p}), "No edit history")

	t.Run("failed undo keeps its snapshot", func(t *testing.T) {
		e := newExec(t)
		p := writeTemp(t, "f.txt", []byte("a\n"))
		ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("a"), NewStr: ptr("b")})
		e.rename = func(string, string) error { return errors.New("injected failure") }
		assert.Contains(t, bad(t, e, Action{Command: "undo_edit", Path: p}), "injected failure")
		assert.Equal(t, "b\n", readString(t, p))
		e.rename = os.Rename
		ok(t, e, Action{Command: "undo_edit", Path: p})
		assert.Equal(t, "a\n", readString(t, p))
	})
}

// create never replaces anything, even a file that appears between the
// existence check and the write (the final step is an exclusive link).
func TestCreateNeverOverwrites(t *testing.T) {
	e := newExec(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "raced.txt")
	require.NoError(t, os.WriteFile(p, []byte("theirs"), 0o644))
	require.ErrorIs(t, e.writeFile(p, []byte("ours"), nil, true), errExists)
	assert.Equal(t, "theirs", readString(t, p))
	assert.Empty(t, tempFiles(t, dir))
}

// Without write permission on the directory no temporary file can be made;
// a writable file is then rewritten in place. (Root ignores permissions.)
func TestReadOnlyDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("permissions do not stop root")
	}
	e := newExec(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "f.txt")
	require.NoError(t, os.WriteFile(p, []byte("a\n"), 0o644))
	require.NoError(t, os.Chmod(dir, 0o555))
	t.Cleanup(func() { _ = os.Chmod(dir, 0o755) })
	ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("a"), NewStr: ptr("b")})
	assert.Equal(t, "b\n", readString(t, p))
	assert.Contains(t, bad(t, e, Action{Command: "create", Path: filepath.Join(dir, "new"), FileText: ptr("x")}), "permission denied")
}

// Where rename cannot replace the file (a file bind-mounted into a
// container gives EBUSY), the file is rewritten in place.
func TestInPlaceFallback(t *testing.T) {
	for _, errno := range []error{syscall.EBUSY, syscall.EXDEV} {
		t.Run(errno.Error(), func(t *testing.T) {
			e := newExec(t)
			e.rename = func(string, string) error { return &os.LinkError{Op: "rename", Err: errno} }
			p := writeTemp(t, "f.txt", []byte("a\nb\n"))
			require.NoError(t, os.Chmod(p, 0o600))
			ok(t, e, Action{Command: "str_replace", Path: p, OldStr: ptr("b"), NewStr: ptr("c")})
			assert.Equal(t, "a\nc\n", readString(t, p))
			fi, err := os.Stat(p)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
			assert.Empty(t, tempFiles(t, filepath.Dir(p)))
			ok(t, e, Action{Command: "undo_edit", Path: p})
			assert.Equal(t, "a\nb\n", readString(t, p))
		})
	}
}

func TestLongFileName(t *testing.T) {
	e := newExec(t)
	p := filepath.Join(t.TempDir(), strings.Repeat("n", 250))
	ok(t, e, Action{Command: "create", Path: p, FileText: ptr("a\n")})
	ok(t, e, Action{Command: "insert", Path: p, InsertLine: ptr(1), NewStr: ptr("b")})
	assert.Equal(t, "a\nb\n", readString(t, p))
}
