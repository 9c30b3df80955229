package bash

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestLiteralKind(t *testing.T) {
	cases := map[string]string{
		`[{"a": 1}]`:           "list literal",
		`["ls", "-la"]`:        "list literal",
		`['ls']`:               "list literal",
		`  [{"a": 1}]`:         "list literal",
		`[[1, 2], [3]]`:        "nested list literal",
		`{"command": "ls"}`:    "dict literal",
		`{'a': 1}`:             "dict literal",
		`[[ -d / ]] && echo y`: "",
		"[[\t-d / ]]":          "",
		`[ -f x ]`:             "",
		`{ echo x; }`:          "",
		`echo [{"a":1}]`:       "",
		`ls`:                   "",
		`[`:                    "",
		``:                     "",
	}
	for in, want := range cases {
		assert.Equal(t, want, literalKind(in), in)
	}
}

func TestLiteralMessage(t *testing.T) {
	msg := literalMessage(`  {"command": "ls -la"}`, "dict literal")
	assert.Contains(t, msg, "[Tool-argument error] The `command` argument looks like a Python/JSON dict literal, not a shell command. It starts with: '{\"command\": \"ls -la\"}'")
	assert.Contains(t, msg, "python - <<'EOF'")
	assert.Equal(t, `"it's"`, pyRepr("it's"))
	assert.Equal(t, `'a\nb\\'`, pyRepr("a\nb\\"))
}
