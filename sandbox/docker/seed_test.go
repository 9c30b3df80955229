package docker

import (
	"archive/tar"
	"bytes"
	"errors"
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
		if errors.Is(err, io.EOF) {
			return out
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		out = append(out, tarEntry{*h, string(b)})
	}
}

// ownAll reads an engine archive of base as copyOwned does: the folder's
// own entry, then every entry nextOwned keeps, written with writeEntries
// under prefix.
func ownAll(t *testing.T, src io.Reader, base, prefix string) (root *tar.Header, out []tarEntry, err error) {
	t.Helper()
	tr := tar.NewReader(src)
	if root, err = tr.Next(); err != nil {
		return nil, nil, err
	}
	var kept []seedEntry
	for {
		hdr, err := nextOwned(tr, base, 1000, 1001)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, err
		}
		body, err := io.ReadAll(tr)
		require.NoError(t, err)
		kept = append(kept, seedEntry{hdr, body})
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	require.NoError(t, writeEntries(tw, kept, prefix))
	require.NoError(t, tw.Close())
	return root, readTar(t, &buf), nil
}

// The engine's archive of /testbed comes out as entries relative to the
// folder (or under the helper's mount of its volume), every one the
// session user's; what could make the session user someone else (setuid
// and setgid files, file capabilities) or reach a device is left behind.
func TestOwnEntries(t *testing.T) {
	mt := time.Unix(1700000000, 0)
	src := func() io.Reader {
		return tarStream(t,
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
	}
	root, got, err := ownAll(t, src(), "testbed", "")
	require.NoError(t, err)
	assert.EqualValues(t, 0o2775, root.Mode, "the folder's own entry, for its root")
	assert.Equal(t, mt, root.ModTime)
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

	// Into the helper: under the mount of the volume, hard links too.
	_, got, err = ownAll(t, src(), "testbed", ".sandboxd-seed/2/")
	require.NoError(t, err)
	names = map[string]tarEntry{}
	for _, e := range got {
		names[e.hdr.Name] = e
	}
	assert.Contains(t, names, ".sandboxd-seed/2/pkg/")
	assert.Equal(t, ".sandboxd-seed/2/mod.py", names[".sandboxd-seed/2/pkg/hard"].hdr.Linkname)
	assert.Equal(t, "/etc/passwd", names[".sandboxd-seed/2/link"].hdr.Linkname)

	// An archive with an entry elsewhere is not the engine's archive of
	// the folder.
	bad := func(entries ...tarEntry) error {
		_, _, err := ownAll(t, tarStream(t, append([]tarEntry{{hdr: tar.Header{Name: "testbed/", Typeflag: tar.TypeDir}}}, entries...)...), "testbed", "")
		return err
	}
	require.ErrorContains(t, bad(tarEntry{hdr: tar.Header{Name: "other/x", Typeflag: tar.TypeReg}}), `entry "other/x" outside testbed`)
	require.ErrorContains(t, bad(tarEntry{hdr: tar.Header{Name: "testbed/h", Typeflag: tar.TypeLink, Linkname: "etc/shadow"}}), "outside testbed")
	require.ErrorContains(t, bad(tarEntry{hdr: tar.Header{Name: "testbed", Typeflag: tar.TypeDir}}), "outside testbed", "the folder's entry only once, first")
	truncated := append(tarStream(t, tarEntry{hdr: tar.Header{Name: "testbed/", Typeflag: tar.TypeDir}},
		tarEntry{hdr: tar.Header{Name: "testbed/a", Typeflag: tar.TypeReg}}).Bytes()[:1024], make([]byte, 100)...)
	_, _, err = ownAll(t, bytes.NewReader(truncated), "testbed", "")
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
	require.ErrorContains(t, err, `user: the image's USER "nobody" is not in its /etc/passwd`)
	_, _, err = lookupUser("agent:nogroup", passwd, group)
	require.ErrorContains(t, err, "is not in its /etc/group")
	_, _, err = lookupUser("agent", "", "")
	require.ErrorContains(t, err, "is not in its /etc/passwd")
}
