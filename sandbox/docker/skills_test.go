package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/docker/docker/api/types/mount"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestSkillMountsBind(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "fuzz", "run"), 0o755))
	r := testRuntime(false)
	r.log = slog.New(slog.DiscardHandler)
	ms, dirs, err := r.skillMounts(context.Background(), "img", []sandbox.SkillMount{
		{Path: "fuzz/run", Source: filepath.Join(root, "fuzz", "run")},
	})
	require.NoError(t, err)
	defer dirs.close()
	require.Len(t, dirs, 1, "kept open, to be checked again around the start")
	require.NoError(t, dirs.check())
	require.Len(t, ms, 1)
	assert.Equal(t, mount.TypeBind, ms[0].Type)
	assert.Equal(t, filepath.Join(root, "fuzz", "run"), ms[0].Source)
	assert.Equal(t, "/skills/fuzz/run", ms[0].Target)
	assert.True(t, ms[0].ReadOnly, "skills are read-only in the sandbox")
}

func TestSkillsPATH(t *testing.T) {
	skills := []string{"x"}
	for _, tc := range []struct {
		name string
		o    sandbox.SessionOptions
		img  imageFacts
		want string
	}{
		{"image home and path", sandbox.SessionOptions{Skills: skills}, imageFacts{home: "/home/u", path: "/opt/bin:/usr/bin"}, "/home/u/.local/bin:/opt/bin:/usr/bin"},
		{"session env wins", sandbox.SessionOptions{Skills: skills, Env: map[string]string{"HOME": "/workspace/h", "PATH": "/x"}}, imageFacts{home: "/home/u", path: "/y"}, "/workspace/h/.local/bin:/x"},
		{"fallback home, default path", sandbox.SessionOptions{Skills: skills}, imageFacts{}, sandbox.FallbackHome + "/.local/bin:" + defaultPATH},
		{"no skills: the image's", sandbox.SessionOptions{}, imageFacts{home: "/home/u", path: "/y"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := planLayout("s", tc.o, tc.img, 1000, 1000)
			require.NoError(t, err)
			assert.Equal(t, tc.want, l.path)
		})
	}
}

func TestBuildContainerSkillsPATH(t *testing.T) {
	o := resolved(t, sandbox.SessionOptions{Skills: []string{"x"}, Env: map[string]string{"PATH": "/mine", "A": "b"}})
	spec := sandbox.Spec{SessionID: "sid", Options: o, Labels: sandbox.SessionLabels("sid", o, "", testTime), Command: agentCmd(t, o)}
	l := plan(t, "sid", o, imageFacts{home: "/home/u"})
	cs, err := testRuntime(false).buildContainer(spec, "none", l)
	require.NoError(t, err)
	assert.Contains(t, cs.config.Env, "PATH=/home/u/.local/bin:/mine")
	assert.Contains(t, cs.config.Env, "A=b")
	n := 0
	for _, e := range cs.config.Env {
		if len(e) > 5 && e[:5] == "PATH=" {
			n++
		}
	}
	assert.Equal(t, 1, n, "one PATH")
}

// Copy mode: the volume's name follows the content (a changed file is a new
// volume, the same content the same one), the tar is read-only and
// root-owned with executables kept, and what is not a regular file or
// folder stays out.
func TestScanAndTarSkill(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: s\n---\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scripts", "run.sh"), []byte("echo hi\n"), 0o755))
	require.NoError(t, os.Symlink("/etc/passwd", filepath.Join(dir, "leak")))

	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()
	files, sum, err := scanSkill(root)
	require.NoError(t, err)
	_, again, err := scanSkill(root)
	require.NoError(t, err)
	assert.Equal(t, sum, again)

	var buf bytes.Buffer
	require.NoError(t, writeSkillTar(&buf, root, files))
	got := map[string]int64{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		got[h.Name] = h.Mode
		assert.Zero(t, h.Uid)
	}
	assert.Equal(t, map[string]int64{"SKILL.md": 0o444, "scripts/": 0o555, "scripts/run.sh": 0o555, ".sandboxd-skill": 0o444}, got)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: t\n---\n"), 0o644))
	_, changed, err := scanSkill(root)
	require.NoError(t, err)
	assert.NotEqual(t, sum, changed)
}
