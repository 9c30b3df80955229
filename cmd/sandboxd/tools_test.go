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
