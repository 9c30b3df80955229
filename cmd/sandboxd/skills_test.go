package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const skillsTestdata = "../../skills/testdata"

func runCLI(args ...string) (code int, out, errOut string) {
	var o, e bytes.Buffer
	code = run(args, stdio{in: &bytes.Buffer{}, out: &o, err: &e})
	return code, o.String(), e.String()
}

func TestSkillsValidate(t *testing.T) {
	code, out, errOut := runCLI("skills", "validate", skillsTestdata+"/root")
	assert.Equal(t, exitOK, code, errOut)
	assert.Equal(t, "ok: 6 skills\n", out)

	code, out, _ = runCLI("skills", "validate", skillsTestdata+"/root/template-skill")
	assert.Equal(t, exitOK, code)
	assert.Equal(t, "ok: 1 skill\n", out)

	code, out, errOut = runCLI("skills", "validate", skillsTestdata+"/broken")
	assert.Equal(t, exitError, code)
	assert.Empty(t, errOut, "the problems are the output; the exit code says the rest")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	require.Len(t, lines, 10)
	assert.Contains(t, lines, skillsTestdata+"/broken/no-description/SKILL.md:2: description: missing: say what the skill does and when to use it")
	assert.Contains(t, lines, skillsTestdata+"/broken/unclosed/SKILL.md:1: the front matter opened on line 1 is not closed by a line '---'")
	assert.Equal(t, "9 problems in 8 skills", lines[9])

	// Lenient problems are problems here.
	code, out, _ = runCLI("skills", "validate", skillsTestdata+"/lenient/name-mismatch")
	assert.Equal(t, exitError, code)
	assert.Equal(t, skillsTestdata+`/lenient/name-mismatch/SKILL.md:2: name: "another-name" differs from the folder's name "name-mismatch"`+"\n1 problem in 1 skill\n", out)

	code, out, _ = runCLI("skills", "validate", filepath.Join(t.TempDir(), "missing"))
	assert.Equal(t, exitError, code)
	assert.Contains(t, out, "cannot read: no such file or directory")
}

func TestSkillsUsage(t *testing.T) {
	cases := []struct {
		args []string
		code int
		text string // in stderr, or stdout for help
	}{
		{[]string{"skills"}, exitUsage, "give a subcommand: validate or list"},
		{[]string{"skills", "frob"}, exitUsage, `unknown subcommand "frob"`},
		{[]string{"skills", "validate"}, exitUsage, "give one PATH"},
		{[]string{"skills", "validate", "a", "b"}, exitUsage, "give one PATH"},
		{[]string{"skills", "validate", "--nope", "a"}, exitUsage, "flag provided but not defined: -nope"},
		{[]string{"skills", "list", "extra"}, exitUsage, "unexpected arguments: extra"},
		{[]string{"skills", "list", "--skills-dir", ""}, exitUsage, "empty path"},
		{[]string{"skills", "-h"}, exitOK, "sandboxd skills list [--config FILE] [--skills-dir DIR]... [--json]"},
		{[]string{"skills", "validate", "-h"}, exitOK, "Strict is the Agent Skills specification"},
		{[]string{"skills", "list", "-h"}, exitOK, "-skills-dir"},
	}
	for _, c := range cases {
		code, out, errOut := runCLI(c.args...)
		assert.Equal(t, c.code, code, c.args)
		assert.Contains(t, out+errOut, c.text, c.args)
	}
}

func TestSkillsListText(t *testing.T) {
	code, out, errOut := runCLI("skills", "list")
	require.Equal(t, exitOK, code, errOut)
	lines := strings.Split(out, "\n")
	assert.Regexp(t, `^PATH +NAME +ROOT +TOOL +TIMEOUT +INSTALLER$`, lines[0])
	assert.Regexp(t, `^repo-summary +repo-summary +builtin +yes +1m0s +-$`, lines[1])
	assert.Regexp(t, `^run-tests +run-tests +builtin +yes +10m0s +-$`, lines[2])
	assert.Equal(t, "2 skills loaded", lines[3])

	code, out, _ = runCLI("skills", "list", "--skills-dir", skillsTestdata+"/root", "--skills-dir", skillsTestdata+"/broken")
	require.Equal(t, exitOK, code)
	assert.Regexp(t, `(?m)^fuzz/run-fuzzing-campaign +run-fuzzing-campaign +\S+/skills/testdata/root +yes +3m20s +deps/fuzz/install\.sh$`, out)
	assert.Regexp(t, `(?m)^hidden-skill +hidden-skill \(hidden\) `, out)
	assert.Contains(t, out, "8 skills loaded, 8 skipped\n")
	assert.Regexp(t, `(?m)^skipped:\n  bad name \(\S+/skills/testdata/broken\): the folder's path cannot name a skill`, out)
}

func TestSkillsListJSON(t *testing.T) {
	operator := t.TempDir()
	dir := filepath.Join(operator, "run-tests")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte("---\nname: run-tests\ndescription: Our own test runner.\n---\n"), 0o644))

	code, out, errOut := runCLI("skills", "list", "--json", "--skills-dir", operator, "--skills-dir", skillsTestdata+"/lenient")
	require.Equal(t, exitOK, code, errOut)
	var got struct {
		Skills  []skillListing `json:"skills"`
		Skipped []struct {
			Path, Root, Reason string
		} `json:"skipped"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &got))
	byPath := map[string]skillListing{}
	for _, s := range got.Skills {
		byPath[s.Path] = s
	}
	assert.Len(t, got.Skills, 12, "10 lenient, the operator's run-tests, the built-in repo-summary")
	rt := byPath["run-tests"]
	assert.Equal(t, operator, rt.Root, "the operator's root shadows the built-in skill")
	assert.False(t, rt.Executable)
	assert.Equal(t, "Our own test runner.", rt.Description)
	require.Len(t, got.Skipped, 1)
	assert.Equal(t, "run-tests", got.Skipped[0].Path)
	assert.Equal(t, "builtin", got.Skipped[0].Root)
	assert.Equal(t, "shadowed by "+operator, got.Skipped[0].Reason)

	rs := byPath["repo-summary"]
	assert.True(t, rs.Executable)
	assert.True(t, rs.ReturnsJSON)
	assert.Equal(t, "scripts/repo_summary.sh", rs.Entry)
	assert.InDelta(t, 60, rs.TimeoutSeconds, 0)
	assert.Len(t, rs.Params, 3)
	assert.Equal(t, 1, rs.Resources)
	assert.Empty(t, rs.Dir, "embedded")

	nm := byPath["name-mismatch"]
	assert.Equal(t, "another-name", nm.Name)
	assert.Len(t, nm.Warnings, 1)
	bt := byPath["bad-timeout"]
	assert.True(t, bt.Executable)
	assert.InDelta(t, 60, bt.TimeoutSeconds, 0, "the default")
}
