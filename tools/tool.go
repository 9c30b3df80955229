package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/big"
	"regexp"
	"slices"
	"strconv"
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
		return Errorf("Invalid arguments for tool %q: %s", t.def.Name, cleanValidationError(err, t.paramNames()))
	}
	err := decodeStrict(raw, into)
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// The schema took it, so it is an integer written as a float
		// (5.0, 1e2), as models and Python clients send: decode the
		// validated value, which marshals as 5.
		if again, merr := json.Marshal(generic); merr == nil {
			err = decodeStrict(again, into)
		}
	}
	if err != nil {
		return Errorf("Invalid arguments for tool %q: %v", t.def.Name, err)
	}
	return nil
}

func decodeStrict(raw []byte, into any) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	return dec.Decode(into)
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

// cleanValidationError words a validator error for a model: the parameter
// by name, what it must be and what it got, without the schema's internals
// ("validating /properties/timeout: minimum: -1/1 is less than 0.000000"
// becomes "`timeout` must be at least 0, got -1"). params are the names
// the tool takes, listed when an unknown one is given.
func cleanValidationError(err error, params []string) string {
	s := err.Error()
	path := ""
	for strings.HasPrefix(s, "validating ") {
		i := strings.Index(s, ": ")
		if i < 0 {
			break
		}
		path, s = s[len("validating "):i], s[i+2:]
	}
	name := paramName(path)
	subject := "the arguments"
	if name != "" {
		subject = "`" + name + "`"
	}
	if m := reType.FindStringSubmatch(s); m != nil {
		return fmt.Sprintf("%s must be %s, not %s", subject, article(m[2]), article(m[1]))
	}
	if m := reTypes.FindStringSubmatch(s); m != nil {
		// An optional parameter may be null ("not given"): name the rest.
		var want []string
		for _, w := range strings.Split(m[2], ", ") {
			if w != "null" {
				want = append(want, article(w))
			}
		}
		return fmt.Sprintf("%s must be %s, not %s", subject, strings.Join(want, " or "), article(m[1]))
	}
	if m := reBound.FindStringSubmatch(s); m != nil {
		got, bound := ratText(m[2]), ratText(m[4])
		switch m[1] {
		case "minimum":
			return fmt.Sprintf("%s must be at least %s, got %s", subject, bound, got)
		case "maximum":
			return fmt.Sprintf("%s must be at most %s, got %s", subject, bound, got)
		}
	}
	if m := reEnum.FindStringSubmatch(s); m != nil {
		return fmt.Sprintf("%s must be one of %s, got %q", subject, strings.Join(strings.Fields(m[2]), ", "), m[1])
	}
	if m := reRequired.FindStringSubmatch(s); m != nil {
		return fmt.Sprintf("missing required parameter %s", quotedList(m[1]))
	}
	if m := reUnknown.FindStringSubmatch(s); m != nil {
		msg := fmt.Sprintf("unknown parameter %s", quotedList(m[1]))
		if len(params) > 0 {
			msg += "; the parameters are " + strings.Join(params, ", ")
		}
		return msg
	}
	if m := reItems.FindStringSubmatch(s); m != nil {
		return fmt.Sprintf("%s must have %s %s items, got %s", subject, map[string]string{"min": "at least", "max": "at most"}[m[1]], m[4], m[2])
	}
	if name != "" {
		return subject + ": " + s
	}
	return s
}

var (
	reType     = regexp.MustCompile(`(?s)^type: .* has type "(\w+)", want "(\w+)"$`)
	reTypes    = regexp.MustCompile(`(?s)^type: .* has type "(\w+)", want one of "([\w, ]+)"$`)
	reBound    = regexp.MustCompile(`^(minimum|maximum): (\S+) is (less|greater) than (\S+)$`)
	reEnum     = regexp.MustCompile(`(?s)^enum: (.*) does not equal any of: \[(.*)\]$`)
	reRequired = regexp.MustCompile(`^required: missing properties: \[(.*)\]$`)
	reUnknown  = regexp.MustCompile(`^unexpected additional properties \[(.*)\]$`)
	reItems    = regexp.MustCompile(`^(min|max)Items: array length (\d+) is (less|greater) than (\d+)$`)
)

// paramName turns a schema path (/properties/view_range/items/0) into a
// parameter name (view_range[0]); the root is "".
func paramName(path string) string {
	path = strings.TrimPrefix(path, "root")
	var b strings.Builder
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i := 0; i < len(parts); i++ {
		switch {
		case parts[i] == "properties" && i+1 < len(parts):
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(parts[i+1])
			i++
		case parts[i] == "items":
			if i+1 < len(parts) {
				b.WriteString("[" + parts[i+1] + "]")
				i++
			} else {
				b.WriteString("[]")
			}
		}
	}
	return b.String()
}

// ratText prints a validator number ("-1/1", "0.000000") plainly.
func ratText(s string) string {
	if r, ok := new(big.Rat).SetString(s); ok {
		f, _ := r.Float64()
		return strconv.FormatFloat(f, 'g', -1, 64)
	}
	return s
}

func article(jsonType string) string {
	switch jsonType {
	case "null":
		return "null"
	case "array", "object", "integer":
		return "an " + jsonType
	}
	return "a " + jsonType
}

// quotedList turns `"a" "b"` (Go's %q of a []string) into `a`, `b`.
func quotedList(s string) string {
	var names []string
	for _, f := range strings.Fields(s) {
		if u, err := strconv.Unquote(f); err == nil {
			f = u
		}
		names = append(names, "`"+f+"`")
	}
	return strings.Join(names, ", ")
}

// paramNames are the names of the tool's parameters, sorted.
func (t *Tool) paramNames() []string {
	if t.def.InputSchema == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(t.def.InputSchema.Properties))
}
