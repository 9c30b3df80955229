package applypatch

import (
	"fmt"
	"strings"
	"unicode"
)

// The error kinds of the V4A format, as the OpenAI Agents SDK names them, so
// a model that has seen them reads ours the same way.
const (
	KindInvalidContext    = "Invalid Context"
	KindInvalidEOFContext = "Invalid EOF Context"
	KindInvalidAnchor     = "Invalid Anchor"
	KindInvalidLine       = "Invalid Line"
	KindInvalidAddLine    = "Invalid Add File Line"
	KindEmptySection      = "Empty Hunk"
)

// Fuzz is how loosely a hunk matched; Applied.Fuzz sums it over the hunks.
const (
	FuzzExact      = 0     // every context line as written
	FuzzTrailing   = 1     // trailing whitespace ignored
	FuzzSurrounded = 100   // leading and trailing whitespace ignored
	FuzzEOF        = 10000 // *** End of File context found before the end
)

// Markers of the format. Lines of a diff are compared after their "\r" is
// dropped.
const (
	markBegin   = "*** Begin Patch"
	markEnd     = "*** End Patch"
	markAdd     = "*** Add File: "
	markDelete  = "*** Delete File: "
	markUpdate  = "*** Update File: "
	markMove    = "*** Move to: "
	markEOF     = "*** End of File"
	anchorBare  = "@@"
	anchorSpace = "@@ "
)

// HunkError says why a diff does not apply: which hunk (1-based; 0 when
// the diff could not be read that far), what kind of failure and the lines
// it looked for. Path is set by the caller that knows the file.
type HunkError struct {
	Path  string
	Hunk  int
	Kind  string
	Line  int      // 1-based line of the file the search started at (0: the start)
	Lines []string // the context or anchor sought, or the offending diff line
}

func (e *HunkError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		fmt.Fprintf(&b, "%s: ", e.Path)
	}
	if e.Hunk > 0 {
		fmt.Fprintf(&b, "hunk %d: ", e.Hunk)
	}
	b.WriteString(e.Kind)
	switch e.Kind {
	case KindInvalidContext, KindInvalidEOFContext:
		fmt.Fprintf(&b, " (searched from line %d): these lines were not found in order:", max(e.Line, 1))
	case KindInvalidAnchor:
		fmt.Fprintf(&b, " (searched from line %d): no line of the file is:", max(e.Line, 1))
	default:
		b.WriteString(":")
	}
	for _, l := range e.Lines {
		b.WriteString("\n")
		b.WriteString(l)
	}
	return b.String()
}

// chunk replaces del (which starts at line at of the file, 0-based) by ins.
type chunk struct {
	at  int
	del []string
	ins []string
}

// Applied is the result of ApplyDiff.
type Applied struct {
	Text  string
	Hunks int
	Fuzz  int // 0: every hunk matched exactly; see the Fuzz constants
}

// diffLines splits a diff into lines without their "\r", dropping the
// empty element after a final line break.
func diffLines(diff string) []string {
	lines := strings.Split(diff, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	return lines
}

// fileText is a text split as V4A sees it: elements separated by line
// breaks (a text ending in a line break has a last, empty element), each
// with the break that followed it in the file ("" for the last).
type fileText struct {
	lines []string
	seps  []string
	eol   string // the dominant line break, given to new lines
}

func splitText(text, diff string) fileText {
	var ft fileText
	crlf := strings.Count(text, "\r\n")
	lf := strings.Count(text, "\n") - crlf
	switch {
	case crlf+lf == 0 && strings.Contains(diff, "\r\n"):
		ft.eol = "\r\n"
	case crlf > lf:
		ft.eol = "\r\n"
	default:
		ft.eol = "\n"
	}
	for {
		i := strings.IndexByte(text, '\n')
		if i < 0 {
			ft.lines = append(ft.lines, text)
			ft.seps = append(ft.seps, "")
			return ft
		}
		line, sep := text[:i], "\n"
		if strings.HasSuffix(line, "\r") {
			line, sep = line[:len(line)-1], "\r\n"
		}
		ft.lines = append(ft.lines, line)
		ft.seps = append(ft.seps, sep)
		text = text[i+1:]
	}
}

// CreateText is the content of a new file from a create diff: every line
// starts with "+" (the "+" is dropped). The file ends with a line break, as
// the Codex CLI's apply_patch writes new files; CRLF if the diff used it.
func CreateText(diff string) (string, error) {
	lines := diffLines(diff)
	eol := "\n"
	if strings.Contains(diff, "\r\n") {
		eol = "\r\n"
	}
	var b strings.Builder
	for i, l := range lines {
		body, ok := strings.CutPrefix(l, "+")
		if !ok {
			return "", &HunkError{Kind: KindInvalidAddLine, Line: i + 1, Lines: []string{l}}
		}
		b.WriteString(body)
		b.WriteString(eol)
	}
	return b.String(), nil
}

// ApplyDiff applies a V4A update diff (hunks, without the *** envelope) to
// text. Hunks are found in order, each after the previous one: stacked
// "@@ anchor" lines move the search past each anchor's line, then the
// hunk's context (its " " and "-" lines) is sought exactly, then ignoring
// trailing whitespace, then ignoring surrounding whitespace; a hunk that
// ends with "*** End of File" is sought at the end of the file first. A
// context that occurs twice matches at its first occurrence after the
// previous hunk: anchors or more context pick a later one.
//
// Line breaks are kept: lines the diff leaves keep their own, new lines
// take the text's dominant one (CRLF or LF), and a text without a final
// line break stays without one. Nothing is partial: any failure returns a
// *HunkError and no text.
func ApplyDiff(text, diff string) (Applied, error) {
	ft := splitText(text, diff)
	chunks, hunks, fuzz, err := parseUpdate(diffLines(diff), ft.lines)
	if err != nil {
		return Applied{}, err
	}
	out, err := applyChunks(ft, chunks)
	if err != nil {
		return Applied{}, err
	}
	return Applied{Text: out, Hunks: hunks, Fuzz: fuzz}, nil
}

// isFileMarker: lines that end an update's hunks in an envelope.
func isFileMarker(l string) bool {
	return strings.HasPrefix(l, markEnd) || strings.HasPrefix(l, markUpdate) ||
		strings.HasPrefix(l, markDelete) || strings.HasPrefix(l, markAdd)
}

func parseUpdate(lines, file []string) (chunks []chunk, hunks, fuzz int, err error) {
	cursor, i := 0, 0
	for i < len(lines) && !isFileMarker(lines[i]) && lines[i] != markEOF {
		hunks++
		anchors, headed := readAnchors(lines, &i)
		if !headed && cursor != 0 {
			return nil, 0, 0, &HunkError{Hunk: hunks, Kind: KindInvalidLine, Lines: []string{lines[i]}}
		}
		for _, a := range anchors {
			at, f := findAnchor(file, a, cursor)
			if at < 0 {
				return nil, 0, 0, &HunkError{Hunk: hunks, Kind: KindInvalidAnchor, Line: cursor + 1, Lines: []string{a}}
			}
			cursor, fuzz = at+1, fuzz+f
		}
		sec, err := readSection(lines, i)
		if err != nil {
			err.Hunk = hunks
			return nil, 0, 0, err
		}
		at, f := findContext(file, sec.context, cursor, sec.eof)
		if at < 0 {
			kind := KindInvalidContext
			if sec.eof {
				kind = KindInvalidEOFContext
			}
			return nil, 0, 0, &HunkError{Hunk: hunks, Kind: kind, Line: cursor + 1, Lines: sec.context}
		}
		for _, c := range sec.chunks {
			c.at += at
			chunks = append(chunks, c)
		}
		cursor, fuzz, i = at+len(sec.context), fuzz+f, sec.end
	}
	return chunks, hunks, fuzz, nil
}

// readAnchors reads the "@@" lines that open a hunk: headed is true when
// there was at least one, anchors are the non-blank texts after "@@ ".
func readAnchors(lines []string, i *int) (anchors []string, headed bool) {
	for *i < len(lines) {
		l := lines[*i]
		switch {
		case l == anchorBare:
		case strings.HasPrefix(l, anchorSpace):
			if a := l[len(anchorSpace):]; strings.TrimSpace(a) != "" {
				anchors = append(anchors, a)
			}
		default:
			return anchors, headed
		}
		headed = true
		*i++
	}
	return anchors, headed
}

// findAnchor finds the first line at or after from equal to anchor, then
// equal ignoring surrounding whitespace.
func findAnchor(file []string, anchor string, from int) (int, int) {
	for i := from; i < len(file); i++ {
		if file[i] == anchor {
			return i, FuzzExact
		}
	}
	want := strings.TrimSpace(anchor)
	for i := from; i < len(file); i++ {
		if strings.TrimSpace(file[i]) == want {
			return i, FuzzTrailing
		}
	}
	return -1, 0
}

type section struct {
	context []string
	chunks  []chunk // at relative to the context's first line
	end     int     // index of the next diff line
	eof     bool
}

func readSection(lines []string, start int) (section, *HunkError) {
	var s section
	var del, ins []string
	flush := func() {
		if len(del) > 0 || len(ins) > 0 {
			s.chunks = append(s.chunks, chunk{at: len(s.context) - len(del), del: del, ins: ins})
			del, ins = nil, nil
		}
	}
	i := start
	for ; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(l, anchorBare) || isFileMarker(l) || strings.HasPrefix(l, markEOF) || l == "***" {
			break
		}
		if strings.HasPrefix(l, "***") {
			return s, &HunkError{Kind: KindInvalidLine, Lines: []string{l}}
		}
		if l == "" { // an empty context line whose space was lost
			l = " "
		}
		body := l[1:]
		switch l[0] {
		case '+':
			ins = append(ins, body)
		case '-':
			del = append(del, body)
			s.context = append(s.context, body)
		case ' ':
			flush()
			s.context = append(s.context, body)
		default:
			return s, &HunkError{Kind: KindInvalidLine, Lines: []string{l}}
		}
	}
	flush()
	if i < len(lines) && lines[i] == markEOF {
		s.end, s.eof = i+1, true
		return s, nil
	}
	if i == start {
		next := ""
		if i < len(lines) {
			next = lines[i]
		}
		return s, &HunkError{Kind: KindEmptySection, Lines: []string{next}}
	}
	s.end = i
	return s, nil
}

var matchers = []struct {
	fuzz int
	norm func(string) string
}{
	{FuzzExact, func(s string) string { return s }},
	{FuzzTrailing, func(s string) string { return strings.TrimRightFunc(s, unicode.IsSpace) }},
	{FuzzSurrounded, strings.TrimSpace},
}

// findContext finds ctx at or after from. With eof the context is first
// sought where it would end the file (before a final empty element, the
// text after a last line break).
func findContext(file, ctx []string, from int, eof bool) (int, int) {
	if eof {
		last := len(file)
		if last > 0 && file[last-1] == "" && (len(ctx) == 0 || ctx[len(ctx)-1] != "") {
			last--
		}
		if at := last - len(ctx); at >= from {
			for _, m := range matchers {
				if equalAt(file, ctx, at, m.norm) {
					return at, m.fuzz
				}
			}
		}
		at, f := findContextFrom(file, ctx, from)
		if at < 0 {
			return -1, 0
		}
		return at, f + FuzzEOF
	}
	return findContextFrom(file, ctx, from)
}

func findContextFrom(file, ctx []string, from int) (int, int) {
	if len(ctx) == 0 {
		return from, FuzzExact
	}
	for _, m := range matchers {
		for i := from; i+len(ctx) <= len(file); i++ {
			if equalAt(file, ctx, i, m.norm) {
				return i, m.fuzz
			}
		}
	}
	return -1, 0
}

func equalAt(file, ctx []string, at int, norm func(string) string) bool {
	for j, c := range ctx {
		if norm(file[at+j]) != norm(c) {
			return false
		}
	}
	return true
}

// applyChunks writes the new text: kept lines with their own line breaks,
// inserted lines with the dominant one.
func applyChunks(ft fileText, chunks []chunk) (string, error) {
	type el struct {
		line, sep string
	}
	out := make([]el, 0, len(ft.lines)+8)
	cursor := 0
	for _, c := range chunks {
		if c.at < cursor || c.at+len(c.del) > len(ft.lines) {
			return "", &HunkError{Kind: KindInvalidContext, Line: c.at + 1, Lines: c.del}
		}
		for ; cursor < c.at; cursor++ {
			out = append(out, el{ft.lines[cursor], ft.seps[cursor]})
		}
		for _, l := range c.ins {
			out = append(out, el{l, ""})
		}
		cursor += len(c.del)
	}
	for ; cursor < len(ft.lines); cursor++ {
		out = append(out, el{ft.lines[cursor], ft.seps[cursor]})
	}
	var b strings.Builder
	for i, e := range out {
		b.WriteString(e.line)
		if i == len(out)-1 {
			break
		}
		if e.sep != "" {
			b.WriteString(e.sep)
		} else {
			b.WriteString(ft.eol)
		}
	}
	return b.String(), nil
}
