package bash

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/tools/internal/output"
)

// literalHint is OpenHands' _LITERAL_ARG_HINT_TEMPLATE: a model sometimes
// packs structured data into `command`.
const literalHint = "[Tool-argument error] The `command` argument looks like a Python/JSON %s, not a shell command. It starts with: %s\n\n" +
	"The `terminal` tool runs exactly ONE shell command at a time. To pass structured data or multi-line code:\n" +
	"  - Write a script first with `file_editor` (command=\"create\", path=\"/tmp/run.py\", ...), then invoke it: `python /tmp/run.py`.\n" +
	"  - Or use a heredoc inline, e.g.:\n" +
	"        python - <<'EOF'\n" +
	"        DATABASES = {'default': {...}}\n" +
	"        # your code here\n" +
	"        EOF\n\n" +
	"Do not put a Python list/dict literal into the `command` field; the shell cannot interpret it."

// literalKind reports whether command looks like a Python/JSON literal
// (OpenHands' looks_like_python_literal_argument): `[{`, `["`, `['`, `[[x`
// with x not blank, `{"`, `{'`. Shell syntax such as `[[ -d / ]]`,
// `[ -f x ]` and `{ echo x; }` always has a blank after the bracket.
func literalKind(command string) string {
	s := strings.TrimLeft(command, " \t\n\r\f\v")
	if len(s) < 2 {
		return ""
	}
	a, b := s[0], s[1]
	switch {
	case a == '[' && (b == '{' || b == '"' || b == '\''):
		return "list literal"
	case a == '[' && b == '[':
		if len(s) >= 3 && s[2] != ' ' && s[2] != '\t' {
			return "nested list literal"
		}
	case a == '{' && (b == '"' || b == '\''):
		return "dict literal"
	}
	return ""
}

func literalMessage(command, kind string) string {
	head := strings.TrimLeft(command, " \t\n\r\f\v")
	if utf8.RuneCountInString(head) > 60 {
		head = output.PrefixRunes(head, 60)
	}
	return fmt.Sprintf(literalHint, kind, pyRepr(head))
}

// pyRepr quotes s the way Python's repr() does for str.
func pyRepr(s string) string {
	q := byte('\'')
	if strings.Contains(s, "'") && !strings.Contains(s, `"`) {
		q = '"'
	}
	var b strings.Builder
	b.WriteByte(q)
	for _, r := range s {
		switch {
		case r == rune(q) || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(q)
	return b.String()
}
