package output

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// smallDisk makes writes to files of dir fail with ENOSPC once the files
// there hold capacity bytes, as on the sandbox's small state tmpfs.
func smallDisk(dir string, capacity int64) func(*os.File, []byte, int64) (int, error) {
	return func(f *os.File, p []byte, off int64) (int, error) {
		var used int64
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				used += fi.Size()
			}
		}
		size := int64(0)
		if fi, err := f.Stat(); err == nil {
			size = fi.Size()
		}
		room := max(capacity-used, 0) + max(size-off, 0) // overwriting takes no room
		if int64(len(p)) <= room {
			return f.WriteAt(p, off)
		}
		n, _ := f.WriteAt(p[:room], off)
		return n, &os.PathError{Op: "write", Path: f.Name(), Err: syscall.ENOSPC}
	}
}

func savedOutputs(t *testing.T, dir string) []string {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, testPrefix+"*.txt"))
	require.NoError(t, err)
	return names
}

// The full outputs of earlier commands must not fill the state directory
// for good: a full disk makes room by dropping the oldest saved outputs, so
// the note of the newest one still names a file holding all of it.
func TestAccumFullDiskDropsOldestOutputs(t *testing.T) {
	dir := t.TempDir()
	const capacity = 5000
	write := smallDisk(dir, capacity)
	run := func(text string) Result {
		a := New(1000, dir, testPrefix)
		a.writeAt = write
		a.Add([]byte(text))
		return a.Finish()
	}
	// Each output is older than the next (distinct modification times).
	age := func(r Result, ago time.Duration) {
		t.Helper()
		require.NotEmpty(t, r.Path)
		then := time.Now().Add(-ago)
		require.NoError(t, os.Chtimes(r.Path, then, then))
	}
	first := run(strings.Repeat("1", 2000))
	age(first, 2*time.Second)
	second := run(strings.Repeat("2", 2000))
	age(second, time.Second)
	third := run(strings.Repeat("3", 2000)) // needs the first one's room
	for i, r := range []Result{first, second, third} {
		require.True(t, r.Truncated, "output %d", i+1)
		require.NotEmpty(t, r.Path, "output %d has its file: %s", i+1, r.Text)
		assert.Contains(t, r.Text, "The complete output has been saved to "+r.Path)
	}
	assert.NoFileExists(t, first.Path, "the oldest output made room")
	for _, r := range []Result{second, third} {
		b, err := os.ReadFile(r.Path)
		require.NoError(t, err)
		assert.Len(t, b, 2000, "saved whole")
	}

	// An output larger than the whole disk keeps its beginning, and says so.
	huge := run(strings.Repeat("4", 8000))
	require.True(t, huge.Truncated)
	require.NotEmpty(t, huge.Path, huge.Text)
	assert.Equal(t, []string{huge.Path}, savedOutputs(t, dir), "every older output made room")
	b, err := os.ReadFile(huge.Path)
	require.NoError(t, err)
	assert.Len(t, b, capacity)
	assert.Contains(t, huge.Text, "The first 5000 bytes of the output have been saved to "+huge.Path+" (the disk is full)")
}

// A file that cannot be written for another reason is removed, not left
// half-written, and the note names no file.
func TestAccumWriteErrorRemovesFile(t *testing.T) {
	dir := t.TempDir()
	a := New(1000, dir, testPrefix)
	a.writeAt = func(f *os.File, p []byte, off int64) (int, error) {
		n, _ := f.WriteAt(p[:len(p)/2], off)
		return n, errors.New("input/output error")
	}
	a.Add([]byte(strings.Repeat("x", 5000)))
	r := a.Finish()
	assert.True(t, r.Truncated)
	assert.Empty(t, r.Path)
	assert.Contains(t, r.Text, plainNotice)
	assert.Empty(t, savedOutputs(t, dir), "no half-written file left")
}
