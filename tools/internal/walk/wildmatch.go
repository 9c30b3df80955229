package walk

import "strings"

// wildmatch reports whether text (a slash-separated path) matches pattern,
// with the semantics of git's wildmatch in WM_PATHNAME mode, which is what
// .gitignore uses: '*' and '?' do not match '/', "**" as a whole path
// segment matches any number of directories ("**/x", "a/**/b", "a/**"),
// '[...]' is a bracket expression ('!' or '^' negates, ranges, POSIX classes
// such as [[:digit:]]), and '\' quotes the next character. Matching is on
// bytes, as git does.
func wildmatch(pattern, text string) bool {
	return dowild(pattern, text) == wmMatch
}

const (
	wmMatch = iota
	wmNoMatch
	wmAbortAll
	wmAbortToStarStar
)

// dowild is a port of dowild() from git's wildmatch.c; the return codes let
// a failed "**" stop the backtracking of outer stars early.
func dowild(p, text string) int {
	pi, ti := 0, 0
	for ; pi < len(p); pi, ti = pi+1, ti+1 {
		pch := p[pi]
		if ti >= len(text) && pch != '*' {
			return wmAbortAll
		}
		var tch byte
		if ti < len(text) {
			tch = text[ti]
		}
		switch pch {
		case '\\':
			pi++
			if pi >= len(p) || tch != p[pi] {
				return wmNoMatch
			}
		case '?':
			if tch == '/' {
				return wmNoMatch
			}
		case '*':
			matchSlash := false
			pi++
			if pi < len(p) && p[pi] == '*' {
				prev := pi - 2
				for pi < len(p) && p[pi] == '*' {
					pi++
				}
				if (prev < 0 || p[prev] == '/') &&
					(pi == len(p) || p[pi] == '/' || (p[pi] == '\\' && pi+1 < len(p) && p[pi+1] == '/')) {
					// "**/" may match no directory at all: try the rest
					// of the pattern right here first.
					if pi < len(p) && p[pi] == '/' && dowild(p[pi+1:], text[ti:]) == wmMatch {
						return wmMatch
					}
					matchSlash = true
				}
			}
			if pi == len(p) {
				// Trailing "**" matches everything; a trailing "*" only
				// what has no further slash.
				if !matchSlash && strings.IndexByte(text[ti:], '/') >= 0 {
					return wmNoMatch
				}
				return wmMatch
			}
			if !matchSlash && p[pi] == '/' {
				// One star followed by a slash matches the rest of
				// this path segment.
				slash := strings.IndexByte(text[ti:], '/')
				if slash < 0 {
					return wmNoMatch
				}
				ti += slash
				continue // the loop step consumes the two slashes
			}
			for ti < len(text) {
				if !isGlobSpecial(p[pi]) {
					// Skip ahead to the next occurrence of the literal
					// that follows the star.
					pc := p[pi]
					for ti < len(text) && (matchSlash || text[ti] != '/') && text[ti] != pc {
						ti++
					}
					if ti >= len(text) || text[ti] != pc {
						return wmNoMatch
					}
				}
				m := dowild(p[pi:], text[ti:])
				if m != wmNoMatch {
					if !matchSlash || m != wmAbortToStarStar {
						return m
					}
				} else if !matchSlash && text[ti] == '/' {
					return wmAbortToStarStar
				}
				ti++
			}
			return wmAbortAll
		case '[':
			r, next := matchBracket(p, pi, tch)
			if r != wmMatch {
				return r
			}
			pi = next
		default:
			if tch != pch {
				return wmNoMatch
			}
		}
	}
	if ti < len(text) {
		return wmNoMatch
	}
	return wmMatch
}

// matchBracket matches tch against the bracket expression starting at
// p[open] == '['. It returns wmMatch and the index of the closing ']', or
// wmNoMatch, or wmAbortAll for an unterminated expression.
func matchBracket(p string, open int, tch byte) (int, int) {
	pi := open + 1
	if pi >= len(p) {
		return wmAbortAll, 0
	}
	pch := p[pi]
	if pch == '^' {
		pch = '!'
	}
	negated := pch == '!'
	if negated {
		pi++
		if pi >= len(p) {
			return wmAbortAll, 0
		}
		pch = p[pi]
	}
	var prev byte
	matched := false
	for {
		switch {
		case pch == '\\':
			pi++
			if pi >= len(p) {
				return wmAbortAll, 0
			}
			pch = p[pi]
			if tch == pch {
				matched = true
			}
		case pch == '-' && prev != 0 && pi+1 < len(p) && p[pi+1] != ']':
			pi++
			pch = p[pi]
			if pch == '\\' {
				pi++
				if pi >= len(p) {
					return wmAbortAll, 0
				}
				pch = p[pi]
			}
			if tch <= pch && tch >= prev {
				matched = true
			}
			pch = 0 // a range cannot start a new range
		case pch == '[' && pi+1 < len(p) && p[pi+1] == ':':
			end := strings.IndexByte(p[pi+2:], ']')
			if end < 0 {
				return wmAbortAll, 0
			}
			name := p[pi+2 : pi+2+end]
			if !strings.HasSuffix(name, ":") {
				// Not "[:class:]": an ordinary '['.
				if tch == '[' {
					matched = true
				}
				break
			}
			ok, known := classMatch(name[:len(name)-1], tch)
			if !known {
				return wmAbortAll, 0
			}
			if ok {
				matched = true
			}
			pi += 2 + end
			pch = 0
		default:
			if tch == pch {
				matched = true
			}
		}
		prev = pch
		pi++
		if pi >= len(p) {
			return wmAbortAll, 0
		}
		pch = p[pi]
		if pch == ']' {
			break
		}
	}
	if matched == negated || tch == '/' {
		return wmNoMatch, 0
	}
	return wmMatch, pi
}

func classMatch(class string, c byte) (match, known bool) {
	isUpper := c >= 'A' && c <= 'Z'
	isLower := c >= 'a' && c <= 'z'
	isDigit := c >= '0' && c <= '9'
	isAlpha := isUpper || isLower
	isPrint := c >= 0x20 && c < 0x7f
	switch class {
	case "alnum":
		return isAlpha || isDigit, true
	case "alpha":
		return isAlpha, true
	case "blank":
		return c == ' ' || c == '\t', true
	case "cntrl":
		return c < 0x20 || c == 0x7f, true
	case "digit":
		return isDigit, true
	case "graph":
		return isPrint && c != ' ', true
	case "lower":
		return isLower, true
	case "print":
		return isPrint, true
	case "punct":
		return isPrint && c != ' ' && !isAlpha && !isDigit, true
	case "space":
		return c == ' ' || (c >= '\t' && c <= '\r'), true
	case "upper":
		return isUpper, true
	case "xdigit":
		return isDigit || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'), true
	}
	return false, false
}

func isGlobSpecial(c byte) bool {
	return c == '*' || c == '?' || c == '[' || c == '\\'
}

// hasMeta reports whether s has a glob metacharacter (braces included).
func hasMeta(s string) bool {
	return strings.ContainsAny(s, "*?[\\{")
}
