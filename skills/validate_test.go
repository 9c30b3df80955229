package skills

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func problemStrings(ps []Problem) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.String())
	}
	return out
}

// TestValidateValid: the valid fixtures, as a root and one by one, have no
// problem; OpenSage's own keys at the top level are accepted.
func TestValidateValid(t *testing.T) {
	n, problems := ValidateCount("testdata/root")
	assert.Equal(t, 6, n)
	assert.Empty(t, problemStrings(problems))
	n, problems = ValidateCount("testdata/root/fuzz/run-fuzzing-campaign")
	assert.Equal(t, 1, n)
	assert.Empty(t, problemStrings(problems))
}

// TestValidateLenientFixtures: everything the loader forgives is a problem,
// with its file and line.
func TestValidateLenientFixtures(t *testing.T) {
	n, problems := ValidateCount("testdata/lenient")
	assert.Equal(t, 10, n)
	const d = "testdata/lenient/"
	want := []string{
		d + "ambiguous-scripts/SKILL.md:6: ## Parameters: 2 scripts under scripts/ and ## Usage names none of them",
		d + `bad-params/SKILL.md:8: ## Parameters: ### input: "sometimes" is not required, optional, positional position N, named parameter or flag`,
		d + "bad-params/SKILL.md:12: ## Parameters: positional count is at position 3: positions are 0, 1, 2 … without gaps or repeats",
		d + `bad-timeout/SKILL.md:20: ## Timeout: "forever" is not a timeout`,
		d + "bad-timeout/SKILL.md:16: ## Parameters: ### level: unknown type \"`enum`\"",
		d + "claude-fields/SKILL.md:4: argument-hint: unknown field",
		d + "claude-fields/SKILL.md:5: model: unknown field",
		d + `claude-fields/SKILL.md:7: metadata.version: "1.0" is a YAML float, not a string: quote it`,
		d + "colon-description/SKILL.md:3: front matter: not valid YAML (mapping values are not allowed in this context)",
		d + `deps-other-kind/SKILL.md: installer: deps/gpu/install.sh is not used: should_run_in_sandbox is "main"`,
		d + "deps-other-kind/SKILL.md:7: installer: deps/install.sh is mentioned but not in the folder",
		d + "long-name/SKILL.md:2: name: 81 characters, above the limit of 64",
		d + `long-name/SKILL.md:2: name: "long-name-that-goes-on-and-on-well-past-the-sixty-four-characters-the-spec-allows" differs from the folder's name "long-name"`,
		d + `name-mismatch/SKILL.md:2: name: "another-name" differs from the folder's name "name-mismatch"`,
		d + "no-name/SKILL.md:2: name: missing",
		d + "params-no-script/SKILL.md:6: ## Parameters: no script under scripts/",
	}
	got := problemStrings(problems)
	require.Len(t, got, len(want), "%s", strings.Join(got, "\n"))
	for i := range want {
		assert.True(t, strings.HasPrefix(got[i], want[i]), "problem %d:\n got %s\nwant %s…", i, got[i], want[i])
	}
}

// TestValidateBrokenFixtures: every skipped skill is a problem too.
func TestValidateBrokenFixtures(t *testing.T) {
	n, problems := ValidateCount("testdata/broken")
	assert.Equal(t, 8, n)
	const d = "testdata/broken/"
	want := []string{
		d + "bad name/SKILL.md: the folder's path cannot name a skill",
		d + `bad name/SKILL.md:2: name: "bad-name" differs from the folder's name "bad name"`,
		d + "bad-yaml/SKILL.md:2: front matter: not valid YAML: did not find expected ',' or ']'",
		d + "description-mapping/SKILL.md:4: description: not a string",
		d + "empty-description/SKILL.md:3: description: empty",
		d + "no-description/SKILL.md:2: description: missing",
		d + "no-front-matter/SKILL.md:1: no front matter",
		d + "not-a-mapping/SKILL.md:2: front matter: not a mapping of fields",
		d + "unclosed/SKILL.md:1: the front matter opened on line 1 is not closed",
	}
	got := problemStrings(problems)
	require.Len(t, got, len(want), "%s", strings.Join(got, "\n"))
	for i := range want {
		assert.True(t, strings.HasPrefix(got[i], want[i]), "problem %d:\n got %s\nwant %s…", i, got[i], want[i])
	}
}

// TestValidateStrictOnly: what the loader accepts silently but the
// specification does not.
func TestValidateStrictOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "strict-skill")
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "scripts"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "scripts", "run.sh"), nil, 0o755))
	file := strings.Join([]string{
		"---",                           // 1
		"name: strict-skill",            // 2
		"description: d",                // 3
		"returns_json: \"true\"",        // 4
		"allowed-tools: [Read]",         // 5
		"metadata:",                     // 6
		"  count: 3",                    // 7
		"  sandboxd.timeout: \"2m\"",    // 8
		"---",                           // 9
		"## Parameters",                 // 10
		"",                              // 11
		"### a (positional position 0)", // 12
		"",                              // 13
		"### b (optional)",              // 14
		"**Type**: `str`",               // 15
		"## Parameters",                 // 16
	}, "\n")
	require.NoError(t, os.WriteFile(filepath.Join(dir, SkillFile), []byte(file), 0o644))

	s, err := Parse(os.DirFS(filepath.Dir(dir)), "strict-skill")
	require.NoError(t, err)
	assert.Empty(t, s.Warnings, "all of it is accepted by the loader")
	require.NotNil(t, s.Exec)

	f := filepath.Join(dir, SkillFile)
	assert.Equal(t, []string{
		f + `:4: returns_json: "true" is a string: write true or false without quotes`,
		f + ":5: allowed-tools: a list: the specification wants one space-separated string",
		f + `:7: metadata.count: "3" is a YAML int, not a string: quote it`,
		f + ":10: ## Parameters: 2 sections of that name; the first is read",
		f + ":12: ## Parameters: ### a: say required or optional (read as optional)",
		f + ":12: ## Parameters: ### a: no **Type** line (read as a string)",
		f + ":14: ## Parameters: ### b: say positional position N, named parameter or flag",
	}, problemStrings(Validate(dir)))
}

// TestValidateSpecLimits: the specification's limits on name, description
// and compatibility.
func TestValidateSpecLimits(t *testing.T) {
	cases := []struct {
		folder, front, problem string
	}{
		{"Upper", "name: Upper\ndescription: d", `name: "Upper": use lowercase letters, digits and single hyphens`},
		{"a--b", "name: a--b\ndescription: d", `name: "a--b": use lowercase`},
		{"-a", "name: -a\ndescription: d", `name: "-a": use lowercase`},
		{"a-", "name: a-\ndescription: d", `name: "a-": use lowercase`},
		{"long", "name: long\ndescription: " + strings.Repeat("x", 1025), "description: 1025 characters, above the limit of 1024"},
		{"compat", "name: compat\ndescription: d\ncompatibility: " + strings.Repeat("x", 501), "compatibility: 501 characters: must be 1 to 500"},
		{"compat-empty", "name: compat-empty\ndescription: d\ncompatibility: \"\"", "compatibility: 0 characters: must be 1 to 500"},
		{"num", "name: num\ndescription: d\nlicense: 2", `license: "2" is a YAML int, not a string`},
	}
	for _, c := range cases {
		dir := filepath.Join(t.TempDir(), c.folder)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, SkillFile), []byte("---\n"+c.front+"\n---\n"), 0o644))
		got := strings.Join(problemStrings(Validate(dir)), "\n")
		assert.Contains(t, got, c.problem, c.folder)
	}
}

func TestValidatePaths(t *testing.T) {
	dir := t.TempDir()
	assert.Equal(t, []string{dir + ": no SKILL.md in this folder or below it"}, problemStrings(Validate(dir)))
	missing := filepath.Join(dir, "missing")
	assert.Equal(t, []string{missing + ": cannot read: no such file or directory"}, problemStrings(Validate(missing)))
	file := filepath.Join(dir, "f")
	require.NoError(t, os.WriteFile(file, nil, 0o644))
	assert.Equal(t, []string{file + ": not a directory: give a skill's folder (with a SKILL.md) or a root of skills"}, problemStrings(Validate(file)))
	assert.Equal(t, "f: x", Problem{File: "f", Msg: "x"}.String())
	assert.Equal(t, "f:3: name: x", Problem{File: "f", Line: 3, Field: "name", Msg: "x"}.String())
}
