package bash

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseKey(t *testing.T) {
	cases := []struct {
		in      string
		isInput bool
		want    string
		ctrl    byte
		ok      bool
	}{
		{"C-c", true, "\x03", 'C', true},
		{"C-c", false, "\x03", 'C', true}, // Ctrl keys are keys even without is_input
		{"c-d", true, "\x04", 'D', true},
		{"CTRL-z", true, "\x1a", 'Z', true},
		{"ctrl+l", true, "\x0c", 'L', true},
		{" C-a ", true, "\x01", 'A', true},
		{"UP", true, "\x1b[A", 0, true},
		{"DOWN", true, "\x1b[B", 0, true},
		{"LEFT", true, "\x1b[D", 0, true},
		{"RIGHT", true, "\x1b[C", 0, true},
		{"HOME", true, "\x1b[H", 0, true},
		{"END", true, "\x1b[F", 0, true},
		{"PGUP", true, "\x1b[5~", 0, true},
		{"PGDN", true, "\x1b[6~", 0, true},
		{"TAB", true, "\t", 0, true},
		{"ENTER", true, "\r", 0, true},
		{"ESC", true, "\x1b", 0, true},
		{"BS", true, "\x7f", 0, true},
		{"UP", false, "", 0, false}, // a command named UP stays a command
		{"up", true, "", 0, false},  // typed text
		{"C-1", true, "", 0, false},
		{"C-cc", true, "", 0, false},
		{"hello", true, "", 0, false},
	}
	for _, c := range cases {
		k, ok := parseKey(c.in, c.isInput)
		assert.Equal(t, c.ok, ok, c.in)
		assert.Equal(t, c.want, k.bytes, c.in)
		assert.Equal(t, c.ctrl, k.ctrl, c.in)
	}
}

func TestTypedInput(t *testing.T) {
	assert.Equal(t, "yes\r", typedInput("yes"))
	assert.Equal(t, "yes\r", typedInput("yes\n"))
	assert.Equal(t, "a\rb\r", typedInput("a\nb"))
	assert.Equal(t, "a\rb\r", typedInput("a\r\nb\r\n"))
	assert.Equal(t, "  x  \r", typedInput("  x  "), "input keeps its blanks")
	assert.Equal(t, "\r", typedInput(""))
}
