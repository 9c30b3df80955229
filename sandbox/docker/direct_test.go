//go:build linux

package docker

import (
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

func directRuntime(t *testing.T, local bool) *Runtime {
	t.Helper()
	r := &Runtime{opts: Options{DirectDir: filepath.Join(t.TempDir(), "direct")}}
	r.setupDirect(local)
	return r
}

// A socket path far beyond the 107 bytes of a socket address still binds
// (through the folder's descriptor); the socket is 0666 in a 0711 folder
// below 0700 ones, and Close unlinks it.
func TestListenDirectLongPath(t *testing.T) {
	deep := t.TempDir()
	for len(deep) < 200 {
		deep = filepath.Join(deep, strings.Repeat("d", 40))
	}
	r := &Runtime{opts: Options{DirectDir: deep}}
	r.setupDirect(true)
	on, why := r.DirectOn()
	require.True(t, on, "%v", why)
	id := "0b3f7f8e-2d5c-4c4e-9a53-5b7d1c2e9f00"
	mounts, err := r.directMount(id)
	require.NoError(t, err)
	require.Len(t, mounts, 1)
	dir := r.DirectFolder(id)
	assert.Equal(t, dir, mounts[0].Source)
	assert.Equal(t, sandbox.DirectDir, mounts[0].Target)
	assert.True(t, mounts[0].ReadOnly)

	ln, path, err := r.ListenDirect(id)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(path, sandbox.DirectDir+"/d-"), path)
	assert.LessOrEqual(t, len(path), 107)
	name := filepath.Base(path)
	fi, err := os.Lstat(filepath.Join(dir, name))
	require.NoError(t, err, "the socket is in the session's folder")
	assert.Equal(t, fs.ModeSocket, fi.Mode().Type())
	assert.Equal(t, fs.FileMode(0o666), fi.Mode().Perm())
	di, err := os.Lstat(dir)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o711), di.Mode().Perm())
	for _, p := range []string{filepath.Dir(dir), deep} {
		pi, err := os.Lstat(p)
		require.NoError(t, err)
		assert.Equal(t, fs.FileMode(0o700), pi.Mode().Perm(), p)
	}

	// It accepts (dialled through the same descriptor trick's path: the
	// host path is too long to dial).
	f, err := os.Open(dir)
	require.NoError(t, err)
	defer f.Close()
	c, err := net.Dial("unix", fmt.Sprintf("/proc/self/fd/%d/%s", f.Fd(), name))
	require.NoError(t, err)
	nc, err := ln.Accept()
	require.NoError(t, err)
	_ = nc.Close()
	_ = c.Close()

	require.NoError(t, ln.Close())
	require.NoError(t, ln.Close(), "idempotent")
	_, err = os.Lstat(filepath.Join(dir, name))
	require.ErrorIs(t, err, fs.ErrNotExist, "unlinked at Close")

	res, err := r.listDirect()
	require.NoError(t, err)
	require.Len(t, res, 1)
	assert.Equal(t, sandbox.KindDirect, res[0].Kind)
	assert.Equal(t, id, res[0].SessionID)
	require.NoError(t, r.removeDirect(id))
	_, err = os.Lstat(dir)
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.NoError(t, r.removeDirect(id), "removing what is gone is no error")
}

func TestDirectOffAndRefusals(t *testing.T) {
	remote := directRuntime(t, false)
	on, why := remote.DirectOn()
	assert.False(t, on)
	require.ErrorContains(t, why, "not on a local unix socket")
	m, err := remote.directMount("s1")
	require.NoError(t, err)
	assert.Empty(t, m, "no folder, no mount")
	_, _, err = remote.ListenDirect("s1")
	require.ErrorIs(t, err, sandbox.ErrNoDirect)
	assert.NotEmpty(t, remote.DirectFolder("s1"), "folders of earlier runs are still found")

	off := &Runtime{opts: Options{DirectDir: filepath.Join(t.TempDir(), "d"), NoDirect: true}}
	off.setupDirect(true)
	on, _ = off.DirectOn()
	assert.False(t, on)

	none := &Runtime{}
	none.setupDirect(true)
	on, _ = none.DirectOn()
	assert.False(t, on)
	assert.Empty(t, none.DirectFolder("s1"))
	res, err := none.listDirect()
	require.NoError(t, err)
	assert.Empty(t, res)

	r := directRuntime(t, true)
	for _, id := range []string{"", ".", "..", "a/b", "../x", `a\b`} {
		assert.Empty(t, r.DirectFolder(id), id)
		_, err := r.directMount(id)
		require.Error(t, err, id)
		_, _, err = r.ListenDirect(id)
		require.ErrorIs(t, err, sandbox.ErrNoDirect, id)
	}
	_, _, err = r.ListenDirect("made-without-one")
	require.ErrorIs(t, err, sandbox.ErrNoDirect, "a sandbox made without a folder")

	// A symlink where the session's folder should be is not followed.
	target := t.TempDir()
	require.NoError(t, os.Symlink(target, r.DirectFolder("linked")))
	_, _, err = r.ListenDirect("linked")
	require.Error(t, err)
	ents, err := os.ReadDir(target)
	require.NoError(t, err)
	assert.Empty(t, ents, "nothing made through the symlink")
}

// The folder above the sessions' is made 0700 even when it existed wider,
// and refused when it is not a directory.
func TestDirectFolderIsPrivate(t *testing.T) {
	base := filepath.Join(t.TempDir(), "direct")
	require.NoError(t, os.MkdirAll(base, 0o755))
	require.NoError(t, os.Chmod(base, 0o755))
	r := &Runtime{opts: Options{DirectDir: base}}
	r.setupDirect(true)
	on, why := r.DirectOn()
	require.True(t, on, "%v", why)
	fi, err := os.Lstat(base)
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o700), fi.Mode().Perm())

	file := filepath.Join(t.TempDir(), "file")
	require.NoError(t, os.WriteFile(file, nil, 0o600))
	r = &Runtime{opts: Options{DirectDir: file}}
	r.setupDirect(true)
	on, _ = r.DirectOn()
	assert.False(t, on)
}
