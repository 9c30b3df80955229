package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestToolsCommandFormats(t *testing.T) {
	for _, format := range []string{"sandboxd", "mcp", "openai"} {
		t.Run(format, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run([]string{"tools", "--format", format}, stdio{in: &bytes.Buffer{}, out: &out, err: &errb})
			require.Equal(t, exitOK, code, errb.String())
			var defs []map[string]any
			require.NoError(t, json.Unmarshal(out.Bytes(), &defs))
			require.Len(t, defs, 4)
			var names []string
			for _, d := range defs {
				if format == "openai" {
					assert.Equal(t, "function", d["type"])
					d = d["function"].(map[string]any)
				}
				names = append(names, d["name"].(string))
			}
			assert.Equal(t, []string{"terminal", "file_editor", "grep", "glob"}, names)
		})
	}
	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, run([]string{"tools", "--format", "yaml"}, stdio{in: &bytes.Buffer{}, out: &out, err: &errb}))
	assert.Contains(t, errb.String(), "unknown --format")
}

func TestToolsCommandSets(t *testing.T) {
	runTools := func(args ...string) []byte {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(append([]string{"tools"}, args...), stdio{in: &bytes.Buffer{}, out: &out, err: &errb})
		require.Equal(t, exitOK, code, errb.String())
		return out.Bytes()
	}
	var defs []map[string]any
	require.NoError(t, json.Unmarshal(runTools("--set", "openai"), &defs))
	var names []string
	for _, d := range defs {
		names = append(names, d["name"].(string))
	}
	assert.Equal(t, []string{"shell", "apply_patch", "grep", "glob"}, names)

	var o struct {
		Functions []map[string]any `json:"functions"`
		Responses []map[string]any `json:"responses"`
	}
	require.NoError(t, json.Unmarshal(runTools("--format", "openai", "--set", "openai"), &o))
	require.Len(t, o.Functions, 4)
	assert.Equal(t, "shell", o.Functions[0]["function"].(map[string]any)["name"])
	require.Len(t, o.Responses, 4)
	assert.Equal(t, map[string]any{"type": "shell"}, o.Responses[0])
	assert.Equal(t, map[string]any{"type": "apply_patch"}, o.Responses[1])
	assert.Equal(t, "function", o.Responses[2]["type"])
	assert.Equal(t, "grep", o.Responses[2]["name"])
	assert.NotNil(t, o.Responses[2]["parameters"])

	require.NoError(t, json.Unmarshal(runTools("--format", "openai", "--set", "both"), &o))
	require.Len(t, o.Functions, 6)

	var out, errb bytes.Buffer
	assert.Equal(t, exitUsage, run([]string{"tools", "--set", "codex"}, stdio{in: &bytes.Buffer{}, out: &out, err: &errb}))
	assert.Contains(t, errb.String(), "unknown --set")
}
