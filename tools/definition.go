package tools

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/jsonschema-go/jsonschema"
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
		Name: d.Name, Description: d.Description, Parameters: ModelSchema(d.InputSchema),
	}}
}

// ModelSchema is an input schema as a model is shown it: a parameter that
// may be null (a Go pointer: "not given") shows only its other type, as
// OpenHands shows Optional fields. Some model APIs refuse type arrays
// (Gemini's function declarations take one type), and a model has no
// reason to send null for a parameter it can leave out. Calls are still
// validated against InputSchema, so a null sent anyway is accepted.
func ModelSchema(s *jsonschema.Schema) *jsonschema.Schema {
	c := s.CloneSchemas()
	dropNullTypes(c)
	return c
}

func dropNullTypes(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if i := slices.Index(s.Types, "null"); i >= 0 && len(s.Types) == 2 {
		s.Type, s.Types = s.Types[1-i], nil
	}
	for _, sub := range s.Properties {
		dropNullTypes(sub)
	}
	for _, subs := range [][]*jsonschema.Schema{s.PrefixItems, s.AnyOf, s.OneOf, s.AllOf} {
		for _, sub := range subs {
			dropNullTypes(sub)
		}
	}
	dropNullTypes(s.Items)
	dropNullTypes(s.AdditionalProperties)
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
