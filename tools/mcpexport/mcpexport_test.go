package mcpexport

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
)

// An MCP export states every annotation (MCP's defaults, destructive and
// open-world, are the wrong guess for most tools) and shows the input
// schema without null types, leaving the definition as it was.
func TestTool(t *testing.T) {
	in := &jsonschema.Schema{Type: "object", Properties: map[string]*jsonschema.Schema{
		"times": {Types: []string{"null", "integer"}},
	}}
	d := tools.Definition{Name: "echo", Description: "echoes", InputSchema: in,
		OutputSchema: &jsonschema.Schema{Type: "object"},
		Annotations:  tools.Annotations{Title: "Echo", ReadOnlyHint: true}}
	m := Tool(d)
	assert.Equal(t, "echo", m.Name)
	assert.Equal(t, "echoes", m.Description)
	require.NotNil(t, m.Annotations.DestructiveHint)
	assert.False(t, *m.Annotations.DestructiveHint)
	require.NotNil(t, m.Annotations.OpenWorldHint)
	assert.False(t, *m.Annotations.OpenWorldHint)
	assert.True(t, m.Annotations.ReadOnlyHint)
	assert.Equal(t, "Echo", m.Annotations.Title)
	assert.Equal(t, d.OutputSchema, m.OutputSchema)
	b, err := json.Marshal(m.InputSchema)
	require.NoError(t, err)
	assert.JSONEq(t, `{"type":"object","properties":{"times":{"type":"integer"}}}`, string(b))
	assert.Equal(t, []string{"null", "integer"}, in.Properties["times"].Types, "the definition is left as it was")
}
