package grep

import (
	"bytes"
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
)

// matcher finds the lines of a text that match the pattern. Matching is per
// line, as in grep and ripgrep: '^' and '$' are line boundaries and no
// match spans a newline.
type matcher struct {
	re      *regexp.Regexp
	prog    *syntax.Prog // the same pattern, for each scanner's DFA
	finders []*finder    // every match contains one of these; none: unknown
	filters [][]*finder  // a matching line also has one of each of these
	first   *byteSet     // without finders: the bytes a match can start with
	exact   bool         // the pattern is exactly finders[0]: a hit is a match
}

// compilePattern compiles a grep pattern (Go RE2 syntax). Errors are
// sentences for the model, naming the construct that is not supported.
func compilePattern(pattern string, caseSensitive bool) (*matcher, error) {
	if _, err := syntax.Parse(pattern, syntax.Perl); err != nil {
		return nil, regexError(err)
	}
	if esc := gnuWordBoundary(pattern); esc != "" {
		// RE2 reads \< as a literal '<': the search would find nothing
		// and say so, where the model meant a word boundary.
		return nil, fmt.Errorf("`%s` is a GNU grep word boundary, which RE2 (the syntax of this tool, as in Go and ripgrep) does not have: use \\b instead (e.g. \\bfoo\\b); for a literal %q, leave out the backslash", esc, esc[1:])
	}
	flags := "(?m)"
	if !caseSensitive {
		flags = "(?mi)"
	}
	full := flags + pattern
	tree, err := syntax.Parse(full, syntax.Perl)
	if err != nil {
		return nil, regexError(err)
	}
	tree = tree.Simplify()
	if hasNewline(tree) {
		return nil, errors.New(`the pattern matches a newline (\n), but grep matches one line at a time; search for the lines separately`)
	}
	re, err := regexp.Compile(full)
	if err != nil {
		return nil, regexError(err)
	}
	prog, err := syntax.Compile(tree)
	if err != nil {
		return nil, regexError(err)
	}
	m := &matcher{re: re, prog: prog}
	best, others := requiredNeedles(tree)
	for _, n := range best {
		m.finders = append(m.finders, newFinder(n))
	}
	for _, set := range others {
		var fs []*finder
		for _, n := range set {
			fs = append(fs, newFinder(n))
		}
		m.filters = append(m.filters, fs)
	}
	if len(m.finders) == 0 {
		m.first = firstByteSet(tree)
	}
	if len(m.finders) == 1 {
		if lit := stripCaptures(tree); lit.Op == syntax.OpLiteral {
			n, _ := literalNeedle(lit.Rune, lit.Flags&syntax.FoldCase != 0)
			f := m.finders[0]
			m.exact = bytes.Equal(n.b, f.needle) && n.fold == f.fold && (!n.fold || len(n.b) == len(lit.Rune))
		}
	}
	return m, nil
}

func stripCaptures(re *syntax.Regexp) *syntax.Regexp {
	for re.Op == syntax.OpCapture {
		re = re.Sub[0]
	}
	return re
}

// hasNewline reports whether the pattern requires a literal newline.
func hasNewline(re *syntax.Regexp) bool {
	if re.Op == syntax.OpLiteral {
		return strings.ContainsRune(string(re.Rune), '\n')
	}
	if re.Op == syntax.OpCharClass && len(re.Rune) == 2 && re.Rune[0] == '\n' && re.Rune[1] == '\n' {
		return true
	}
	for _, sub := range re.Sub {
		if hasNewline(sub) {
			return true
		}
	}
	return false
}

// gnuWordBoundary returns the first \< or \> outside a character class, or
// "".
func gnuWordBoundary(p string) string {
	inClass := false
	for i := 0; i < len(p); i++ {
		switch c := p[i]; {
		case c == '\\' && i+1 < len(p):
			if !inClass && (p[i+1] == '<' || p[i+1] == '>') {
				return p[i : i+2]
			}
			i++
		case c == '[' && !inClass:
			inClass = true
			if i+1 < len(p) && p[i+1] == '^' {
				i++
			}
			if i+1 < len(p) && p[i+1] == ']' { // a leading ] is literal
				i++
			}
		case c == '[' && inClass && i+1 < len(p) && p[i+1] == ':': // [:alpha:]
			if j := strings.Index(p[i+2:], ":]"); j >= 0 {
				i += j + 3
			}
		case c == ']' && inClass:
			inClass = false
		}
	}
	return ""
}

// regexError words a parse error for the model, with a hint for the Perl
// features RE2 lacks.
func regexError(err error) error {
	var se *syntax.Error
	if !errors.As(err, &se) {
		return err
	}
	msg := fmt.Sprintf("%s: `%s`", se.Code, se.Expr)
	switch {
	case strings.HasPrefix(se.Expr, "(?=") || strings.HasPrefix(se.Expr, "(?!") ||
		strings.HasPrefix(se.Expr, "(?<=") || strings.HasPrefix(se.Expr, "(?<!"):
		msg += ". Lookahead and lookbehind are not supported (the pattern is RE2 syntax, as in Go and ripgrep); match the surrounding text instead or search twice"
	case se.Code == syntax.ErrInvalidEscape && len(se.Expr) == 2 && se.Expr[1] >= '1' && se.Expr[1] <= '9':
		msg += ". Backreferences are not supported (the pattern is RE2 syntax, as in Go and ripgrep)"
	case se.Code == syntax.ErrInvalidPerlOp || se.Code == syntax.ErrInvalidEscape:
		msg += ". The pattern is RE2 syntax (as in Go and ripgrep); escape special characters with a backslash"
	case se.Code == syntax.ErrMissingParen || se.Code == syntax.ErrUnexpectedParen || se.Code == syntax.ErrMissingBracket:
		msg += `. To search for the character literally, escape it with a backslash (e.g. \( or \[)`
	case se.Code == syntax.ErrMissingRepeatArgument:
		msg += `. To search for the character literally, escape it with a backslash (e.g. \* or \+)`
	}
	return errors.New(msg)
}

// scanner finds matching lines of one text, remembering where each needle
// (or first byte) occurs next so the text is scanned once per needle.
type scanner struct {
	m    *matcher
	dfa  *dfa
	next []int // per finder or first byte: next hit at or after the search position; -1 unknown
}

func (m *matcher) newScanner() *scanner {
	n := len(m.finders)
	if m.first != nil {
		n = len(m.first.list)
	}
	return &scanner{m: m, dfa: newDFA(m.prog), next: make([]int, n)}
}

// reset prepares the scanner for a new text.
func (s *scanner) reset() {
	for i := range s.next {
		s.next[i] = -1
	}
}

// candidate returns the first position at or after pos where a match could
// be (a needle or a first byte), or -1.
func (s *scanner) candidate(text []byte, pos int) int {
	if s.m.first != nil {
		return s.m.first.index(text, pos, s.next)
	}
	hit := len(text)
	for i, f := range s.m.finders {
		if s.next[i] < pos {
			j := f.index(text[pos:])
			if j < 0 {
				s.next[i] = len(text)
			} else {
				s.next[i] = pos + j
			}
		}
		hit = min(hit, s.next[i])
	}
	if hit >= len(text) {
		return -1
	}
	return hit
}

// nextLine returns the bounds [start, end) of the first matching line that
// starts at or after from (a line start), without its newline.
func (s *scanner) nextLine(text []byte, from int) (start, end int, ok bool) {
	if len(s.m.finders) == 0 && s.m.first == nil {
		if !s.dfa.failed {
			at, ok := s.dfa.firstMatch(text, from)
			if !s.dfa.failed {
				if !ok {
					return 0, 0, false
				}
				return bytes.LastIndexByte(text[from:at], '\n') + 1 + from, lineEnd(text, at), true
			}
		}
		return s.nextByRegexp(text, from)
	}
	for pos := from; pos < len(text); pos = end + 1 {
		hit := s.candidate(text, pos)
		if hit < 0 {
			return 0, 0, false
		}
		start = bytes.LastIndexByte(text[pos:hit], '\n') + 1 + pos
		end = lineEnd(text, hit)
		if line := text[start:end]; s.m.exact || s.m.hasFilters(line) && s.matchLine(line) {
			return start, end, true
		}
	}
	return 0, 0, false
}

// matchLine reports whether the regexp matches the line.
func (s *scanner) matchLine(line []byte) bool {
	if !s.dfa.failed {
		ok := s.dfa.matchLine(line)
		if !s.dfa.failed {
			return ok
		}
	}
	return s.m.re.Match(line)
}

// nextByRegexp runs the regexp over the whole text (one call, not one per
// line) and checks that the leftmost match stays within a line; a match
// that spans lines is re-checked on its first line alone.
func (s *scanner) nextByRegexp(text []byte, from int) (start, end int, ok bool) {
	pos := from
	for pos < len(text) {
		loc := s.m.re.FindIndex(text[pos:])
		if loc == nil {
			return 0, 0, false
		}
		ms, me := pos+loc[0], pos+loc[1]
		start = bytes.LastIndexByte(text[pos:ms], '\n') + 1 + pos
		if start >= len(text) {
			return 0, 0, false // the empty "line" after a final newline
		}
		end = lineEnd(text, ms)
		if me <= end || s.m.re.Match(text[start:end]) {
			return start, end, true
		}
		pos = end + 1
	}
	return 0, 0, false
}

// hasFilters reports whether line has a needle of every filter set.
func (m *matcher) hasFilters(line []byte) bool {
	for _, set := range m.filters {
		ok := false
		for _, f := range set {
			if f.index(line) >= 0 {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func lineEnd(text []byte, i int) int {
	if j := bytes.IndexByte(text[i:], '\n'); j >= 0 {
		return i + j
	}
	return len(text)
}
