package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
)

// Executor runs the actions of one tool. A is the tool's action type, whose
// JSON Schema is the tool's input schema. Executors must be safe for
// concurrent Calls; ones that cannot run two actions at once serialise them.
type Executor[A any] interface {
	Call(ctx context.Context, action A) (*Observation, error)
	Close() error
}

// MaxArgumentBytes caps the JSON arguments of one call. file_editor's
// file_text is bounded by the 10 MiB file limit; this leaves room for JSON
// escaping.
const MaxArgumentBytes = 24 << 20

// Tool is a Definition bound to the function that runs it.
type Tool struct {
	def      Definition
	resolved *jsonschema.Resolved
	call     func(ctx context.Context, args json.RawMessage) (*Observation, error)
	closer   io.Closer // shared by tools of one executor; closed once by the Toolset
}

// New builds a tool from an executor. The input schema is generated from A
// unless def.InputSchema is already set.
func New[A any](def Definition, exec Executor[A]) (*Tool, error) {
	return NewFunc(def, exec.Call, exec)
}

// NewFunc builds a tool from a function; closer (may be nil) is the executor
// the function belongs to, closed once when the Toolset closes even if
// several tools share it.
func NewFunc[A any](def Definition, fn func(context.Context, A) (*Observation, error), closer io.Closer) (*Tool, error) {
	if def.Name == "" {
		return nil, errors.New("tools: definition has no name")
	}
	if def.InputSchema == nil {
		def.InputSchema = SchemaFor[A]()
	}
	resolved, err := def.InputSchema.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("tools: %s: input schema: %w", def.Name, err)
	}
	t := &Tool{def: def, resolved: resolved, closer: closer}
	t.call = func(ctx context.Context, raw json.RawMessage) (*Observation, error) {
		var action A
		if obs := t.decode(raw, &action); obs != nil {
			return obs, nil
		}
		return fn(ctx, action)
	}
	return t, nil
}

// Definition returns the tool's definition.
func (t *Tool) Definition() Definition { return t.def }

// Name returns the tool's name.
func (t *Tool) Name() string { return t.def.Name }

// Call validates raw JSON arguments against the input schema, decodes them
// and runs the tool. Invalid arguments give an IsError observation that says
// what is wrong, never a Go error.
func (t *Tool) Call(ctx context.Context, args json.RawMessage) (*Observation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return t.call(ctx, args)
}

func (t *Tool) decode(raw json.RawMessage, into any) *Observation {
	if len(raw) > MaxArgumentBytes {
		return Errorf("Invalid arguments for tool %q: %d bytes of arguments exceed the limit of %d bytes.", t.def.Name, len(raw), MaxArgumentBytes)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		raw = []byte("{}")
	}
	var generic any
	if err := json.Unmarshal(raw, &generic); err != nil {
		return Errorf("Invalid arguments for tool %q: not valid JSON: %v", t.def.Name, err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return Errorf("Invalid arguments for tool %q: expected a JSON object of parameters, got %s.", t.def.Name, jsonKind(generic))
	}
	if err := t.resolved.Validate(generic); err != nil {
		return Errorf("Invalid arguments for tool %q: %s", t.def.Name, cleanValidationError(err))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return Errorf("Invalid arguments for tool %q: %v", t.def.Name, err)
	}
	return nil
}

func jsonKind(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// cleanValidationError drops the schema-internal prefix of validator errors
// ("validating root: ...") that means nothing to a model.
func cleanValidationError(err error) string {
	s := err.Error()
	s = strings.TrimPrefix(s, "validating root: ")
	s = strings.TrimPrefix(s, "validating /: ")
	return s
}
