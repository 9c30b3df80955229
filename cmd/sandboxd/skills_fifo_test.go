//go:build unix

package main

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/server/daemon"
	"github.com/sandboxd/sandboxd/skills"
)

// TestSkillsListFIFO (K8): `skills list` over a root whose SKILL.md is a
// FIFO lists the other skills and the FIFO as skipped, instead of blocking
// for ever in open(2).
func TestSkillsListFIFO(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "fifo")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	fifo := filepath.Join(dir, skills.SkillFile)
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	t.Cleanup(func() { // releases a reader blocked in open (the bug)
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})
	type result struct {
		code     int
		out, err string
	}
	done := make(chan result, 1)
	go func() {
		code, out, errOut := runCLI("skills", "list", "--skills-dir", root)
		done <- result{code, out, errOut}
	}()
	select {
	case r := <-done:
		require.Equal(t, exitOK, r.code, r.err)
		assert.Contains(t, r.out, "2 skills loaded, 1 skipped\n")
		assert.Regexp(t, `(?m)^  fifo \(\S+\): SKILL.md: not a regular file \(a FIFO\)$`, r.out)
	case <-time.After(time.Minute):
		t.Fatal("skills list still blocked after a minute on a FIFO named SKILL.md")
	}
}

// blockingFS is a file system whose every open blocks until release is
// closed: a root on a hung mount.
type blockingFS struct{ release chan struct{} }

func (b blockingFS) Open(string) (fs.File, error) {
	<-b.release
	return nil, fs.ErrNotExist
}

// TestLoadLibraryCancelled: SIGTERM (the command's context) ends a load
// that is stuck in a read, with the context's error; a load that is not
// stuck returns the library.
func TestLoadLibraryCancelled(t *testing.T) {
	stuck := blockingFS{release: make(chan struct{})}
	t.Cleanup(func() { close(stuck.release) })
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	lib, err := daemon.LoadLibrary(ctx, skills.Root{Name: "stuck", FS: stuck})
	assert.Nil(t, lib)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorContains(t, err, "loading the skill roots")

	ok := fstest.MapFS{"a/SKILL.md": {Data: []byte("---\nname: a\ndescription: A.\n---\nbody\n")}}
	lib, err = daemon.LoadLibrary(context.Background(), skills.Root{Name: "mem", FS: ok})
	require.NoError(t, err)
	_, found := lib.Get("a")
	assert.True(t, found)
}
