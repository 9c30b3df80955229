package fileeditor

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/mcpexport"
)

func TestNewExecutorOptions(t *testing.T) {
	for name, o := range map[string]Options{
		"relative workspace": {Workspace: "ws"},
		"relative root":      {Root: "r"},
		"negative":           {MaxFileBytes: -1},
		"tiny response":      {MaxResponseChars: 10},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := NewExecutor(o)
			assert.Error(t, err)
		})
	}
	e, err := NewExecutor(Options{})
	require.NoError(t, err)
	assert.EqualValues(t, DefaultMaxFileBytes, e.opts.MaxFileBytes)
	assert.Equal(t, DefaultMaxHistory, e.opts.MaxHistory)
	assert.Equal(t, DefaultMaxResponseChars, e.opts.MaxResponseChars)
	require.NoError(t, e.Close())
}

func TestFactoryAndDefinition(t *testing.T) {
	ws := t.TempDir()
	var reg tools.Registry
	require.NoError(t, reg.Register(Name, Factory))

	_, err := reg.Resolve(tools.Env{Workspace: ws}, []tools.Spec{{Name: Name, Params: json.RawMessage(`{"nope":1}`)}})
	require.ErrorContains(t, err, "nope")
	_, err = reg.Resolve(tools.Env{Workspace: ws}, []tools.Spec{{Name: Name, Params: json.RawMessage(`{"root":"rel"}`)}})
	require.Error(t, err)

	ts, err := reg.Resolve(tools.Env{Workspace: ws}, []tools.Spec{{Name: Name, Params: json.RawMessage(`{"root":"` + ws + `","max_file_bytes":2097152}`)}})
	require.NoError(t, err)
	defer ts.Close()
	defs := ts.Definitions()
	require.Len(t, defs, 1)
	d := defs[0]
	assert.Equal(t, "file_editor", d.Name)
	assert.Equal(t, tools.Annotations{Title: Name, ReadOnlyHint: false, DestructiveHint: true, IdempotentHint: false, OpenWorldHint: false}, d.Annotations)
	assert.Contains(t, d.Description, "Your current working directory is: "+ws)
	assert.Contains(t, d.Description, "larger than 2MB")
	assert.Equal(t, []any{"view", "create", "str_replace", "insert", "undo_edit"}, d.InputSchema.Properties["command"].Enum)
	assert.ElementsMatch(t, []string{"command", "path"}, d.InputSchema.Required)
	require.NotNil(t, d.OutputSchema)
	m := mcpexport.Tool(d)
	assert.True(t, *m.Annotations.DestructiveHint)
	assert.False(t, *m.Annotations.OpenWorldHint)

	ctx := context.Background()
	p := filepath.Join(ws, "a.txt")
	obs, err := ts.Call(ctx, Name, json.RawMessage(`{"command":"create","path":"`+p+`","file_text":"x\n"}`))
	require.NoError(t, err)
	assert.False(t, obs.IsError, obs.Text())
	obs, err = ts.Call(ctx, Name, json.RawMessage(`{"command":"view","path":"a.txt"}`))
	require.NoError(t, err)
	assert.True(t, obs.IsError)
	assert.Contains(t, obs.Text(), "Maybe you meant "+p+"?")
	obs, err = ts.Call(ctx, Name, json.RawMessage(`{"command":"remove","path":"`+p+`"}`))
	require.NoError(t, err)
	assert.True(t, obs.IsError, "the schema enum rejects unknown commands")
	obs, err = ts.Call(ctx, Name, json.RawMessage(`{"command":"insert","path":"`+p+`","insert_line":-1,"new_str":"x"}`))
	require.NoError(t, err)
	assert.True(t, obs.IsError)
	obs, err = ts.Call(ctx, Name, json.RawMessage(`{"command":"view","path":"/"}`))
	require.NoError(t, err)
	assert.Contains(t, obs.Text(), "outside")

	b, err := json.Marshal(obs.Structured)
	require.NoError(t, err)
	assert.JSONEq(t, `{"command":"view","path":"/","prev_exist":true}`, string(b))

	// No params at all is fine too.
	ts2, err := reg.Resolve(tools.Env{}, []tools.Spec{{Name: Name}})
	require.NoError(t, err)
	require.NoError(t, ts2.Close())
}
