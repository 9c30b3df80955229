package fileeditor

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// document is a decoded text file. text keeps the file's own line endings;
// matching and line counting work on a view of it in which every CRLF is one
// "\n" (see eolMap), so a model that writes "\n" edits CRLF files correctly.
type document struct {
	text string
	enc  encoding
	crlf bool // CRLF is the dominant line ending: new lines are written with it
}

func newDocument(text string, enc encoding) *document {
	crlfs := strings.Count(text, "\r\n")
	lfs := strings.Count(text, "\n") - crlfs
	return &document{text: text, enc: enc, crlf: crlfs > lfs}
}

func (d *document) eol() string {
	if d.crlf {
		return "\r\n"
	}
	return "\n"
}

func (d *document) lineEnding() string {
	if d.crlf {
		return "CRLF"
	}
	return "LF"
}

// toFileEOL turns model text (any endings) into the file's dominant ending.
func (d *document) toFileEOL(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	if d.crlf {
		s = strings.ReplaceAll(s, "\n", "\r\n")
	}
	return s
}

// countLines is the number of lines as cat -n shows them: a final line
// break does not start another line, and an empty text has no lines.
func countLines(s string) int {
	if s == "" {
		return 0
	}
	n := strings.Count(s, "\n")
	if !strings.HasSuffix(s, "\n") {
		n++
	}
	return n
}

// splitLines splits s into lines without their endings ("\n" or "\r\n").
func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimSuffix(l, "\r")
	}
	return lines
}

// lineStart returns the byte offset where line n (1-based) starts; n may be
// one past the last line, giving len(s) (or the offset after the last "\n").
func lineStart(s string, n int) int {
	off := 0
	for i := 1; i < n; i++ {
		j := strings.IndexByte(s[off:], '\n')
		if j < 0 {
			return len(s)
		}
		off += j + 1
	}
	return off
}

// eolMap is s with every "\r\n" replaced by "\n", plus the positions (in the
// normalised text) of the "\n"s that were CRLFs, to map offsets back.
type eolMap struct {
	norm string
	crAt []int // positions in norm of "\n"s that had a "\r" before them
}

func newEOLMap(s string) eolMap {
	if !strings.Contains(s, "\r\n") {
		return eolMap{norm: s}
	}
	var sb strings.Builder
	sb.Grow(len(s))
	var crAt []int
	for i := 0; i < len(s); i++ {
		if s[i] == '\r' && i+1 < len(s) && s[i+1] == '\n' {
			crAt = append(crAt, sb.Len())
			continue
		}
		sb.WriteByte(s[i])
	}
	return eolMap{norm: sb.String(), crAt: crAt}
}

// orig maps an offset in norm to the offset in the original text. An offset
// at a CRLF's "\n" maps to its "\r", so a match never splits a CRLF.
func (m eolMap) orig(n int) int {
	return n + sort.SearchInts(m.crAt, n)
}

// findAll returns the start offsets (in m.norm) of every occurrence of sub,
// overlapping ones included: "aa" occurs twice in "aaa", which is ambiguous
// for a replacement, so it must count as two.
func findAll(s, sub string, limit int) []int {
	var at []int
	for off := 0; off <= len(s); {
		i := strings.Index(s[off:], sub)
		if i < 0 {
			break
		}
		at = append(at, off+i)
		if len(at) >= limit {
			break
		}
		_, size := utf8.DecodeRuneInString(s[off+i:])
		off += i + max(size, 1)
	}
	return at
}

// lineOf is the 1-based line number of byte offset off.
func lineOf(s string, off int) int {
	return strings.Count(s[:off], "\n") + 1
}

// formatRange renders a view_range the way the model wrote it: [1, 2].
func formatInts(v []int) string {
	parts := make([]string, len(v))
	for i, x := range v {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

const (
	fileClippedNotice = "<response clipped><NOTE>Due to the max output limit, only part of this file has been shown to you. " +
		"You should retry this tool after you have searched inside the file with `grep -n` in order to find the line numbers of what you are looking for.</NOTE>"
	dirClippedNotice = "<response clipped><NOTE>Due to the max output limit, only part of this directory has been shown to you. " +
		"You should use `ls -la` instead to view large directories incrementally.</NOTE>"
	lineCutMarker = " [... rest of line cut]"
)

// numbered renders lines in cat -n style ("%6d\t%s\n"), the first one
// numbered first. If the result would exceed limit characters, whole lines
// are dropped from the middle and replaced by the clipped notice, which
// names the hidden line range; the numbers of the lines shown stay their
// real line numbers (upstream numbers the text after cutting it, so every
// number after the cut is wrong). It reports whether lines were dropped.
func numbered(lines []string, first, limit int) (string, bool) {
	widths := make([]int, len(lines)) // characters of each line once numbered
	total, size := 0, 0
	for i, l := range lines {
		prefix := max(6, digits(first+i)) + 2 // number, tab, newline
		widths[i] = prefix + utf8.RuneCountInString(l)
		total += widths[i]
		size += prefix + len(l)
	}
	var sb strings.Builder
	if total <= limit {
		sb.Grow(size)
		for i, l := range lines {
			writeNumbered(&sb, first+i, l)
		}
		return sb.String(), false
	}
	budget := limit - len(fileClippedNotice) - 60 // the "lines x to y" sentence
	head, used := 0, 0
	for head < len(lines) && used+widths[head] <= budget/2 {
		used += widths[head]
		head++
	}
	tail := len(lines)
	for tail > head && used+widths[tail-1] <= budget {
		tail--
		used += widths[tail]
	}
	sb.Grow(limit + limit/2)
	from := 0
	if head == 0 && tail > 0 {
		// The first line alone is longer than half the budget (minified
		// code): show its beginning rather than nothing.
		keep := max(budget/2-len(lineCutMarker)-8, 0)
		writeNumbered(&sb, first, truncateRunes(lines[0], keep)+lineCutMarker)
		head, from = 1, 1
	}
	for i := from; i < head; i++ {
		writeNumbered(&sb, first+i, lines[i])
	}
	sb.WriteString(fileClippedNotice)
	if head < tail {
		fmt.Fprintf(&sb, "\n[Lines %d to %d are not shown; use `view_range` to see them.]", first+head, first+tail-1)
	}
	sb.WriteByte('\n')
	for i := tail; i < len(lines); i++ {
		writeNumbered(&sb, first+i, lines[i])
	}
	return sb.String(), true
}

// writeNumbered writes fmt.Sprintf("%6d\t%s\n", n, line) without fmt.
func writeNumbered(sb *strings.Builder, n int, line string) {
	var num [20]byte
	b := strconv.AppendInt(num[:0], int64(n), 10)
	for i := len(b); i < 6; i++ {
		sb.WriteByte(' ')
	}
	sb.Write(b)
	sb.WriteByte('\t')
	sb.WriteString(line)
	sb.WriteByte('\n')
}

func digits(n int) int {
	d := 1
	for n >= 10 || n <= -10 {
		n /= 10
		d++
	}
	if n < 0 {
		d++
	}
	return d
}

func truncateRunes(s string, n int) string {
	for i := range s {
		if n == 0 {
			return s[:i]
		}
		n--
	}
	return s
}
