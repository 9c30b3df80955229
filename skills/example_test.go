package skills

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeExample: the complete example skill of docs/skills.md is the
// folder docs/examples/skills/todo-scan, word for word; it validates,
// loads as a tool and runs.
func TestReadmeExample(t *testing.T) {
	const dir = "../docs/examples/skills/todo-scan"
	readme, err := os.ReadFile("../docs/skills.md")
	require.NoError(t, err)
	for _, f := range []string{"SKILL.md", "scripts/todo_scan.sh", "deps/install.sh"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		require.NoError(t, err)
		assert.Contains(t, string(readme), string(data), "docs/skills.md shows %s/%s as it is", dir, f)
	}

	assert.Empty(t, problemStrings(Validate(dir)))
	s, err := Parse(os.DirFS("../docs/examples/skills"), "todo-scan")
	require.NoError(t, err)
	assert.Empty(t, s.Warnings)
	assert.True(t, s.ReturnsJSON)
	assert.Equal(t, 30*time.Second, s.Timeout)
	assert.Equal(t, 5*time.Minute, s.InstallTimeout)
	assert.Equal(t, 10, s.Priority)
	assert.Equal(t, "deps/install.sh", s.Installer)
	require.NotNil(t, s.Exec)
	assert.Equal(t, "scripts/todo_scan.sh", s.Exec.Entry)
	assert.Equal(t, []Param{
		{Name: "path", Kind: Positional, Type: "string", Description: "The folder to scan, relative to the working directory. Default: `.`."},
		{Name: "tag", Option: "--tag", Kind: Named, Type: "string", Description: "Only this tag (TODO, FIXME or XXX). Default: all three."},
		{Name: "max", Option: "--max", Kind: Named, Type: "integer", Description: "At most this many items (default 100)."},
		{Name: "ignore-case", Option: "--ignore-case", Kind: Flag, Type: "boolean", Description: "Also match `todo`, `Fixme`, ..."},
	}, s.Exec.Params)

	work := t.TempDir()
	writeFiles(t, work, map[string]string{"src/a.go": "x // TODO: one \"quoted\"\n// fixme later\n/* FIXME: back\\slash */\n"})
	r := runScript(t, filepath.Join(dir, s.Exec.Entry), work, []string{"PATH=/usr/bin:/bin"}, "src", "--ignore-case", "--tag", "FIXME")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, map[string]any{"count": 2.0, "truncated": false, "items": []any{
		map[string]any{"file": "src/a.go", "line": 2.0, "tag": "FIXME", "text": "// fixme later"},
		map[string]any{"file": "src/a.go", "line": 3.0, "tag": "FIXME", "text": `/* FIXME: back\slash */`},
	}}, r.out)
}
