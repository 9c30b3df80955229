package fileeditor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/sandboxd/sandboxd/tools"
)

// create writes a new file. It never overwrites anything (the final step is
// an exclusive link) and never creates directories.
func (e *Executor) create(out *Output, p, resolved string, fileText *string) *tools.Observation {
	out.Kind = "file"
	if _, err := os.Lstat(resolved); err == nil {
		return invalidPath(out, p, fmt.Sprintf("File already exists at: %s. Cannot overwrite files using command `create`.", p))
	}
	out.PrevExist = false
	if fileText == nil {
		return missingParam(out, "create", "file_text")
	}
	dir := filepath.Dir(p)
	switch fi, err := os.Stat(filepath.Dir(resolved)); {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return invalidPath(out, p, fmt.Sprintf("The parent directory %s does not exist, and `create` does not create directories. Create it first (for example with `mkdir -p %s`).", dir, dir))
	case err != nil:
		return fail(out, "Ran into %v while trying to write to %s", unwrapPathError(err), p)
	case !fi.IsDir():
		return invalidPath(out, p, fmt.Sprintf("%s is not a directory, so no file can be created in it.", dir))
	}
	if int64(len(*fileText)) > e.opts.MaxFileBytes {
		return fail(out, "Invalid `file_text` parameter: the text is %.1fMB, over the %s limit of this tool. No file was created.", float64(len(*fileText))/(1<<20), formatMB(e.opts.MaxFileBytes))
	}
	err := e.writeFile(resolved, []byte(*fileText), nil, true)
	if errors.Is(err, errExists) {
		return invalidPath(out, p, fmt.Sprintf("File already exists at: %s. Cannot overwrite files using command `create`.", p))
	}
	if err != nil {
		return fail(out, "Ran into %v while trying to write to %s", unwrapPathError(err), p)
	}
	e.hist.push(resolved, false, nil)
	out.PrevExist = false
	out.Encoding, out.LineEnding = encUTF8.String(), newDocument(*fileText, encUTF8).lineEnding()
	out.NumLines = countLines(*fileText)
	out.Change = &Change{Line: 1, Added: out.NumLines}
	setContents(out, "", *fileText, false)
	return tools.TextResult(fmt.Sprintf("File created successfully at: %s", p), out)
}

// strReplace replaces the one occurrence of oldStr. Matching is literal and
// sees every CRLF as "\n", so text the model copied from view matches a CRLF
// file, and the replacement gets the file's line endings.
func (e *Executor) strReplace(out *Output, p, resolved string, oldStr, newStr *string) *tools.Observation {
	if oldStr == nil {
		return missingParam(out, "str_replace", "old_str")
	}
	newS := ""
	if newStr != nil {
		newS = *newStr
	}
	if newS == *oldStr {
		return fail(out, "Invalid `new_str` parameter: %s. No replacement was performed. `new_str` and `old_str` must be different.", newS)
	}
	data, obs := e.readFile(out, p, resolved)
	if obs != nil {
		return obs
	}
	doc, obs := e.loadText(out, p, data)
	if obs != nil {
		return obs
	}
	oldN, newN := lf(*oldStr), lf(newS)
	if oldN == newN {
		return fail(out, "Invalid `new_str` parameter: %s. No replacement was performed. `new_str` and `old_str` differ only in their line endings, and this tool keeps the file's own line endings (%s).", newS, doc.lineEnding())
	}
	m := newEOLMap(doc.text)
	var idx int
	switch {
	case oldN == "" && m.norm == "":
		idx = 0 // filling an empty file
	case oldN == "":
		return fail(out, "Invalid `old_str` parameter: ``. No replacement was performed. `old_str` must be the exact text to replace and cannot be empty; to add text at a line, use `insert`.")
	default:
		at := findAll(m.norm, oldN, 1000)
		switch len(at) {
		case 0:
			return fail(out, "No replacement was performed, old_str `%s` did not appear verbatim in %s.%s", clip(*oldStr), p, noMatchHint(m.norm, oldN))
		case 1:
			idx = at[0]
		default:
			return fail(out, "No replacement was performed. Multiple occurrences of old_str `%s` in lines %s. Please ensure it is unique.", clip(*oldStr), matchLines(m.norm, at))
		}
	}
	start, end := m.orig(idx), m.orig(idx+len(oldN))
	newText := doc.text[:start] + doc.toFileEOL(newN) + doc.text[end:]
	line := lineOf(m.norm, idx)
	if obs := e.save(out, p, resolved, doc, data, newText); obs != nil {
		return obs
	}
	out.Change = &Change{Line: line, Removed: countLines(oldN), Added: countLines(newN)}
	setContents(out, doc.text, newText, true)
	lastEdited := line + max(countLines(newN), 1) - 1
	return e.editResult(out, p, newText, line-4, lastEdited+4,
		fmt.Sprintf("The file %s has been edited. ", p), "a snippet of "+p,
		"Review the changes and make sure they are as expected. Edit the file again if necessary.")
}

// insert puts newStr after line insertLine. The inserted text always ends
// with a line break, unless it goes after the last line of a file that has
// no final line break: then the break goes before it and the file still ends
// without one (upstream joins the two lines).
func (e *Executor) insert(out *Output, p, resolved string, insertLine *int, newStr *string) *tools.Observation {
	if insertLine == nil {
		return missingParam(out, "insert", "insert_line")
	}
	if newStr == nil {
		return missingParam(out, "insert", "new_str")
	}
	data, obs := e.readFile(out, p, resolved)
	if obs != nil {
		return obs
	}
	doc, obs := e.loadText(out, p, data)
	if obs != nil {
		return obs
	}
	n, at := countLines(doc.text), *insertLine
	if at < 0 || at > n {
		return fail(out, "Invalid `insert_line` parameter: %d. It should be within the range of allowed values: [0, %d]", at, n)
	}
	newN := lf(*newStr)
	body, eol := doc.toFileEOL(newN), doc.eol()
	var newText string
	if at == n && n > 0 && !strings.HasSuffix(doc.text, "\n") {
		if newN == "" {
			body = eol // a blank line needs its break too
		}
		newText = doc.text + eol + body
	} else {
		if !strings.HasSuffix(newN, "\n") {
			body += eol
		}
		off := lineStart(doc.text, at+1)
		newText = doc.text[:off] + body + doc.text[off:]
	}
	if obs := e.save(out, p, resolved, doc, data, newText); obs != nil {
		return obs
	}
	k := max(1, countLines(newN))
	out.Change = &Change{Line: at + 1, Added: k}
	setContents(out, doc.text, newText, true)
	return e.editResult(out, p, newText, at-3, at+k+4,
		fmt.Sprintf("The file %s has been edited. ", p), "a snippet of the edited file",
		"Review the changes and make sure they are as expected (correct indentation, no duplicate lines, etc). Edit the file again if necessary.")
}

// undo restores the file as it was before the last edit made through this
// executor, or removes it if that edit created it.
func (e *Executor) undo(out *Output, p, resolved string) *tools.Observation {
	snap, ok := e.hist.pop(resolved)
	if !ok {
		return fail(out, "No edit history found for %s.", p)
	}
	cur := readLimited(resolved, e.opts.MaxFileBytes) // for old_content only
	curText := ""
	if enc, err := detectEncoding(cur); err == nil {
		curText, _ = decode(cur, enc)
	}
	if !snap.existed {
		if err := os.Remove(resolved); err != nil {
			e.hist.unpop(resolved, snap)
			return fail(out, "Ran into %v while trying to remove %s", unwrapPathError(err), p)
		}
		out.Kind = "file"
		setContents(out, curText, "", true)
		out.NewContent = nil
		return tools.TextResult(fmt.Sprintf("Last edit to %s undone successfully. The file did not exist before that edit (it was created with `create`), so it has been removed.", p), out)
	}
	if err := e.writeFile(resolved, snap.data, cur, false); err != nil {
		e.hist.unpop(resolved, snap)
		return fail(out, "Ran into %v while trying to write to %s", unwrapPathError(err), p)
	}
	// The snapshot decoded before the edit that stored it.
	enc, _ := detectEncoding(snap.data)
	text, _ := decode(snap.data, enc)
	doc := newDocument(text, enc)
	out.Kind, out.Encoding, out.LineEnding = "file", enc.String(), doc.lineEnding()
	setContents(out, curText, text, true)
	lines := splitLines(text)
	out.NumLines = len(lines)
	msg := fmt.Sprintf("Last edit to %s undone successfully. ", p)
	if len(lines) == 0 {
		return tools.TextResult(msg+"The file is now empty.", out)
	}
	body, cut := numbered(lines, 1, e.opts.MaxResponseChars)
	out.Truncated = cut
	return tools.TextResult(msg+fmt.Sprintf("Here's the result of running `cat -n` on %s:\n", p)+body, out)
}

// save encodes newText in the file's encoding, writes it and records the
// old bytes for undo.
func (e *Executor) save(out *Output, p, resolved string, doc *document, old []byte, newText string) *tools.Observation {
	data, err := encode(newText, doc.enc)
	if err != nil {
		return fail(out, "No change was made: %s is encoded as %s and %v. Use only characters that encoding can represent, or convert the file to UTF-8 first (for example with `iconv`).", p, doc.enc, err)
	}
	if int64(len(data)) > e.opts.MaxFileBytes {
		return fail(out, "No change was made: the edited file would be %.1fMB, over the %s limit of this tool.", float64(len(data))/(1<<20), formatMB(e.opts.MaxFileBytes))
	}
	if err := e.writeFile(resolved, data, old, false); err != nil {
		e.log.Warn("write failed", "path", p, "err", err)
		return fail(out, "Ran into %v while trying to write to %s. The file was not changed.", unwrapPathError(err), p)
	}
	e.hist.push(resolved, true, old)
	return nil
}

// editResult is the success text of an edit: a cat -n snippet of lines
// [from, to] (clamped) of the new text.
func (e *Executor) editResult(out *Output, p, newText string, from, to int, lead, what, tail string) *tools.Observation {
	lines := splitLines(newText)
	out.NumLines = len(lines)
	from, to = max(from, 1), min(to, len(lines))
	if len(lines) == 0 || from > to {
		return tools.TextResult(lead+"The file is now empty. "+tail, out)
	}
	body, cut := numbered(lines[from-1:to], from, e.opts.MaxResponseChars)
	out.Truncated = cut
	return tools.TextResult(lead+fmt.Sprintf("Here's the result of running `cat -n` on %s:\n", what)+body+tail, out)
}

// lf turns CRLF into LF in text from the model.
func lf(s string) string { return strings.ReplaceAll(s, "\r\n", "\n") }

// clip shortens old_str when a message repeats it.
func clip(s string) string {
	const n = 2000
	if len(s) <= n {
		return s
	}
	return truncateRunes(s, n) + "[...]"
}

// matchLines renders the distinct line numbers of matches: [1, 3].
func matchLines(s string, at []int) string {
	var lines []int
	prev, line := 0, 1
	for _, off := range at {
		line += strings.Count(s[prev:off], "\n")
		prev = off
		if len(lines) == 0 || lines[len(lines)-1] != line {
			lines = append(lines, line)
		}
	}
	r := formatInts(lines)
	if len(at) >= 1000 {
		r += " (and maybe more)"
	}
	return r
}

var lineNumberPrefix = regexp.MustCompile(`^ *\d+\t`)

// noMatchHint explains a common reason why old_str did not match.
func noMatchHint(text, old string) string {
	oldLines := strings.Split(old, "\n")
	numbered := 0
	for _, l := range oldLines {
		if lineNumberPrefix.MatchString(l) {
			numbered++
		}
	}
	if numbered > 0 && numbered*2 >= len(oldLines) {
		return " It looks like `old_str` includes the line numbers and tabs that `view` prints at the start of each line; leave them out."
	}
	if t := strings.TrimSpace(old); t != "" && t != old {
		if at := findAll(text, t, 1000); len(at) > 0 {
			return fmt.Sprintf(" The text without its leading and trailing whitespace appears in lines %s; check the whitespace at the start and end of `old_str`.", matchLines(text, at))
		}
	}
	if len(oldLines) <= 200 {
		if line := findTrimmedLines(text, oldLines); line > 0 {
			return fmt.Sprintf(" Lines that differ from `old_str` only in indentation or spacing start at line %d; copy them exactly from the output of `view`.", line)
		}
	}
	return ""
}

// findTrimmedLines finds want as consecutive lines of text, comparing lines
// with surrounding whitespace removed; it returns the first line or 0.
func findTrimmedLines(text string, want []string) int {
	for len(want) > 0 && strings.TrimSpace(want[0]) == "" {
		want = want[1:]
	}
	for len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "" {
		want = want[:len(want)-1]
	}
	if len(want) == 0 {
		return 0
	}
	lines := strings.Split(text, "\n")
	first := strings.TrimSpace(want[0])
	for i := 0; i+len(want) <= len(lines); i++ {
		if strings.TrimSpace(lines[i]) != first {
			continue
		}
		ok := true
		for j := 1; j < len(want) && ok; j++ {
			ok = strings.TrimSpace(lines[i+j]) == strings.TrimSpace(want[j])
		}
		if ok {
			return i + 1
		}
	}
	return 0
}

// readLimited reads a file if it is at most limit bytes, else returns nil.
func readLimited(path string, limit int64) []byte {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil || int64(len(b)) > limit {
		return nil
	}
	return b
}
