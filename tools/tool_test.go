package tools

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type echoAction struct {
	Text    string   `json:"text" jsonschema:"the text to echo"`
	Times   *int     `json:"times,omitempty" jsonschema:"how many times"`
	Mode    string   `json:"mode,omitempty"`
	Between []string `json:"between,omitempty"`
}

type echoExec struct{ closed atomic.Int32 }

func (e *echoExec) Call(_ context.Context, a echoAction) (*Observation, error) {
	n := 1
	if a.Times != nil {
		n = *a.Times
	}
	return TextResult(strings.Repeat(a.Text, n), map[string]any{"n": n}), nil
}
func (e *echoExec) Close() error { e.closed.Add(1); return nil }

func echoDef() Definition {
	return Definition{
		Name:        "echo",
		Description: "Echo text.",
		InputSchema: SchemaFor[echoAction](func(s *jsonschema.Schema) {
			s.Properties["mode"].Enum = []any{"a", "b"}
		}),
		Annotations: Annotations{ReadOnlyHint: true, IdempotentHint: true},
	}
}

func TestToolValidatesArguments(t *testing.T) {
	tool, err := New(echoDef(), &echoExec{})
	require.NoError(t, err)
	ctx := context.Background()
	cases := []struct {
		name, args, want string
		isErr            bool
	}{
		{"ok", `{"text":"ab","times":2}`, "abab", false},
		{"missing required", `{}`, "missing required parameter `text`", true},
		{"wrong type", `{"text":5}`, "`text` must be a string, not an integer", true},
		{"null", `{"text":null}`, "`text` must be a string, not null", true},
		{"item type", `{"text":"a","between":[1]}`, "`between[]` must be a string, not an integer", true},
		{"unknown field", `{"text":"a","nope":1}`, "unknown parameter `nope`; the parameters are between, mode, text, times", true},
		{"enum", `{"text":"a","mode":"z"}`, "`mode` must be one of a, b, got \"z\"", true},
		{"not json", `{"text":`, "not valid JSON", true},
		{"array", `[1,2]`, "expected a JSON object", true},
		{"huge", `{"text":"` + strings.Repeat("x", MaxArgumentBytes) + `"}`, "exceed the limit", true},
		// Models and Python clients send integers as 5.0; the schema takes
		// them as integers, and so does decoding.
		{"integer as float", `{"text":"ab","times":2.0}`, "abab", false},
		{"integer in exponent form", `{"text":"a","times":3e0}`, "aaa", false},
		{"fraction for an integer", `{"text":"a","times":1.5}`, "`times` must be an integer, not a number", true},
		{"optional of the wrong type", `{"text":"a","times":"2"}`, "`times` must be an integer, not a string", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obs, err := tool.Call(ctx, json.RawMessage(c.args))
			require.NoError(t, err)
			assert.Equal(t, c.isErr, obs.IsError, obs.Text())
			assert.Contains(t, obs.Text(), c.want)
		})
	}
}

func TestRegistrySharedExecutorClosedOnce(t *testing.T) {
	exec := &echoExec{}
	var reg Registry
	require.NoError(t, reg.Register("pair", func(env Env, _ json.RawMessage) ([]*Tool, error) {
		a, err := New(echoDef(), exec)
		if err != nil {
			return nil, err
		}
		d := echoDef()
		d.Name = "echo2"
		b, err := New(d, exec)
		return []*Tool{a, b}, err
	}))
	require.Error(t, reg.Register("pair", nil))
	ts, err := reg.Resolve(Env{}, []Spec{{Name: "pair"}})
	require.NoError(t, err)
	assert.Len(t, ts.Definitions(), 2)
	obs, err := ts.Call(context.Background(), "echo2", json.RawMessage(`{"text":"x"}`))
	require.NoError(t, err)
	assert.Equal(t, "x", obs.Text())
	_, err = ts.Call(context.Background(), "nope", nil)
	require.ErrorIs(t, err, ErrUnknownTool)
	require.NoError(t, ts.Close())
	require.NoError(t, ts.Close())
	assert.EqualValues(t, 1, exec.closed.Load())
	_, err = ts.Call(context.Background(), "echo", nil)
	require.ErrorIs(t, err, ErrClosed)

	_, err = reg.Resolve(Env{}, []Spec{{Name: "missing"}})
	require.ErrorIs(t, err, ErrUnknownTool)
}

func TestExports(t *testing.T) {
	d := echoDef()
	oa, err := json.Marshal(d.OpenAI())
	require.NoError(t, err)
	assert.Contains(t, string(oa), `"type":"function"`)
	assert.Contains(t, string(oa), `"the text to echo"`)
}

// Exported input schemas show one type per parameter (some model APIs
// refuse type arrays), while calls still accept a null for an optional one.
func TestExportedSchemasHaveNoNullTypes(t *testing.T) {
	d := echoDef()
	require.Equal(t, []string{"null", "integer"}, d.InputSchema.Properties["times"].Types)
	oa, err := json.Marshal(d.OpenAI())
	require.NoError(t, err)
	assert.NotContains(t, string(oa), "null")
	assert.Contains(t, string(oa), `"times":{"type":"integer","description":"how many times"}`)
	mcpIn, err := json.Marshal(ModelSchema(d.InputSchema)) // the MCP export's input schema (package mcpexport)
	require.NoError(t, err)
	assert.NotContains(t, string(mcpIn), "null")
	assert.Equal(t, []string{"null", "integer"}, d.InputSchema.Properties["times"].Types, "the definition is left as it was")

	tool, err := New(d, &echoExec{})
	require.NoError(t, err)
	obs, err := tool.Call(context.Background(), json.RawMessage(`{"text":"a","times":null}`))
	require.NoError(t, err)
	assert.False(t, obs.IsError, obs.Text())
	assert.Equal(t, "a", obs.Text())
}

func TestDecodeParams(t *testing.T) {
	type params struct {
		A int `json:"a"`
	}
	var p params
	require.NoError(t, DecodeParams(nil, &p))
	require.NoError(t, DecodeParams(json.RawMessage(" null "), &p))
	require.NoError(t, DecodeParams(json.RawMessage(`{"a":2}`), &p))
	assert.Equal(t, 2, p.A)
	require.ErrorContains(t, DecodeParams(json.RawMessage(`{"b":1}`), &p), `unknown field "b"`)
	require.ErrorContains(t, DecodeParams(json.RawMessage(`{"a":1} {}`), &p), "unexpected data")
	assert.Error(t, DecodeParams(json.RawMessage(`{"a":"x"}`), &p))
}

// watchExec is an echoExec whose output can be watched.
type watchExec struct {
	echoExec
	fn StreamFunc
}

func (w *watchExec) Watch(fn StreamFunc) func() { w.fn = fn; return func() { w.fn = nil } }

// Toolset.Watch reaches the executor of a Watcher tool by the tool's name;
// an unknown tool, one that cannot be followed and a closed set are errors.
func TestToolsetWatch(t *testing.T) {
	w := &watchExec{}
	watched, err := New(echoDef(), w)
	require.NoError(t, err)
	d := echoDef()
	d.Name = "plain"
	plain, err := New(d, &echoExec{})
	require.NoError(t, err)
	ts, err := NewToolset(watched, plain)
	require.NoError(t, err)

	var got []byte
	stop, err := ts.Watch("echo", func(b []byte) { got = append(got, b...) })
	require.NoError(t, err)
	w.fn([]byte("seen"))
	assert.Equal(t, "seen", string(got))
	stop()
	assert.Nil(t, w.fn)

	_, err = ts.Watch("plain", func([]byte) {})
	require.ErrorIs(t, err, ErrNotWatchable)
	_, err = ts.Watch("nope", func([]byte) {})
	require.ErrorIs(t, err, ErrUnknownTool)
	require.NoError(t, ts.Close())
	_, err = ts.Watch("echo", func([]byte) {})
	require.ErrorIs(t, err, ErrClosed)
}
