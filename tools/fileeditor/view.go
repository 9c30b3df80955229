package fileeditor

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/tools"
)

// view shows a directory listing, an image, or a text file in cat -n style.
func (e *Executor) view(out *Output, p, resolved string, fi os.FileInfo, vr []int) *tools.Observation {
	if fi.IsDir() {
		out.Kind = "directory"
		if len(vr) > 0 {
			return fail(out, "Invalid `view_range` parameter: %s. The `view_range` parameter is not allowed when `path` points to a directory.", formatInts(vr))
		}
		return e.viewDir(out, p, resolved)
	}
	data, obs := e.readFile(out, p, resolved)
	if obs != nil {
		return obs
	}
	if mime := imageMIME(data); mime != "" {
		out.Kind = "image"
		return tools.ImageResult(fmt.Sprintf("Image file %s read successfully. Displaying image content.", p), mime, data, out)
	}
	doc, obs := e.loadText(out, p, data)
	if obs != nil {
		return obs
	}
	lines := splitLines(doc.text)
	n := len(lines)
	out.NumLines = n
	header := fmt.Sprintf("Here's the result of running `cat -n` on %s:\n", p)
	if len(vr) == 0 {
		if n == 0 {
			// As upstream (and cat -n of one empty line): the header and a
			// line 1 with nothing on it, so a model reads "empty" the way it
			// was prompted to.
			return tools.TextResult(header+"     1\t\n", out)
		}
		body, cut := numbered(lines, 1, e.opts.MaxResponseChars)
		out.Truncated = cut
		return tools.TextResult(header+body, out)
	}

	bad := func(hint string) *tools.Observation {
		return fail(out, "Invalid `view_range` parameter: %s. %s", formatInts(vr), hint)
	}
	if len(vr) != 2 {
		return bad("It should be a list of two integers.")
	}
	if n == 0 {
		return bad(fmt.Sprintf("The file %s is empty, so it has no lines to show.", p))
	}
	start, end := vr[0], vr[1]
	if start < 1 || start > n {
		return bad(fmt.Sprintf("Its first element `%d` should be within the range of lines of the file: [1, %d].", start, n))
	}
	note := ""
	switch {
	case end == -1:
		end = n
	case end > n:
		note = fmt.Sprintf("NOTE: We only show up to %d since there're only %d lines in this file.\n", n, n)
		end = n
	case end < start:
		return bad(fmt.Sprintf("Its second element `%d` should be greater than or equal to the first element `%d`.", end, start))
	}
	body, cut := numbered(lines[start-1:end], start, e.opts.MaxResponseChars)
	out.Truncated = cut
	return tools.TextResult(note+header+body, out)
}

// viewDir lists p two levels deep, skipping hidden entries (those at the
// top level counted in a trailer, as upstream counts them). Symlinks to directories are followed, but never deeper than two
// levels, so a link loop simply ends there. A subdirectory that cannot be
// read is left out. The listing stops at MaxResponseChars.
func (e *Executor) viewDir(out *Output, p, resolved string) *tools.Observation {
	top, err := os.ReadDir(resolved) // sorted by name
	if err != nil {
		return fail(out, "Ran into %v while trying to read the directory %s", unwrapPathError(err), p)
	}
	var (
		sb       strings.Builder
		chars    int
		clipped  bool
		hidden   int // hidden entries at the top level
		writeOne = func(line string) bool {
			n := utf8.RuneCountInString(line) + 1
			if chars+n > e.opts.MaxResponseChars-len(dirClippedNotice)-200 {
				clipped = true
				return false
			}
			sb.WriteString(line)
			sb.WriteByte('\n')
			chars += n
			return true
		}
	)
	if p == "/" {
		writeOne("/")
	} else {
		writeOne(p + "/")
	}
	for _, ent := range top {
		if strings.HasPrefix(ent.Name(), ".") {
			hidden++
		}
	}
	for _, ent := range top {
		if clipped {
			break
		}
		if strings.HasPrefix(ent.Name(), ".") {
			continue
		}
		full, fullResolved := filepath.Join(p, ent.Name()), filepath.Join(resolved, ent.Name())
		if !isDir(ent, fullResolved) {
			writeOne(full)
			continue
		}
		if !writeOne(full + "/") {
			break
		}
		children, err := os.ReadDir(fullResolved)
		if err != nil {
			continue
		}
		for _, c := range children {
			if strings.HasPrefix(c.Name(), ".") {
				continue
			}
			line := filepath.Join(full, c.Name())
			if isDir(c, filepath.Join(fullResolved, c.Name())) {
				line += "/"
			}
			if !writeOne(line) {
				break
			}
		}
	}
	text := fmt.Sprintf("Here's the files and directories up to 2 levels deep in %s, excluding hidden items:\n", p) +
		strings.TrimSuffix(sb.String(), "\n")
	if clipped {
		out.Truncated = true
		text += "\n" + dirClippedNotice
	}
	if hidden > 0 {
		text += fmt.Sprintf("\n\n%d hidden files/directories in this directory are excluded. You can use 'ls -la %s' to see them.", hidden, p)
	}
	return tools.TextResult(text, out)
}

// isDir follows a symlink to say whether an entry is a directory.
func isDir(ent os.DirEntry, full string) bool {
	if ent.Type()&os.ModeSymlink == 0 {
		return ent.IsDir()
	}
	fi, err := os.Stat(full)
	return err == nil && fi.IsDir()
}
