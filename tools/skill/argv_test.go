package skill

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/skills"
)

// The parameters of OpenSage's run-fuzzing-campaign, plus a named list and
// typed named parameters.
var fuzzParams = []skills.Param{
	{Name: "fuzz_target", Kind: skills.Positional, Position: 0, Required: true, Type: "string"},
	{Name: "duration_seconds", Kind: skills.Positional, Position: 1, Required: true, Type: "integer"},
	{Name: "seed_paths", Kind: skills.Positional, Position: 2, Variadic: true, Type: "array"},
	{Name: "custom_mutator_path", Option: "--custom_mutator_path", Kind: skills.Named, Type: "string"},
	{Name: "reset_output", Option: "--reset_output", Kind: skills.Flag, Type: "boolean"},
	{Name: "tag", Kind: skills.Named, Type: "array"},
	{Name: "ratio", Option: "-r", Kind: skills.Named, Type: "number"},
	{Name: "verbose", Kind: skills.Named, Type: "boolean"},
}

func decodeArgs(t *testing.T, s string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m))
	return m
}

func TestArgv(t *testing.T) {
	s := &skills.Skill{Path: "fuzz/run", Exec: &skills.Exec{Entry: "scripts/run_fuzzing_campaign.sh", Params: fuzzParams}}
	script := "/skills/fuzz/run/scripts/run_fuzzing_campaign.sh"
	for _, tc := range []struct {
		name string
		args string
		want []string
	}{
		{"required only", `{"fuzz_target":"target_binary","duration_seconds":180}`,
			[]string{"bash", script, "target_binary", "180"}},
		{"variadic spreads", `{"fuzz_target":"t","duration_seconds":1,"seed_paths":["/a b","/c"]}`,
			[]string{"bash", script, "t", "1", "/a b", "/c"}},
		{"named and flag after the positionals, in ## Parameters order", `{"reset_output":true,"custom_mutator_path":"/m.py","fuzz_target":"t","duration_seconds":1}`,
			[]string{"bash", script, "t", "1", "--custom_mutator_path", "/m.py", "--reset_output"}},
		{"a false flag is left out", `{"fuzz_target":"t","duration_seconds":1,"reset_output":false}`,
			[]string{"bash", script, "t", "1"}},
		{"null is not given", `{"fuzz_target":"t","duration_seconds":1,"custom_mutator_path":null,"seed_paths":null}`,
			[]string{"bash", script, "t", "1"}},
		{"an empty list adds nothing", `{"fuzz_target":"t","duration_seconds":1,"seed_paths":[]}`,
			[]string{"bash", script, "t", "1"}},
		{"a named list repeats its option", `{"fuzz_target":"t","duration_seconds":1,"tag":["x","y"]}`,
			[]string{"bash", script, "t", "1", "--tag", "x", "--tag", "y"}},
		{"an integer written as a float", `{"fuzz_target":"t","duration_seconds":18e1}`,
			[]string{"bash", script, "t", "180"}},
		{"numbers as written, booleans as words", `{"fuzz_target":"t","duration_seconds":5,"ratio":0.250,"verbose":false}`,
			[]string{"bash", script, "t", "5", "-r", "0.250", "--verbose", "false"}},
		{"a named value may begin with '-'", `{"fuzz_target":"t","duration_seconds":5,"ratio":-1e-3,"verbose":true,"custom_mutator_path":"--x"}`,
			[]string{"bash", script, "t", "5", "--custom_mutator_path", "--x", "-r", "-0.001", "--verbose", "true"}},
		{"shell syntax is data", `{"fuzz_target":"; rm -rf /workspace","duration_seconds":1,"seed_paths":["$(touch pwned)","` + "`id`" + `","a\nb","*"]}`,
			[]string{"bash", script, "; rm -rf /workspace", "1", "$(touch pwned)", "`id`", "a\nb", "*"}},
		{"an empty string is an argument", `{"fuzz_target":"","duration_seconds":1}`,
			[]string{"bash", script, "", "1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, err := Argv(s, "/skills/fuzz/run", decodeArgs(t, tc.args))
			if tc.want == nil {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, argv)
		})
	}
}

func TestArgvRefuses(t *testing.T) {
	s := &skills.Skill{Path: "fuzz/run", Exec: &skills.Exec{Entry: "scripts/run.sh", Params: fuzzParams}}
	for _, tc := range []struct {
		args, want string
	}{
		{`{"duration_seconds":1}`, "missing required parameter `fuzz_target`"},
		{`{"fuzz_target":"t","duration_seconds":1,"bogus":1}`, "unknown parameter `bogus`; the parameters are `fuzz_target`, `duration_seconds`"},
		{`{"fuzz_target":"-rf","duration_seconds":1}`, "`fuzz_target` is \"-rf\": a positional value may not begin with '-'"},
		{`{"fuzz_target":"--force","duration_seconds":1}`, "may not begin with '-'"},
		{`{"fuzz_target":"t","duration_seconds":1,"seed_paths":["ok","-x"]}`, "`seed_paths` is \"-x\""},
		{`{"fuzz_target":"t","duration_seconds":-5}`, "`duration_seconds` is \"-5\""},
		{`{"fuzz_target":"t","duration_seconds":1.5}`, "`duration_seconds` must be an integer, got 1.5"},
		{`{"fuzz_target":"t","duration_seconds":1e30}`, "`duration_seconds` must be an integer between"},
		{`{"fuzz_target":"t","duration_seconds":"5"}`, "`duration_seconds` must be an integer, not a string"},
		{`{"fuzz_target":5,"duration_seconds":1}`, "`fuzz_target` must be a string, not a number"},
		{`{"fuzz_target":"t","duration_seconds":1,"reset_output":"yes"}`, "`reset_output` must be a boolean, not a string"},
		{`{"fuzz_target":"t","duration_seconds":1,"seed_paths":"/a"}`, "`seed_paths` must be an array, not a string"},
		{`{"fuzz_target":"t","duration_seconds":1,"seed_paths":[1]}`, "`seed_paths[0]` must be a string, not a number"},
		{`{"fuzz_target":"t","duration_seconds":1,"verbose":"true"}`, "`verbose` must be a boolean"},
		{`{"fuzz_target":"a\u0000b","duration_seconds":1}`, "NUL byte"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := Argv(s, "/skills/fuzz/run", decodeArgs(t, tc.args))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// A given positional after a missing optional one would take its place.
func TestArgvRefusesAGapInPositionals(t *testing.T) {
	s := &skills.Skill{Path: "p", Exec: &skills.Exec{Entry: "run.py", Params: []skills.Param{
		{Name: "a", Kind: skills.Positional, Position: 0, Type: "string"},
		{Name: "b", Kind: skills.Positional, Position: 1, Type: "string"},
	}}}
	argv, err := Argv(s, "/skills/p", map[string]any{"a": "x"})
	require.NoError(t, err)
	assert.Equal(t, []string{"python3", "/skills/p/run.py", "x"}, argv)
	_, err = Argv(s, "/skills/p", map[string]any{"b": "y"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "`b` (position 1) is given but `a` (position 0) is not")
}

func TestArgvInterpreterAndEntry(t *testing.T) {
	for entry, want := range map[string][]string{
		"scripts/run.sh":  {"bash", "/s/x/scripts/run.sh"},
		"scripts/RUN.SH":  {"bash", "/s/x/scripts/RUN.SH"},
		"tool.py":         {"python3", "/s/x/tool.py"},
		"bin/tool":        {"/s/x/bin/tool"},
		"./scripts/a.rb":  {"/s/x/scripts/a.rb"},
		"scripts/../b.sh": {"bash", "/s/x/b.sh"},
	} {
		argv, err := Argv(&skills.Skill{Path: "x", Exec: &skills.Exec{Entry: entry}}, "/s/x", nil)
		require.NoError(t, err, entry)
		assert.Equal(t, want, argv, entry)
	}
	for _, entry := range []string{"", "/bin/sh", "../other/run.sh", "scripts/../../x.sh", "."} {
		_, err := Argv(&skills.Skill{Path: "x", Exec: &skills.Exec{Entry: entry}}, "/s/x", nil)
		require.Error(t, err, entry)
	}
	_, err := Argv(&skills.Skill{Path: "x"}, "/s/x", nil)
	assert.ErrorContains(t, err, "not executable")
}

// The injection string reaches a real script as one argument and touches
// nothing: the workspace and its canary are still there.
func TestArgvInjectionThroughARealScript(t *testing.T) {
	f := newFixture(t)
	canary := filepath.Join(f.workspace, "canary")
	require.NoError(t, os.WriteFile(canary, []byte("alive"), 0o600))
	s := f.skill(&skills.Skill{Path: "echo-args", Exec: execOf(
		skills.Param{Name: "text", Kind: skills.Positional, Position: 0, Required: true, Type: "string"},
		skills.Param{Name: "more", Kind: skills.Positional, Position: 1, Variadic: true, Type: "array"},
	)}, map[string]string{"scripts/run.sh": "printf '[%s]\\n' \"$@\"\necho \"argc=$#\"\n"})
	ts := toolset(t, f.executor(s))
	args, err := json.Marshal(map[string]any{
		"text": "; rm -rf " + f.workspace,
		"more": []string{"$(touch pwned)", "`touch pwned2`", "&& touch pwned3", "|| true", "'\"", "*"},
	})
	require.NoError(t, err)
	obs := call(t, ts, "echo-args", string(args))
	require.False(t, obs.IsError, obs.Text())
	assert.Equal(t, "[; rm -rf "+f.workspace+"]\n[$(touch pwned)]\n[`touch pwned2`]\n[&& touch pwned3]\n[|| true]\n['\"]\n[*]\nargc=7\n[The skill exited with code 0.]", obs.Text())
	got, err := os.ReadFile(canary)
	require.NoError(t, err)
	assert.Equal(t, "alive", string(got))
	entries, err := os.ReadDir(f.workspace)
	require.NoError(t, err)
	assert.Len(t, entries, 1, "nothing was created in the workspace")
}
