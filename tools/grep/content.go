package grep

import (
	"bytes"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

const (
	// maxContentFile bounds how much of one file content mode reads.
	maxContentFile = 64 << 20
	// maxLineBytes cuts long lines (minified code) in content mode.
	maxLineBytes = 500
)

// Line is one line of content-mode output.
type Line struct {
	Path  string `json:"path" jsonschema:"absolute path of the file"`
	Line  int    `json:"line" jsonschema:"1-based line number"`
	Text  string `json:"text" jsonschema:"the line, without its newline; long lines are cut"`
	Match bool   `json:"match" jsonschema:"true for a matching line, false for a context line"`
}

type lineMatch struct{ no, start, end int }

// content returns up to limit matching lines of the file with ctx lines of
// context around each; more reports that the file has further matches.
func (s *searcher) content(path string, ctx, limit int) (lines []Line, matches int, more bool, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, false, err
	}
	data, err := io.ReadAll(io.LimitReader(f, maxContentFile))
	f.Close()
	if err != nil {
		return nil, 0, false, err
	}
	s.sc.reset()
	var found []lineMatch
	no, counted := 1, 0
	for pos := 0; pos < len(data); {
		ls, le, ok := s.sc.nextLine(data, pos)
		if !ok {
			break
		}
		if len(found) == limit {
			more = true
			break
		}
		no += bytes.Count(data[counted:ls], []byte{'\n'})
		counted = ls
		found = append(found, lineMatch{no, ls, le})
		pos = le + 1
	}

	emitted := 0 // the last line number output
	emit := func(no, start, end int, match bool) {
		lines = append(lines, Line{Path: path, Line: no, Text: cleanLine(data[start:end]), Match: match})
		emitted = no
	}
	for i, m := range found {
		// Context before: back up from the match, not past what was shown.
		first := max(m.no-ctx, emitted+1, 1)
		off := m.start
		for k := m.no; k > first; k-- {
			off = bytes.LastIndexByte(data[:off-1], '\n') + 1
		}
		for k := first; k < m.no; k++ {
			end := lineEnd(data, off)
			emit(k, off, end, false)
			off = end + 1
		}
		emit(m.no, m.start, m.end, true)
		// Context after: up to ctx lines, stopping before the next match.
		last := m.no + ctx
		if i+1 < len(found) {
			last = min(last, found[i+1].no-1)
		}
		off = m.end + 1
		for k := m.no + 1; k <= last && off < len(data); k++ {
			end := lineEnd(data, off)
			emit(k, off, end, false)
			off = end + 1
		}
	}
	return lines, len(found), more, nil
}

// cleanLine makes a line printable: no CR, valid UTF-8, at most
// maxLineBytes.
func cleanLine(b []byte) string {
	b = bytes.TrimSuffix(b, []byte{'\r'})
	cut := false
	if len(b) > maxLineBytes {
		n := maxLineBytes
		for n > 0 && !utf8.RuneStart(b[n]) {
			n--
		}
		b, cut = b[:n], true
	}
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	if cut {
		s += " [... line truncated]"
	}
	return s
}
