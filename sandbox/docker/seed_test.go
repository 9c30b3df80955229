package docker

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

type tarEntry struct {
	hdr  tar.Header
	body string
}

func tarStream(t *testing.T, entries ...tarEntry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		h.Size = int64(len(e.body))
		require.NoError(t, tw.WriteHeader(&h))
		_, err := tw.Write([]byte(e.body))
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return &buf
}

func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var out []tarEntry
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		out = append(out, tarEntry{*h, string(b)})
	}
}

// The engine's archive of /testbed comes out as entries relative to the
// folder, every one the session user's; what could make the session user
// someone else (setuid and setgid files, file capabilities) or reach a
// device is left behind; the folder's own header is returned for its root.
func TestRewriteOwned(t *testing.T) {
	mt := time.Unix(1700000000, 0)
	src := tarStream(t,
		tarEntry{hdr: tar.Header{Name: "testbed/", Typeflag: tar.TypeDir, Mode: 0o2775, ModTime: mt, Uname: "root"}},
		tarEntry{hdr: tar.Header{Name: "testbed/mod.py", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: mt, Uname: "root"}, body: "x = 1\n"},
		tarEntry{hdr: tar.Header{Name: "testbed/pkg/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: mt}},
		tarEntry{hdr: tar.Header{Name: "testbed/pkg/suid", Typeflag: tar.TypeReg, Mode: 0o6755, ModTime: mt,
			PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "\x01", "SCHILY.xattr.user.keep": "k"}}, body: "#!"},
		tarEntry{hdr: tar.Header{Name: "testbed/pkg/hard", Typeflag: tar.TypeLink, Linkname: "testbed/mod.py", ModTime: mt}},
		tarEntry{hdr: tar.Header{Name: "testbed/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd", ModTime: mt}},
		tarEntry{hdr: tar.Header{Name: "testbed/null", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3, ModTime: mt}},
		tarEntry{hdr: tar.Header{Name: "testbed/fifo", Typeflag: tar.TypeFifo, Mode: 0o600, ModTime: mt}},
	)
	var dst bytes.Buffer
	tr := tar.NewReader(src)
	root, err := tr.Next() // copyOwned reads the folder's own entry
	require.NoError(t, err)
	assert.EqualValues(t, 0o2775, root.Mode)
	assert.Equal(t, mt, root.ModTime)
	next, err := tr.Next()
	require.NoError(t, err)
	n, err := rewriteOwned(tr, next, &dst, "testbed", 1000, 1001)
	require.NoError(t, err)
	assert.Equal(t, 6, n)

	got := readTar(t, &dst)
	names := map[string]tarEntry{}
	for _, e := range got {
		names[e.hdr.Name] = e
		assert.Equal(t, 1000, e.hdr.Uid, e.hdr.Name)
		assert.Equal(t, 1001, e.hdr.Gid, e.hdr.Name)
		assert.Empty(t, e.hdr.Uname)
	}
	assert.Len(t, got, 6)
	assert.Equal(t, "x = 1\n", names["mod.py"].body)
	assert.EqualValues(t, 0o644, names["mod.py"].hdr.Mode)
	assert.Contains(t, names, "pkg/")
	suid := names["pkg/suid"]
	assert.EqualValues(t, 0o755, suid.hdr.Mode, "setuid and setgid cleared")
	assert.NotContains(t, suid.hdr.PAXRecords, "SCHILY.xattr.security.capability")
	assert.Equal(t, "k", suid.hdr.PAXRecords["SCHILY.xattr.user.keep"])
	assert.Equal(t, "mod.py", names["pkg/hard"].hdr.Linkname, "hard links relative too")
	assert.Equal(t, "/etc/passwd", names["link"].hdr.Linkname, "symlinks as they are")
	assert.NotContains(t, names, "null", "no device files")
	assert.Contains(t, names, "fifo")

	// An archive with an entry elsewhere is not the engine's archive of
	// the folder.
	rewrite := func(entries ...tarEntry) error {
		tr := tar.NewReader(tarStream(t, entries...))
		first, err := tr.Next()
		require.NoError(t, err)
		_, err = rewriteOwned(tr, first, io.Discard, "testbed", 1, 1)
		return err
	}
	assert.ErrorContains(t, rewrite(tarEntry{hdr: tar.Header{Name: "other/x", Typeflag: tar.TypeReg}}), `entry "other/x" outside testbed`)
	assert.ErrorContains(t, rewrite(tarEntry{hdr: tar.Header{Name: "testbed/h", Typeflag: tar.TypeLink, Linkname: "etc/shadow"}}), "outside testbed")
	assert.ErrorContains(t, rewrite(tarEntry{hdr: tar.Header{Name: "testbed", Typeflag: tar.TypeDir}}), "outside testbed", "the folder's entry only once, first")
	tr = tar.NewReader(bytes.NewReader(append(tarStream(t, tarEntry{hdr: tar.Header{Name: "testbed/a", Typeflag: tar.TypeReg}}).Bytes()[:512], make([]byte, 100)...)))
	first, err := tr.Next()
	require.NoError(t, err)
	_, err = rewriteOwned(tr, first, io.Discard, "testbed", 1, 1)
	assert.Error(t, err, "a truncated archive")
}

func TestNumericUser(t *testing.T) {
	for user, want := range map[string][2]int{"": {0, 0}, "root": {0, 0}, "0": {0, 0}, "0:0": {0, 0}, "1000:1001": {1000, 1001}} {
		uid, gid, ok := numericUser(user)
		assert.True(t, ok, user)
		assert.Equal(t, want, [2]int{uid, gid}, user)
	}
	for _, user := range []string{"agent", "1000", "agent:agent", "1000:agent", "-1:0"} {
		_, _, ok := numericUser(user)
		assert.False(t, ok, user)
	}
}

// An image's USER resolves as the engine resolves it.
func TestLookupUser(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/bash\n# comment\nbroken\nagent:x:1000:1000::/home/agent:/bin/bash\napp:x:1200:50::/app:/bin/sh\n"
	group := "root:x:0:\nstaff:x:50:\ndev:x:2000:app\n"
	for user, want := range map[string][2]int{
		"agent":     {1000, 1000},
		"app":       {1200, 50},
		"1200":      {1200, 50},
		"1234":      {1234, 0}, // a uid without an entry: group 0, as runc does
		"app:dev":   {1200, 2000},
		"agent:77":  {1000, 77},
		"1200:dev":  {1200, 2000},
		"root":      {0, 0},
		"agent:0":   {1000, 0},
		"app:staff": {1200, 50},
	} {
		uid, gid, err := lookupUser(user, passwd, group)
		require.NoError(t, err, user)
		assert.Equal(t, want, [2]int{uid, gid}, user)
	}
	_, _, err := lookupUser("nobody", passwd, group)
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	assert.ErrorContains(t, err, `user: the image's USER "nobody" is not in its /etc/passwd`)
	_, _, err = lookupUser("agent:nogroup", passwd, group)
	assert.ErrorContains(t, err, "is not in its /etc/group")
	_, _, err = lookupUser("agent", "", "")
	assert.ErrorContains(t, err, "is not in its /etc/passwd")
}
