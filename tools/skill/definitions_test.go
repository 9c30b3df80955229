package skill

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/mcpexport"
)

var builtins = []string{"terminal", "file_editor", "grep", "glob"}

func TestDefinitionsWithoutSkills(t *testing.T) {
	defs, warnings := Definitions(nil, builtins)
	assert.Empty(t, defs)
	assert.Empty(t, warnings)
}

// catalog is the part of load_skill's description after "Available
// skills:".
func catalog(t *testing.T, d tools.Definition) string {
	t.Helper()
	_, c, ok := strings.Cut(d.Description, "\n\nAvailable skills:\n")
	require.True(t, ok, d.Description)
	return c
}

func enumOf(t *testing.T, d tools.Definition) []string {
	t.Helper()
	var names []string
	for _, v := range d.InputSchema.Properties["name"].Enum {
		names = append(names, v.(string))
	}
	return names
}

func TestLoadSkillDefinition(t *testing.T) {
	ss := []*skills.Skill{
		{Path: "b/second", Name: "second", Description: "Second\n  skill:   spans lines."},
		{Path: "a/first", Name: "first", Description: "First skill."},
		{Path: "c/hidden", Name: "hidden", Description: "Not in the catalog.", Hidden: true},
	}
	defs, warnings := Definitions(ss, builtins)
	require.Len(t, defs, 1, "no skill is executable")
	assert.Empty(t, warnings)
	d := defs[0]
	assert.Equal(t, LoadName, d.Name)
	assert.Equal(t, "- first: First skill.\n- second: Second skill: spans lines.", catalog(t, d), "by path, one line each, hidden left out")
	assert.Equal(t, []string{"first", "second", "hidden"}, enumOf(t, d), "every skill can be loaded")
	assert.Equal(t, []string{"name"}, d.InputSchema.Required)
	assert.True(t, d.Annotations.ReadOnlyHint)
	assert.False(t, d.Annotations.DestructiveHint)
	b, err := json.Marshal(mcpexport.Tool(d).InputSchema)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"additionalProperties":false`)
}

// 300 skills with long descriptions: the catalog stays within its budget,
// descriptions shortened first, then skills dropped, named in a warning;
// every skill can still be loaded by name.
func TestCatalogBudgetWith300Skills(t *testing.T) {
	var ss []*skills.Skill
	for i := range 300 {
		ss = append(ss, &skills.Skill{
			Path: fmt.Sprintf("group/skill-%03d", i), Name: fmt.Sprintf("skill-%03d", i),
			Description: fmt.Sprintf("Skill number %d. ", i) + strings.Repeat("It does a great many useful things. ", 8),
		})
	}
	defs, warnings := Definitions(ss, builtins)
	require.Len(t, defs, 1)
	c := catalog(t, defs[0])
	assert.LessOrEqual(t, utf8.RuneCountInString(c), CatalogBudget)
	assert.Greater(t, utf8.RuneCountInString(c), CatalogBudget-200, "the budget is used")
	lines := strings.Split(c, "\n")
	require.Less(t, len(lines), 300)
	for _, l := range lines {
		assert.LessOrEqual(t, utf8.RuneCountInString(l), len("- skill-000: ")+minDescription, l)
		assert.True(t, strings.HasSuffix(l, "…"), l)
	}
	assert.True(t, strings.HasPrefix(lines[0], "- skill-000: Skill number 0. It does"), lines[0])
	require.Len(t, warnings, 1)
	dropped := 300 - len(lines)
	assert.Contains(t, warnings[0], fmt.Sprintf("descriptions are shortened to %d characters and %d skills are left out of it (they can still be loaded by name): ", minDescription, dropped))
	assert.Contains(t, warnings[0], fmt.Sprintf("skill-%03d, ", len(lines)), "the first skill left out is named")
	assert.True(t, strings.HasSuffix(warnings[0], "skill-299"), "the last one too")
	assert.Len(t, enumOf(t, defs[0]), 300)
}

// Fewer skills fit once their descriptions are shortened: none is dropped,
// and the descriptions keep as much as the budget allows.
func TestCatalogShortensBeforeDropping(t *testing.T) {
	var ss []*skills.Skill
	for i := range 40 {
		ss = append(ss, &skills.Skill{Path: fmt.Sprintf("s%02d", i), Name: fmt.Sprintf("s%02d", i), Description: strings.Repeat("word ", 100)})
	}
	defs, warnings := Definitions(ss, builtins)
	c := catalog(t, defs[0])
	assert.LessOrEqual(t, utf8.RuneCountInString(c), CatalogBudget)
	assert.Len(t, strings.Split(c, "\n"), 40)
	require.Len(t, warnings, 1)
	m := regexp.MustCompile(`descriptions are shortened to (\d+) characters$`).FindStringSubmatch(warnings[0])
	require.NotNil(t, m, warnings[0])
	assert.NotEqual(t, fmt.Sprint(minDescription), m[1], "longer than the minimum")
}

func TestToolNames(t *testing.T) {
	long := strings.Repeat("a", 80)
	for _, tc := range []struct{ name, path, want string }{
		{"run-fuzzing-campaign", "fuzz/run-fuzzing-campaign", "run-fuzzing-campaign"},
		{"My Skill.v2", "x", "My_Skill_v2"},
		{"", "fuzz/from-path", "from-path"},
		{"données", "x", "donn__es"},
	} {
		assert.Equal(t, tc.want, ToolName(&skills.Skill{Name: tc.name, Path: tc.path}))
	}
	a := ToolName(&skills.Skill{Name: long + "-one"})
	b := ToolName(&skills.Skill{Name: long + "-two"})
	for _, n := range []string{a, b} {
		assert.Len(t, n, MaxNameLen)
		assert.Regexp(t, `^[A-Za-z0-9_-]{1,64}$`, n)
		assert.True(t, strings.HasPrefix(n, strings.Repeat("a", 55)+"_"), n)
	}
	assert.NotEqual(t, a, b, "the hash keeps long names apart")
	assert.Equal(t, strings.Repeat("b", 64), ToolName(&skills.Skill{Name: strings.Repeat("b", 64)}), "64 characters is not cut")
}

// A skill whose tool name is taken by a built-in tool or an earlier skill
// is not a tool; the warning names both owners. Skills sharing a name are
// told apart by path in load_skill.
func TestNameClashes(t *testing.T) {
	ss := []*skills.Skill{
		{Path: "x/terminal", Name: "terminal", Exec: execOf()},
		{Path: "a/dup", Name: "dup", Exec: execOf()},
		{Path: "b/dup", Name: "dup", Exec: execOf()},
		{Path: "c/loader", Name: "load_skill", Exec: execOf()},
		{Path: "d/ok", Name: "ok", Exec: execOf()},
	}
	defs, warnings := Definitions(ss, builtins)
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	assert.Equal(t, []string{LoadName, "dup", "ok"}, names)
	assert.Equal(t, []string{"dup", "b/dup", "load_skill", "ok", "terminal"}, enumOf(t, defs[0]))
	assert.ElementsMatch(t, []string{
		`skills "a/dup" and "b/dup" are both named "dup": load_skill knows the second by its path "b/dup"`,
		`skill "b/dup" is not a tool: its tool name "dup" is taken by skill "a/dup"`,
		`skill "c/loader" is not a tool: its tool name "load_skill" is taken by the built-in tool "load_skill"`,
		`skill "x/terminal" is not a tool: its tool name "terminal" is taken by the built-in tool "terminal"`,
	}, warnings)
	assert.Contains(t, defs[1].Description, `call load_skill with name "dup"`)
}

// Parameters that make no command line keep the skill from being a tool.
func TestBadParametersAreWarnings(t *testing.T) {
	for _, tc := range []struct {
		exec *skills.Exec
		want string
	}{
		{&skills.Exec{Entry: "/abs.sh"}, "its script \"/abs.sh\": an absolute path"},
		{&skills.Exec{Entry: "../x.sh"}, "leads outside"},
		{execOf(skills.Param{Name: "a b", Kind: skills.Named}), `parameter name "a b" is not a valid argument name`},
		{execOf(skills.Param{Name: "a", Kind: skills.Named}, skills.Param{Name: "a", Kind: skills.Flag}), `parameter "a" is declared twice`},
		{execOf(skills.Param{Name: "a", Kind: "weird"}), `unknown kind "weird"`},
		{execOf(skills.Param{Name: "a", Kind: skills.Named, Type: "object"}), `unknown type "object"`},
		{execOf(skills.Param{Name: "a", Kind: skills.Positional}, skills.Param{Name: "b", Kind: skills.Positional}), `parameters "a" and "b" are both at position 0`},
		{execOf(skills.Param{Name: "a", Kind: skills.Positional, Variadic: true}, skills.Param{Name: "b", Kind: skills.Positional, Position: 1}), `the list parameter "a" at position 0 is not the last positional`},
		{execOf(skills.Param{Name: "a", Kind: skills.Named, Option: "a;b"}), `not an option like --name`},
	} {
		defs, warnings := Definitions([]*skills.Skill{{Path: "p", Name: "p", Exec: tc.exec}}, builtins)
		assert.Len(t, defs, 1, tc.want)
		require.Len(t, warnings, 1, tc.want)
		assert.Contains(t, warnings[0], `skill "p" is not a tool: `+"")
		assert.Contains(t, warnings[0], tc.want)
	}
}

func TestSkillToolDefinition(t *testing.T) {
	s := &skills.Skill{
		Path: "fuzz/run-fuzzing-campaign", Name: "run-fuzzing-campaign",
		Description: "Run a fuzzing campaign using AFL++.", ReturnsJSON: true,
		Exec: &skills.Exec{Entry: "scripts/run_fuzzing_campaign.sh", Params: fuzzParams},
	}
	defs, warnings := Definitions([]*skills.Skill{s}, builtins)
	require.Empty(t, warnings)
	require.Len(t, defs, 2)
	d := defs[1]
	assert.Equal(t, "run-fuzzing-campaign", d.Name)
	assert.True(t, strings.HasPrefix(d.Description, "Run a fuzzing campaign using AFL++.\n\nRuns the script of skill \"fuzz/run-fuzzing-campaign\" (/skills/fuzz/run-fuzzing-campaign/scripts/run_fuzzing_campaign.sh)"), d.Description)
	assert.Contains(t, d.Description, "as: run_fuzzing_campaign.sh <fuzz_target> <duration_seconds> [<seed_paths>...] [--custom_mutator_path <custom_mutator_path>] [--reset_output] [--tag <tag> (repeated per value)] [-r <ratio>] [--verbose <verbose>]")
	assert.Contains(t, d.Description, "stopped after 60 seconds")
	assert.Contains(t, d.Description, "Its stdout is JSON")
	b, err := json.Marshal(mcpexport.Tool(d).InputSchema)
	require.NoError(t, err)
	assert.JSONEq(t, `{
		"type": "object",
		"properties": {
			"fuzz_target": {"type": "string"},
			"duration_seconds": {"type": "integer"},
			"seed_paths": {"type": "array", "items": {"type": "string"}},
			"custom_mutator_path": {"type": "string"},
			"reset_output": {"type": "boolean"},
			"tag": {"type": "array", "items": {"type": "string"}},
			"ratio": {"type": "number"},
			"verbose": {"type": "boolean"}
		},
		"required": ["fuzz_target", "duration_seconds"],
		"additionalProperties": false
	}`, string(b))
	assert.Less(t, strings.Index(string(b), "fuzz_target"), strings.Index(string(b), "verbose"), "properties in ## Parameters order")

	// The schema is what calls are validated against.
	tool, err := tools.NewFunc(d, func(_ context.Context, _ json.RawMessage) (*tools.Observation, error) {
		return tools.TextResult("ran", nil), nil
	}, nil)
	require.NoError(t, err)
	for args, want := range map[string]string{
		`{"fuzz_target":"t","duration_seconds":3}`:                  "ran",
		`{"fuzz_target":"t"}`:                                       "missing required parameter `duration_seconds`",
		`{"fuzz_target":"t","duration_seconds":3,"nope":1}`:         "unknown parameter `nope`",
		`{"fuzz_target":"t","duration_seconds":"3"}`:                "`duration_seconds` must be an integer, not a string",
		`{"fuzz_target":"t","duration_seconds":3,"seed_paths":[1]}`: "must be a string",
	} {
		obs, err := tool.Call(context.Background(), json.RawMessage(args))
		require.NoError(t, err)
		assert.Contains(t, obs.Text(), want, args)
	}
}

// A required list needs at least one element.
func TestRequiredListHasMinItems(t *testing.T) {
	s := paramSchema(skills.Param{Name: "files", Kind: skills.Positional, Variadic: true, Required: true, Type: "integer"})
	require.NotNil(t, s.MinItems)
	assert.Equal(t, 1, *s.MinItems)
	assert.Equal(t, "integer", s.Items.Type)
}
