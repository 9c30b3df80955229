package skilltar

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

func write(t *testing.T, p, content string, mode os.FileMode) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
}

// A skill root with a skill, a nested one, a link out of the root, a link
// inside the folder and a FIFO: only the folders and regular files travel,
// read-only, executables kept executable.
func TestPackUnpack(t *testing.T) {
	root, secret := t.TempDir(), t.TempDir()
	write(t, filepath.Join(secret, "host.txt"), "HOST-ONLY", 0o644)
	write(t, filepath.Join(root, "run-tests", "SKILL.md"), "---\nname: run-tests\n---\n", 0o644)
	write(t, filepath.Join(root, "run-tests", "scripts", "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	write(t, filepath.Join(root, "group", "inner", "SKILL.md"), "inner", 0o600)
	require.NoError(t, os.Symlink(secret, filepath.Join(root, "run-tests", "out")))
	require.NoError(t, os.Symlink(filepath.Join(secret, "host.txt"), filepath.Join(root, "run-tests", "host.txt")))
	require.NoError(t, os.Symlink("SKILL.md", filepath.Join(root, "run-tests", "again.md")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(root, "run-tests", "fifo"), 0o644))

	var buf bytes.Buffer
	st, err := Pack(&buf, []sandbox.SkillMount{
		{Path: "run-tests", Source: filepath.Join(root, "run-tests")},
		{Path: "group/inner", Source: filepath.Join(root, "group", "inner")},
	})
	require.NoError(t, err)
	assert.Equal(t, Packed{Files: 3, Dirs: 4, Bytes: int64(len("---\nname: run-tests\n---\n") + len("#!/bin/sh\necho hi\n") + len("inner"))}, st)

	dst := t.TempDir()
	require.NoError(t, Unpack(&buf, dst))
	t.Cleanup(func() {
		_ = filepath.Walk(dst, func(p string, _ os.FileInfo, _ error) error { return os.Chmod(p, 0o755) })
	})
	b, err := os.ReadFile(filepath.Join(dst, "run-tests", "scripts", "run.sh"))
	require.NoError(t, err)
	assert.Equal(t, "#!/bin/sh\necho hi\n", string(b))
	for p, want := range map[string]os.FileMode{
		"run-tests":                os.ModeDir | 0o555,
		"run-tests/scripts":        os.ModeDir | 0o555,
		"run-tests/SKILL.md":       0o444,
		"run-tests/scripts/run.sh": 0o555,
		"group":                    os.ModeDir | 0o555,
		"group/inner/SKILL.md":     0o444,
	} {
		fi, err := os.Lstat(filepath.Join(dst, p))
		require.NoError(t, err, p)
		assert.Equal(t, want, fi.Mode(), p)
	}
	for _, p := range []string{"run-tests/out", "run-tests/host.txt", "run-tests/again.md", "run-tests/fifo"} {
		_, err := os.Lstat(filepath.Join(dst, p))
		assert.ErrorIs(t, err, os.ErrNotExist, "%s is not carried", p)
	}
}

// A skill folder, or a folder above it, that became a link since the
// loader read the root is refused, naming the skill, not the host's path.
func TestPackRefusesLinkedFolders(t *testing.T) {
	root, secret := t.TempDir(), t.TempDir()
	write(t, filepath.Join(secret, "SKILL.md"), "HOST-ONLY", 0o644)
	require.NoError(t, os.Symlink(secret, filepath.Join(root, "linked")))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "real"), 0o755))
	require.NoError(t, os.Symlink(secret, filepath.Join(root, "real", "nested")))
	write(t, filepath.Join(root, "file"), "x", 0o644)
	for _, m := range []sandbox.SkillMount{
		{Path: "linked", Source: filepath.Join(root, "linked")},
		{Path: "real/nested", Source: filepath.Join(root, "real", "nested")},
		{Path: "file", Source: filepath.Join(root, "file")},
		{Path: "missing", Source: filepath.Join(root, "missing")},
	} {
		_, err := Pack(&bytes.Buffer{}, []sandbox.SkillMount{m})
		var re *Refused
		require.ErrorAs(t, err, &re, m.Path)
		assert.Equal(t, m.Path, re.Skill)
		assert.NotContains(t, err.Error(), root, "no host path in %v", err)
	}
	_, err := Pack(&bytes.Buffer{}, []sandbox.SkillMount{{Path: "x", Source: "/elsewhere/y"}})
	require.Error(t, err)
}

func TestPackBounds(t *testing.T) {
	root := t.TempDir()
	f, err := os.Create(filepath.Join(root, "big", "data"))
	if os.IsNotExist(err) {
		require.NoError(t, os.MkdirAll(filepath.Join(root, "big"), 0o755))
		f, err = os.Create(filepath.Join(root, "big", "data"))
	}
	require.NoError(t, err)
	require.NoError(t, f.Truncate(MaxBytes+1)) // sparse
	require.NoError(t, f.Close())
	_, err = Pack(&bytes.Buffer{}, []sandbox.SkillMount{{Path: "big", Source: filepath.Join(root, "big")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "MiB")
}

func archive(t *testing.T, hdrs ...*tar.Header) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, h := range hdrs {
		require.NoError(t, tw.WriteHeader(h))
		if h.Typeflag == tar.TypeReg {
			_, err := tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	require.NoError(t, zw.Close())
	return &buf
}

// Unpack trusts nothing of what came through the API: no absolute or
// climbing names, no links, devices or FIFOs, and its own bounds.
func TestUnpackRefuses(t *testing.T) {
	for name, buf := range map[string]*bytes.Buffer{
		"absolute": archive(t, &tar.Header{Name: "/etc/passwd", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}),
		"climbs":   archive(t, &tar.Header{Name: "a/../../x", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}),
		"symlink":  archive(t, &tar.Header{Name: "a", Typeflag: tar.TypeSymlink, Linkname: "/etc"}),
		"hardlink": archive(t, &tar.Header{Name: "a", Typeflag: tar.TypeLink, Linkname: "b"}),
		"fifo":     archive(t, &tar.Header{Name: "a", Typeflag: tar.TypeFifo}),
		"too big":  archive(t, &tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644, Size: MaxBytes + 1}),
		"twice": archive(t, &tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1},
			&tar.Header{Name: "a", Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}),
		"not gzip": bytes.NewBufferString("plain"),
	} {
		t.Run(name, func(t *testing.T) {
			dst := t.TempDir()
			require.Error(t, Unpack(buf, dst))
			_, err := os.Lstat("/etc/x")
			assert.ErrorIs(t, err, os.ErrNotExist)
		})
	}
}
