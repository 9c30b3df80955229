package skills

import "strings"

// The few Markdown structures the loader reads: ATX headings ("## Title")
// outside fenced code blocks, and fenced code blocks. A full CommonMark
// parser would give the same answers for these and much more we do not use
// (decision 0026).

// mdLine is one line of a SKILL.md body.
type mdLine struct {
	text string
	n    int  // line number in the file, 1-based
	code bool // inside a fenced code block, or one of its fences
}

// section is the part of the body under one heading of a given level, up
// to the next heading of that level or higher.
type section struct {
	title string
	n     int // line of the heading
	lines []mdLine
}

// bodyLines splits the body (which starts at line first of the file) into
// lines and marks the fenced code blocks.
func bodyLines(body string, first int) []mdLine {
	raw := strings.Split(body, "\n")
	out := make([]mdLine, len(raw))
	var fence string // the opening fence while inside a block
	for i, t := range raw {
		out[i] = mdLine{text: t, n: first + i}
		if fence != "" {
			out[i].code = true
			if closesFence(t, fence) {
				fence = ""
			}
			continue
		}
		if f := openingFence(t); f != "" {
			out[i].code = true
			fence = f
		}
	}
	return out
}

// openingFence returns the fence (``` or ~~~, three or more) that line
// opens, or "".
func openingFence(line string) string {
	t, ok := trimIndent(line)
	if !ok || len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return ""
	}
	n := 0
	for n < len(t) && t[n] == t[0] {
		n++
	}
	if n < 3 {
		return ""
	}
	if t[0] == '`' && strings.Contains(t[n:], "`") {
		return "" // an info string with a backtick: not a fence (CommonMark)
	}
	return t[:n]
}

// closesFence reports whether line closes a block opened by fence.
func closesFence(line, fence string) bool {
	t, ok := trimIndent(line)
	if !ok {
		return false
	}
	t = strings.TrimRight(t, " \t")
	if len(t) < len(fence) {
		return false
	}
	for i := range len(t) {
		if t[i] != fence[0] {
			return false
		}
	}
	return true
}

// trimIndent removes up to three leading spaces; a line indented more is
// an indented code line (ok false).
func trimIndent(line string) (string, bool) {
	i := 0
	for i < len(line) && i < 4 && line[i] == ' ' {
		i++
	}
	if i == 4 {
		return "", false
	}
	return line[i:], true
}

// heading returns the level and text of an ATX heading line, or 0.
func heading(l mdLine) (int, string) {
	if l.code {
		return 0, ""
	}
	t, ok := trimIndent(l.text)
	if !ok {
		return 0, ""
	}
	level := 0
	for level < len(t) && t[level] == '#' {
		level++
	}
	if level == 0 || level > 6 {
		return 0, ""
	}
	rest := t[level:]
	if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
		return 0, "" // "#hashtag" is not a heading
	}
	rest = strings.TrimSpace(rest)
	// An optional closing sequence of #s, preceded by a space.
	if j := strings.LastIndexFunc(rest, func(r rune) bool { return r != '#' }); j < len(rest)-1 {
		if j < 0 {
			rest = ""
		} else if rest[j] == ' ' || rest[j] == '\t' {
			rest = strings.TrimSpace(rest[:j])
		}
	}
	return level, rest
}

// sections splits lines at headings of the given level. Lines before the
// first such heading, and after a heading of a higher level (fewer #s),
// belong to no section.
func sections(lines []mdLine, level int) []section {
	var out []section
	var cur *section
	for _, l := range lines {
		lv, title := heading(l)
		switch {
		case lv == level:
			out = append(out, section{title: title, n: l.n})
			cur = &out[len(out)-1]
		case lv > 0 && lv < level:
			cur = nil
		case cur != nil:
			cur.lines = append(cur.lines, l)
		}
	}
	return out
}

// findSection returns the first section whose title is name (case and
// surrounding space ignored), and how many there are.
func findSection(secs []section, name string) (*section, int) {
	var first *section
	count := 0
	for i := range secs {
		if strings.EqualFold(strings.TrimSpace(secs[i].title), name) {
			if first == nil {
				first = &secs[i]
			}
			count++
		}
	}
	return first, count
}

// firstText returns the first non-blank line of a section,
// trimmed, and its line number; "" when there is none.
func firstText(lines []mdLine) (string, int) {
	for _, l := range lines {
		if t := strings.TrimSpace(l.text); t != "" {
			return t, l.n
		}
	}
	return "", 0
}

// firstCodeBlock returns the content of the first fenced code block in
// lines, and the line of its opening fence; ok false when there is none.
func firstCodeBlock(lines []mdLine) (text string, n int, ok bool) {
	for i, l := range lines {
		f := ""
		if l.code {
			f = openingFence(l.text)
		}
		if f == "" {
			continue
		}
		var b strings.Builder
		for _, m := range lines[i+1:] {
			if !m.code || closesFence(m.text, f) {
				break
			}
			b.WriteString(m.text)
			b.WriteByte('\n')
		}
		return b.String(), l.n, true
	}
	return "", 0, false
}
