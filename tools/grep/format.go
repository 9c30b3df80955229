package grep

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// format writes the text the model reads. Files mode is OpenHands' text
// word for word.
func format(out *Output, limit int, timeout time.Duration) string {
	var b strings.Builder
	filter := ""
	if out.IncludePattern != "" {
		filter = fmt.Sprintf(" (filtered by '%s')", out.IncludePattern)
	}
	switch {
	case out.Count == 0:
		fmt.Fprintf(&b, "No files found containing pattern '%s' in directory '%s'%s", out.Pattern, out.SearchPath, filter)
	case out.OutputMode == ModeContent:
		matches := 0
		for _, l := range out.Lines {
			if l.Match {
				matches++
			}
		}
		fmt.Fprintf(&b, "Found %d matching line(s) in %d file(s) for pattern '%s' in '%s'%s:\n",
			matches, len(out.Matches), out.Pattern, out.SearchPath, filter)
		writeLines(&b, out.Lines)
		if out.OutputCut {
			fmt.Fprintf(&b, "\n\n[Results cut at about %d characters of output, before the limit of %d matching lines. Use a more specific pattern, path or include, fewer context lines, or output_mode \"files\".]", MaxContentBytes, limit)
		} else if out.Truncated {
			fmt.Fprintf(&b, "\n\n[Results truncated to first %d matching lines. Consider using a more specific pattern.]", limit)
		}
	case out.OutputMode == ModeCount:
		fmt.Fprintf(&b, "Found %d file(s) containing pattern '%s' in '%s'%s (matching lines per file):", len(out.Counts), out.Pattern, out.SearchPath, filter)
		for _, c := range out.Counts {
			b.WriteString("\n" + c.Path + ":" + strconv.Itoa(c.Count))
		}
		if out.Truncated {
			fmt.Fprintf(&b, "\n\n[Results truncated to first %d files. Consider using a more specific pattern.]", limit)
		}
	default:
		fmt.Fprintf(&b, "Found %d file(s) containing pattern '%s' in '%s'%s:\n%s",
			len(out.Matches), out.Pattern, out.SearchPath, filter, strings.Join(out.Matches, "\n"))
		if out.Truncated {
			fmt.Fprintf(&b, "\n\n[Results truncated to first %d files. Consider using a more specific pattern.]", limit)
		}
	}
	if out.Incomplete {
		fmt.Fprintf(&b, "\n\n[The search stopped after %v, so these results are incomplete. Search a narrower path or filter files with include.]", timeout)
	}
	return b.String()
}

// writeLines writes grep-style lines: "path:N:text" for matches,
// "path-N-text" for context, "--" between groups that are not adjacent.
func writeLines(b *strings.Builder, lines []Line) {
	hasContext := false
	for _, l := range lines {
		if !l.Match {
			hasContext = true
			break
		}
	}
	for i, l := range lines {
		if i > 0 {
			b.WriteByte('\n')
			prev := lines[i-1]
			if hasContext && (prev.Path != l.Path || prev.Line+1 != l.Line) {
				b.WriteString("--\n")
			}
		}
		sep := "-"
		if l.Match {
			sep = ":"
		}
		b.WriteString(l.Path + sep + strconv.Itoa(l.Line) + sep + l.Text)
	}
}
