package skill

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
)

func TestFactoryLoadsTheMountedSkills(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "docs", "notes")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "references"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: notes\ndescription: Take notes well.\n---\n# Notes\n\nWrite them down.\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "references", "style.md"), []byte("style\n"), 0o644))

	env := tools.Env{Workspace: t.TempDir(), StateDir: t.TempDir()}
	made, err := Factory(builtins)(env, json.RawMessage(`{"dir":"`+root+`"}`))
	require.NoError(t, err)
	ts, err := tools.NewToolset(made...)
	require.NoError(t, err)
	defer func() { require.NoError(t, ts.Close()) }()
	defs := ts.Definitions()
	require.Len(t, defs, 1)
	assert.Contains(t, defs[0].Description, "\n- notes: Take notes well.")
	obs, err := ts.Call(context.Background(), LoadName, json.RawMessage(`{"name":"notes"}`))
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())
	assert.Contains(t, obs.Text(), "<skill_content name=\"notes\">\n# Notes\n\nWrite them down.\n\nSkill folder: "+dir+" (read-only).")
	assert.Contains(t, obs.Text(), "<file>references/style.md</file>")
}

func TestFactoryWithoutSkillsMakesNoTools(t *testing.T) {
	env := tools.Env{Workspace: t.TempDir(), StateDir: t.TempDir()}
	made, err := Factory(builtins)(env, json.RawMessage(`{"dir":"`+t.TempDir()+`"}`))
	require.NoError(t, err)
	assert.Empty(t, made)
}

func TestFactoryParams(t *testing.T) {
	env := tools.Env{Workspace: t.TempDir(), StateDir: t.TempDir()}
	_, err := Factory(builtins)(env, json.RawMessage(`{"dir":"skills"}`))
	require.ErrorContains(t, err, `dir "skills" is not an absolute path`)
	_, err = Factory(builtins)(env, json.RawMessage(`{"dri":"/skills"}`))
	assert.ErrorContains(t, err, `unknown field "dri"`)
}

// The selection the daemon passes is applied again to what is mounted.
func TestFactoryAppliesTheSelection(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"fuzz", "fuzz/run", "other"} {
		dir := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		name := filepath.Base(p)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: "+name+"\ndescription: The "+name+" skill.\n---\nbody\n"), 0o644))
	}
	env := tools.Env{Workspace: t.TempDir(), StateDir: t.TempDir()}
	for params, want := range map[string][]string{
		`{"dir":"` + root + `"}`:                              {"fuzz", "other", "run"},
		`{"dir":"` + root + `","allow":["all"]}`:              {"fuzz", "other"},
		`{"dir":"` + root + `","allow":["fuzz/run","other"]}`: {"other", "run"},
	} {
		made, err := Factory(builtins)(env, json.RawMessage(params))
		require.NoError(t, err)
		ts, err := tools.NewToolset(made...)
		require.NoError(t, err)
		var names []string
		for _, v := range ts.Definitions()[0].InputSchema.Properties["name"].Enum {
			names = append(names, v.(string))
		}
		assert.ElementsMatch(t, want, names, params)
		require.NoError(t, ts.Close())
	}
}
