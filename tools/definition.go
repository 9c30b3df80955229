package tools

import (
	"encoding/json"
	"fmt"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Annotations are the MCP tool hints (spec 2025-03-26 onward). All four are
// always stated explicitly: the MCP defaults (destructive and open-world true)
// are the wrong guess for most of our tools.
type Annotations struct {
	Title           string `json:"title,omitempty"`
	ReadOnlyHint    bool   `json:"readOnlyHint"`
	DestructiveHint bool   `json:"destructiveHint"`
	IdempotentHint  bool   `json:"idempotentHint"`
	OpenWorldHint   bool   `json:"openWorldHint"`
}

// Definition is what a model sees of a tool.
type Definition struct {
	Name         string             `json:"name"`
	Description  string             `json:"description"`
	InputSchema  *jsonschema.Schema `json:"inputSchema"`
	OutputSchema *jsonschema.Schema `json:"outputSchema,omitempty"`
	Annotations  Annotations        `json:"annotations"`
}

// SchemaFor generates the JSON Schema of T (struct field json names, the
// `jsonschema:"..."` tag as description, omitempty fields optional). The
// tweak functions may add what reflection cannot know: enums, defaults,
// minimums. It panics on a type that has no schema, which is a programming
// error caught by any test that builds the tool.
func SchemaFor[T any](tweak ...func(*jsonschema.Schema)) *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("tools: schema for %T: %v", *new(T), err))
	}
	for _, f := range tweak {
		f(s)
	}
	return s
}

// OpenAIFunction is a tool in OpenAI's function-calling format
// ({"type":"function","function":{...}}).
type OpenAIFunction struct {
	Type     string             `json:"type"`
	Function OpenAIFunctionSpec `json:"function"`
}

// OpenAIFunctionSpec is the inner object of OpenAIFunction.
type OpenAIFunctionSpec struct {
	Name        string             `json:"name"`
	Description string             `json:"description"`
	Parameters  *jsonschema.Schema `json:"parameters"`
}

// OpenAI exports the definition as an OpenAI function-calling tool.
func (d Definition) OpenAI() OpenAIFunction {
	return OpenAIFunction{Type: "function", Function: OpenAIFunctionSpec{
		Name: d.Name, Description: d.Description, Parameters: d.InputSchema,
	}}
}

// MCP exports the definition as an MCP tool definition.
func (d Definition) MCP() *mcp.Tool {
	destructive, openWorld := d.Annotations.DestructiveHint, d.Annotations.OpenWorldHint
	t := &mcp.Tool{
		Name:        d.Name,
		Description: d.Description,
		InputSchema: d.InputSchema,
		Annotations: &mcp.ToolAnnotations{
			Title:           d.Annotations.Title,
			ReadOnlyHint:    d.Annotations.ReadOnlyHint,
			DestructiveHint: &destructive,
			IdempotentHint:  d.Annotations.IdempotentHint,
			OpenWorldHint:   &openWorld,
		},
	}
	if d.OutputSchema != nil {
		t.OutputSchema = d.OutputSchema
	}
	return t
}

// Clone returns a deep copy (schemas included) so a caller may change it.
func (d Definition) Clone() Definition {
	b, err := json.Marshal(d)
	if err != nil {
		panic(err)
	}
	var c Definition
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	return c
}
