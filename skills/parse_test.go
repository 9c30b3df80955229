package skills

import (
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadMap loads a testdata root and returns its skills by path and its
// skipped entries by path.
func loadMap(t *testing.T, dir string) (map[string]*Skill, map[string]string) {
	t.Helper()
	skills, skipped := Load(dir, "test")
	byPath := map[string]*Skill{}
	for _, s := range skills {
		byPath[s.Path] = s
	}
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Path] = s.Reason
	}
	return byPath, reasons
}

// TestLoadValidFixtures: skills in the style of anthropics/skills and of
// OpenSage's executable skills load without a warning.
func TestLoadValidFixtures(t *testing.T) {
	byPath, skipped := loadMap(t, "testdata/root")
	assert.Empty(t, skipped)
	cases := []struct {
		path, name string
		exec       bool
		installer  string
		timeout    time.Duration
		resources  []string
	}{
		{path: "template-skill", name: "template-skill"},
		{path: "pdf-tools", name: "pdf-tools",
			resources: []string{"LICENSE.txt", "assets/cover.txt", "references/forms.md", "references/reference.md", "scripts/extract.py"}},
		{path: "fuzz", name: "fuzz"}, // a category folder: a skill, not executable, its children not its resources
		{path: "fuzz/run-fuzzing-campaign", name: "run-fuzzing-campaign", exec: true, installer: "deps/fuzz/install.sh", timeout: 200 * time.Second,
			resources: []string{"deps/fuzz/install.sh", "deps/install.sh", "scripts/run_fuzzing_campaign.sh"}},
		{path: "retrieval/search-symbol", name: "search-symbol", exec: true, installer: "deps/main/install.sh", timeout: 90 * time.Second,
			resources: []string{"deps/main/install.sh", "scripts/helper.sh", "scripts/search_symbol.sh"}},
		{path: "hidden-skill", name: "hidden-skill"},
	}
	assert.Len(t, byPath, len(cases))
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			s := byPath[c.path]
			require.NotNil(t, s, "not loaded")
			assert.Equal(t, c.name, s.Name)
			assert.Equal(t, "test", s.Root)
			assert.Equal(t, "testdata/root/"+c.path, s.Dir)
			assert.NotEmpty(t, s.Description)
			assert.NotEmpty(t, s.Body)
			assert.Empty(t, s.Warnings)
			assert.Equal(t, c.exec, s.Exec != nil)
			assert.Equal(t, c.installer, s.Installer)
			assert.Equal(t, c.timeout, s.Timeout)
			assert.Equal(t, c.resources, s.Resources)
		})
	}
	pdf := byPath["pdf-tools"]
	assert.Equal(t, "Apache-2.0. LICENSE.txt has the complete terms", pdf.License)
	assert.Equal(t, "Requires python3 with pypdf, and poppler-utils for pdftotext", pdf.Compatibility)
	assert.Equal(t, "Bash(python3:*) Read", pdf.AllowedTools)
	assert.Equal(t, map[string]string{"author": "example-org", "version": "1.0"}, pdf.Metadata)
	assert.True(t, byPath["hidden-skill"].Hidden)
	assert.False(t, byPath["pdf-tools"].Hidden)
	assert.Equal(t, "fuzz", byPath["fuzz"].RunIn)
}

// TestParseOpenSageSkill reads OpenSage's run-fuzzing-campaign, verbatim:
// every parameter kind, the Usage block that names the script, the timeout,
// the installer of its sandbox kind before deps/install.sh.
func TestParseOpenSageSkill(t *testing.T) {
	s, err := Parse(os.DirFS("testdata/root"), "fuzz/run-fuzzing-campaign")
	require.NoError(t, err)
	assert.Equal(t, "fuzz/run-fuzzing-campaign", s.Path)
	assert.Equal(t, "run-fuzzing-campaign", s.Name)
	assert.True(t, strings.HasPrefix(s.Description, "Run a fuzzing campaign using AFL++"))
	assert.Equal(t, "fuzz", s.RunIn)
	assert.False(t, s.ReturnsJSON)
	assert.Equal(t, 200*time.Second, s.Timeout)
	assert.Equal(t, "deps/fuzz/install.sh", s.Installer)
	assert.True(t, strings.HasPrefix(s.Body, "# Run Fuzzing Campaign\n"), "the body starts after the front matter: %q", s.Body[:40])
	require.NotNil(t, s.Exec)
	assert.Equal(t, "scripts/run_fuzzing_campaign.sh", s.Exec.Entry)
	assert.Equal(t, []Param{
		{Name: "fuzz_target", Kind: Positional, Position: 0, Required: true, Type: "string",
			Description: "Fuzz target binary name (expected at `/out/<fuzz_target>`)."},
		{Name: "duration_seconds", Kind: Positional, Position: 1, Required: true, Type: "integer",
			Description: "Fuzzing duration in seconds (e.g., `180`)."},
		{Name: "seed_paths", Kind: Positional, Position: 2, Variadic: true, Type: "array",
			Description: "Optional seed file/dir paths."},
		{Name: "custom_mutator_path", Option: "--custom_mutator_path", Kind: Named, Type: "string",
			Description: "Optional path to a custom mutator script."},
		{Name: "reset_output", Option: "--reset_output", Kind: Flag, Type: "boolean",
			Description: "Reset output and start fresh.\n\n(default: false)"},
	}, s.Exec.Params)
	assert.Empty(t, s.Warnings)
}

// TestParseMetadataKeys: OpenSage's keys and sandboxd's under metadata, so
// the skill also passes skills-ref validate.
func TestParseMetadataKeys(t *testing.T) {
	s, err := Parse(os.DirFS("testdata/root"), "retrieval/search-symbol")
	require.NoError(t, err)
	assert.Equal(t, "main", s.RunIn)
	assert.True(t, s.ReturnsJSON)
	assert.Equal(t, 90*time.Second, s.Timeout)
	assert.Equal(t, 5, s.Priority)
	require.NotNil(t, s.Exec)
	assert.Equal(t, "scripts/search_symbol.sh", s.Exec.Entry, "metadata sandboxd.entry picks one of two scripts")
	assert.Equal(t, []Param{
		{Name: "symbol", Kind: Positional, Required: true, Type: "string", Description: "The symbol's name."},
		{Name: "max", Option: "--max", Kind: Named, Type: "integer", Description: "At most this many matches."},
	}, s.Exec.Params)
}

// TestLoadLenientFixtures: what the loader forgives, each with the warning
// that says so.
func TestLoadLenientFixtures(t *testing.T) {
	byPath, skipped := loadMap(t, "testdata/lenient")
	assert.Empty(t, skipped)
	cases := []struct {
		path, name string
		exec       bool
		warnings   []string // substrings, one warning each, in order
	}{
		{"colon-description", "colon-description", false,
			[]string{"SKILL.md:3: front matter: not valid YAML (mapping values are not allowed in this context); read with the value of description quoted"}},
		{"name-mismatch", "another-name", false, []string{`SKILL.md:2: name: "another-name" differs from the folder's name "name-mismatch"`}},
		{"long-name", "long-name-that-goes-on-and-on-well-past-the-sixty-four-characters-the-spec-allows", false,
			[]string{"name: 81 characters, above the limit of 64", "differs from the folder's name"}},
		{"no-name", "no-name", false, []string{`SKILL.md:2: name: missing; the folder's name "no-name" is used`}},
		{"claude-fields", "claude-fields", false,
			[]string{"SKILL.md:4: argument-hint: unknown field, ignored", "SKILL.md:5: model: unknown field, ignored"}},
		{"ambiguous-scripts", "ambiguous-scripts", false,
			[]string{"2 scripts under scripts/ and ## Usage names none of them: set metadata sandboxd.entry; not executable"}},
		{"bad-params", "bad-params", false, []string{
			`SKILL.md:8: ## Parameters: ### input: "sometimes" is not required, optional, positional position N, named parameter or flag: not executable`,
			"positional count is at position 3: positions are 0, 1, 2 … without gaps or repeats: not executable"}},
		{"bad-timeout", "bad-timeout", true, []string{
			`SKILL.md:20: ## Timeout: "forever" is not a timeout`,
			"SKILL.md:16: ## Parameters: ### level: unknown type \"`enum`\", read as a string"}},
		{"params-no-script", "params-no-script", false,
			[]string{"SKILL.md:6: ## Parameters: no script under scripts/ (nor metadata sandboxd.entry): not executable"}},
		{"deps-other-kind", "deps-other-kind", false, []string{
			`installer: deps/gpu/install.sh is not used: should_run_in_sandbox is "main"`,
			"SKILL.md:7: installer: deps/install.sh is mentioned but not in the folder"}},
	}
	assert.Len(t, byPath, len(cases))
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			s := byPath[c.path]
			require.NotNil(t, s, "not loaded")
			assert.Equal(t, c.name, s.Name)
			assert.Equal(t, c.exec, s.Exec != nil)
			require.Len(t, s.Warnings, len(c.warnings), "%q", s.Warnings)
			for i, w := range c.warnings {
				assert.Contains(t, s.Warnings[i], w)
			}
		})
	}
	assert.Equal(t, "Use this skill when: the user asks about the weather", byPath["colon-description"].Description)
	assert.Zero(t, byPath["bad-timeout"].Timeout, "an unreadable ## Timeout leaves the default")
	assert.Equal(t, "string", byPath["bad-timeout"].Exec.Params[0].Type)
	assert.Empty(t, byPath["deps-other-kind"].Installer)
}

// TestLoadBrokenFixtures: what the loader skips, and the reason it gives.
func TestLoadBrokenFixtures(t *testing.T) {
	byPath, skipped := loadMap(t, "testdata/broken")
	assert.Empty(t, byPath)
	want := map[string]string{
		"no-front-matter":     "SKILL.md:1: no front matter: the file must start with a line '---'",
		"unclosed":            "SKILL.md:1: the front matter opened on line 1 is not closed by a line '---'",
		"no-description":      "SKILL.md:2: description: missing",
		"empty-description":   "SKILL.md:3: description: empty",
		"bad-yaml":            "front matter: not valid YAML: did not find expected ',' or ']'",
		"not-a-mapping":       "SKILL.md:2: front matter: not a mapping of fields",
		"description-mapping": "SKILL.md:4: description: not a string",
		"bad name":            "the folder's path cannot name a skill",
	}
	assert.Len(t, skipped, len(want))
	for path, reason := range want {
		assert.Contains(t, skipped[path], reason, path)
	}
}

// TestParseFromMemory covers what the fixtures do not: sizes, encodings,
// line ends, YAML oddities.
func TestParseFromMemory(t *testing.T) {
	const ok = "---\nname: s\ndescription: d\n---\nbody\n"
	cases := []struct {
		name    string
		file    string
		err     string // substring of the error; "" loads
		warning string // substring of the only warning, if any
		check   func(*testing.T, *Skill)
	}{
		{name: "minimal", file: ok, check: func(t *testing.T, s *Skill) {
			assert.Equal(t, "body\n", s.Body)
			assert.Nil(t, s.Exec)
		}},
		{name: "CRLF and a BOM", file: "\ufeff---\r\nname: s\r\ndescription: d\r\n---\r\nbody\r\n", check: func(t *testing.T, s *Skill) {
			assert.Equal(t, "d", s.Description)
			assert.Equal(t, "body\n", s.Body)
		}},
		{name: "no body", file: "---\nname: s\ndescription: d\n---", check: func(t *testing.T, s *Skill) { assert.Empty(t, s.Body) }},
		{name: "empty file", file: "", err: "no front matter"},
		{name: "only the opening line", file: "---", err: "not closed"},
		{name: "empty front matter", file: "---\n---\n", err: "description: missing"},
		{name: "not UTF-8", file: "---\nname: s\ndescription: \xff\n---\n", err: "not UTF-8 text"},
		{name: "NUL byte", file: "---\nname: s\ndescription: d\x00\n---\n", err: "NUL byte"},
		{name: "too big", file: ok + strings.Repeat("x", MaxSkillFile), err: "above the limit of 256 KiB"},
		{name: "block description", file: "---\nname: s\ndescription: |\n  line one\n  line two\n---\n", check: func(t *testing.T, s *Skill) {
			assert.Equal(t, "line one\nline two", s.Description)
		}},
		{name: "colons in two values", file: "---\nname: s\nlicense: MIT: see LICENSE\ndescription: c: d\n---\n",
			warning: "SKILL.md:3: front matter: not valid YAML (mapping values are not allowed in this context); read with the value of license, description quoted",
			check: func(t *testing.T, s *Skill) {
				assert.Equal(t, "MIT: see LICENSE", s.License)
				assert.Equal(t, "c: d", s.Description)
			}},
		{name: "colon on the first line", file: "---\ndescription: c: d\nname: s\n---\n", warning: "SKILL.md:2: front matter: not valid YAML"},
		{name: "quoted colon is valid", file: "---\nname: s\ndescription: \"when: always\"\n---\n", check: func(t *testing.T, s *Skill) {
			assert.Equal(t, "when: always", s.Description)
		}},
		{name: "duplicate key", file: "---\nname: s\ndescription: one\ndescription: two\n---\n", warning: "SKILL.md:4: description: defined again (first on line 3); the last one is used",
			check: func(t *testing.T, s *Skill) { assert.Equal(t, "two", s.Description) }},
		{name: "returns_json as a string", file: "---\nname: s\ndescription: d\nreturns_json: \"true\"\n---\n", check: func(t *testing.T, s *Skill) {
			assert.True(t, s.ReturnsJSON)
		}},
		{name: "returns_json not a bool", file: "---\nname: s\ndescription: d\nreturns_json: maybe\n---\n", warning: "returns_json: not true or false, ignored"},
		{name: "deprecated sandbox field", file: "---\nname: s\ndescription: d\nsandbox: main\n---\n", warning: "sandbox: ignored: OpenSage deprecated it"},
		{name: "metadata not a map", file: "---\nname: s\ndescription: d\nmetadata: [a]\n---\n", warning: "metadata: not a mapping, ignored"},
		{name: "run_in not a name", file: "---\nname: s\ndescription: d\nshould_run_in_sandbox: ../x\n---\n", warning: "is not a sandbox kind",
			check: func(t *testing.T, s *Skill) { assert.Empty(t, s.RunIn) }},
		{name: "metadata timeout and section disagree", file: "---\nname: s\ndescription: d\nmetadata:\n  sandboxd.timeout: \"30\"\n---\n## Timeout\n\n45 seconds\n",
			warning: "45s differs from metadata sandboxd.timeout 30s", check: func(t *testing.T, s *Skill) { assert.Equal(t, 30*time.Second, s.Timeout) }},
		{name: "priority", file: "---\nname: s\ndescription: d\n---\n## Priority\n\n-3\n", check: func(t *testing.T, s *Skill) { assert.Equal(t, -3, s.Priority) }},
		{name: "priority not a number", file: "---\nname: s\ndescription: d\n---\n## Priority\n\nhigh\n", warning: `## Priority: "high" is not an integer`},
		{name: "headings inside code are not sections", file: "---\nname: s\ndescription: d\n---\n```\n## Timeout\n\nforever\n```\n", check: func(t *testing.T, s *Skill) {
			assert.Zero(t, s.Timeout)
		}},
		{name: "hidden", file: "---\nname: s\ndescription: d\ndisable-model-invocation: true\n---\n", check: func(t *testing.T, s *Skill) { assert.True(t, s.Hidden) }},
		{name: "allowed-tools as a list", file: "---\nname: s\ndescription: d\nallowed-tools: [Read, Grep]\n---\n", check: func(t *testing.T, s *Skill) {
			assert.Equal(t, "Read Grep", s.AllowedTools)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Parse(fstest.MapFS{"s/SKILL.md": {Data: []byte(c.file)}}, "s")
			if c.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), c.err)
				assert.Nil(t, s)
				return
			}
			require.NoError(t, err)
			if c.warning != "" {
				require.Len(t, s.Warnings, 1, "%q", s.Warnings)
				assert.Contains(t, s.Warnings[0], c.warning)
			} else {
				assert.Empty(t, s.Warnings)
			}
			if c.check != nil {
				c.check(t, s)
			}
		})
	}
}

// TestParseParameters: the ## Parameters headings and types, and the
// combinations that make a skill not executable.
func TestParseParameters(t *testing.T) {
	cases := []struct {
		name    string
		params  string
		want    []Param
		warning string // substring; with it the skill is not executable unless want is set
	}{
		{name: "none", params: "None.\n", want: []Param{}},
		{name: "backticked names and loose spacing", params: "### `path`   ( Required ,  positional   position 0 )\n**Type:** `string`\n",
			want: []Param{{Name: "path", Kind: Positional, Required: true, Type: "string"}}},
		{name: "named without dashes gets them", params: "### out (optional, named parameter)\n**Type**: `str`\n",
			want: []Param{{Name: "out", Option: "--out", Kind: Named, Type: "string"}}},
		{name: "flag without a type is a bool", params: "### --verbose (optional, flag)\n\nMore output.\n",
			want: []Param{{Name: "verbose", Option: "--verbose", Kind: Flag, Type: "boolean", Description: "More output."}}},
		{name: "types", params: "### a (optional, named)\n**Type**: `float`\n### b (optional, named)\n**Type**: `boolean`\n### c (optional, named)\n**Type**: `list[str]`\n",
			want: []Param{
				{Name: "a", Option: "--a", Kind: Named, Type: "number"},
				{Name: "b", Option: "--b", Kind: Named, Type: "boolean"},
				{Name: "c", Option: "--c", Kind: Named, Type: "array", Variadic: true},
			}},
		{name: "positions in the order written", params: "### a (required, positional)\n**Type**: `str`\n### b (optional, positional)\n**Type**: `str`\n",
			want: []Param{
				{Name: "a", Kind: Positional, Position: 0, Required: true, Type: "string"},
				{Name: "b", Kind: Positional, Position: 1, Type: "string"},
			}},
		{name: "variadic positional of strings", params: "### files (optional, positional position 0+)\n**Type**: `str`\n",
			want: []Param{{Name: "files", Kind: Positional, Variadic: true, Type: "array"}}},
		{name: "a gap", params: "### a (required, positional position 1)\n**Type**: `str`\n", warning: "positions are 0, 1, 2"},
		{name: "a repeat", params: "### a (required, positional position 0)\n### b (required, positional position 0)\n", warning: "positions are 0, 1, 2"},
		{name: "variadic not last", params: "### a (optional, positional position 0+)\n### b (optional, positional position 1)\n", warning: "takes the rest of the arguments"},
		{name: "required after optional", params: "### a (optional, positional position 0)\n### b (required, positional position 1)\n", warning: "required positional b comes after optional a"},
		{name: "twice", params: "### a (optional, named)\n### a (optional, flag)\n", warning: `parameter "a" given twice`},
		{name: "flag not a bool", params: "### --n (optional, flag)\n**Type**: `int`\n", warning: "a flag is a bool, not integer"},
		{name: "no parentheses", params: "### just a title\n", warning: `### "just a title": write`},
		{name: "bad name", params: "### a.b (optional, named)\n", warning: "a parameter name is letters"},
		{name: "dashes on a positional", params: "### --a (optional, positional position 0)\n", warning: "a positional parameter has no leading dashes"},
		{name: "two kinds", params: "### a (optional, flag, named)\n", warning: "more than one kind"},
		{name: "too many", params: strings.Repeat("### a (optional, flag)\n", MaxParams+1), warning: "above the limit of 64"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			file := "---\nname: s\ndescription: d\n---\n## Parameters\n\n" + c.params
			s, err := Parse(fstest.MapFS{"s/SKILL.md": {Data: []byte(file)}, "s/scripts/run.sh": {Data: []byte("#!/bin/sh\n")}}, "s")
			require.NoError(t, err)
			if c.warning != "" {
				require.NotEmpty(t, s.Warnings)
				assert.Contains(t, strings.Join(s.Warnings, "\n"), c.warning)
			}
			if c.want == nil {
				assert.Nil(t, s.Exec, "not executable")
				return
			}
			assert.Empty(t, s.Warnings)
			require.NotNil(t, s.Exec)
			assert.Equal(t, "scripts/run.sh", s.Exec.Entry)
			if len(c.want) == 0 {
				assert.Empty(t, s.Exec.Params)
			} else {
				assert.Equal(t, c.want, s.Exec.Params)
			}
		})
	}
}

// TestExecEntry: which script is the tool.
func TestExecEntry(t *testing.T) {
	const params = "## Parameters\n\n### a (optional, named)\n"
	cases := []struct {
		name  string
		files fstest.MapFS
		body  string
		entry string // "" not executable
	}{
		{"the only script", fstest.MapFS{"s/scripts/x.py": {}}, params, "scripts/x.py"},
		{"usage names one of two", fstest.MapFS{"s/scripts/a.sh": {}, "s/scripts/b.sh": {}}, "## Usage\n\n```bash\nbash /skills/s/scripts/b.sh --a 1\n```\n" + params, "scripts/b.sh"},
		{"usage names a missing one", fstest.MapFS{"s/scripts/a.sh": {}, "s/scripts/b.sh": {}}, "## Usage\n\n```\nscripts/c.sh\n```\n" + params, ""},
		{"scripts but no parameters", fstest.MapFS{"s/scripts/a.sh": {}}, "Run scripts/a.sh.\n", ""},
		{"metadata entry without parameters", fstest.MapFS{"s/run.sh": {}}, "", "run.sh"},
		{"nested scripts are not candidates", fstest.MapFS{"s/scripts/lib/x.sh": {}}, params, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			meta := ""
			if c.files["s/run.sh"] != nil {
				meta = "metadata:\n  sandboxd.entry: run.sh\n"
			}
			c.files["s/SKILL.md"] = &fstest.MapFile{Data: []byte("---\nname: s\ndescription: d\n" + meta + "---\n" + c.body)}
			s, err := Parse(c.files, "s")
			require.NoError(t, err)
			if c.entry == "" {
				assert.Nil(t, s.Exec)
				return
			}
			require.NotNil(t, s.Exec, "%q", s.Warnings)
			assert.Equal(t, c.entry, s.Exec.Entry)
		})
	}
	for _, entry := range []string{"../x.sh", "/etc/passwd", "missing.sh", "SKILL.md", "."} {
		files := fstest.MapFS{"s/SKILL.md": {Data: []byte("---\nname: s\ndescription: d\nmetadata:\n  sandboxd.entry: " + entry + "\n---\n")}}
		s, err := Parse(files, "s")
		require.NoError(t, err)
		assert.Nil(t, s.Exec, entry)
		assert.Contains(t, strings.Join(s.Warnings, "\n"), "sandboxd.entry", entry)
	}
}

func TestParseTimeout(t *testing.T) {
	cases := []struct {
		in   string
		want time.Duration
		err  string
	}{
		{"200 seconds", 200 * time.Second, ""},
		{"Default timeout: 60 seconds", 60 * time.Second, ""},
		{"**300 seconds**", 300 * time.Second, ""},
		{"5m", 5 * time.Minute, ""},
		{"90s", 90 * time.Second, ""},
		{"1m30s", 90 * time.Second, ""},
		{"2 minutes", 2 * time.Minute, ""},
		{"1.5 hours", 90 * time.Minute, ""},
		{"120", 120 * time.Second, ""},
		{"500 ms", 500 * time.Millisecond, ""},
		{"10 seconds (the script stops itself after 8)", 10 * time.Second, ""},
		{"", 0, "no timeout given"},
		{"forever", 0, "is not a timeout"},
		{"0 seconds", 0, "must be above 0"},
		{"25h", 0, "at most 24h0m0s"},
		{"3 fortnights", 0, `unknown unit "fortnights"`},
		{"99999999999999999999999 hours", 0, "is not a timeout"},
	}
	for _, c := range cases {
		d, err := parseTimeout(c.in)
		if c.err != "" {
			require.Error(t, err, c.in)
			assert.Contains(t, err.Error(), c.err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, d, c.in)
	}
}
