package daemon

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/skills"
)

func writeSkill(t *testing.T, dir, name, extra string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: "+name+"\ndescription: does "+name+"\n---\n# "+name+"\n"+extra), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scripts", "run.sh"), []byte("echo hi\n"), 0o755))
}

func TestSkillsMountsAndDefinitions(t *testing.T) {
	root := t.TempDir()
	writeSkill(t, filepath.Join(root, "greet"), "greet", "## Parameters\n\n### who (required, positional position 0)\n\n**Type**: `str`\n\nWho.\n")
	writeSkill(t, filepath.Join(root, "fuzz"), "fuzz", "")
	writeSkill(t, filepath.Join(root, "fuzz", "campaign"), "campaign", "")
	s := Skills{Lib: skills.NewLibrary(skills.Root{Dir: root})}

	got, err := s.Mounts([]string{"greet", "fuzz/campaign"})
	require.NoError(t, err)
	assert.Equal(t, []sandbox.SkillMount{
		{Path: "greet", Source: filepath.Join(root, "greet")},
		{Path: "fuzz/campaign", Source: filepath.Join(root, "fuzz", "campaign")},
	}, got)

	_, err = s.Mounts([]string{"greet", "nope", "fuzzy"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"nope", "fuzzy" select no skill`)
	assert.Contains(t, err.Error(), "greet")

	names := map[string]bool{}
	for _, d := range s.Definitions([]string{"all"}) {
		names[d.Name] = true
	}
	assert.Equal(t, map[string]bool{"load_skill": true, "greet": true}, names)
	assert.Empty(t, s.Definitions(nil))
}
