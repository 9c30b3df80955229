package walk

import (
	"errors"
	"fmt"
	"strings"
)

// maxAlternatives bounds brace expansion ({a,b}{c,d}... multiplies).
const maxAlternatives = 256

// Pattern is a compiled file glob as the grep and glob tools take it:
// '*' (within a path segment), '?', "**" (any number of directories),
// bracket expressions ("[a-z]", "[!0-9]"), braces ("*.{ts,tsx}", nested
// allowed) and '\' to quote. An alternative without '/' matches the file
// name at any depth ("*.go" is "**/*.go"), one with '/' matches the path
// relative to the search directory; this is how ripgrep's --glob and
// .gitignore read patterns, and it does not depend on the process cwd.
type Pattern struct {
	raw  string
	alts []alt
}

type alt struct {
	pat      string
	basename bool
	segs     []string // pat split at '/', for pruning
}

// ErrBadPattern matches (errors.Is) every *PatternError.
var ErrBadPattern = errors.New("invalid glob pattern")

// PatternError says what is wrong with a glob pattern.
type PatternError struct {
	Pattern string
	Problem string // a sentence fragment for the model, e.g. "'{' without '}'"
}

func (e *PatternError) Error() string {
	return fmt.Sprintf("invalid glob pattern %q: %s", e.Pattern, e.Problem)
}

// Is makes errors.Is(err, ErrBadPattern) true.
func (e *PatternError) Is(target error) bool { return target == ErrBadPattern }

// withPattern names the pattern as written in an error found in one of its
// expansions.
func withPattern(err error, pattern string) error {
	var pe *PatternError
	if errors.As(err, &pe) {
		pe.Pattern = pattern
	}
	return err
}

func badPattern(p, format string, args ...any) error {
	return &PatternError{Pattern: p, Problem: fmt.Sprintf(format, args...)}
}

// CompilePattern compiles a glob. With anchored set, every alternative is
// matched against the relative path even when it has no '/'.
func CompilePattern(pattern string, anchored bool) (*Pattern, error) {
	if pattern == "" {
		return nil, badPattern(pattern, "it is empty")
	}
	expanded, err := expandBraces(pattern)
	if err != nil {
		return nil, withPattern(err, pattern)
	}
	p := &Pattern{raw: pattern}
	for _, e := range expanded {
		e = strings.TrimPrefix(e, "./")
		if err := checkBrackets(e); err != nil {
			return nil, withPattern(err, pattern)
		}
		if e == "" {
			continue
		}
		a := alt{pat: e, basename: !anchored && !strings.Contains(e, "/")}
		if !a.basename {
			a.segs = strings.Split(e, "/")
		}
		p.alts = append(p.alts, a)
	}
	if len(p.alts) == 0 {
		return nil, badPattern(pattern, "it matches nothing")
	}
	return p, nil
}

// WalkOptions are walk options that reach every file p may match, and
// little else: hidden and ignored entries that p names are kept,
// directories p cannot match in are skipped.
func (p *Pattern) WalkOptions(workers int) Options {
	return Options{
		Workers:     workers,
		KeepHidden:  func(name string, _ bool) bool { return p.NamesHidden(name) },
		KeepIgnored: func(name string, _ bool) bool { return p.NamesExactly(name) },
		SkipDir:     func(rel string) bool { return !p.MayContain(rel) },
	}
}

// String returns the pattern as written.
func (p *Pattern) String() string { return p.raw }

// Match reports whether the file at rel (slash-separated, relative to the
// search directory) with base name name matches.
func (p *Pattern) Match(rel, name string) bool {
	for i := range p.alts {
		a := &p.alts[i]
		if a.basename {
			if wildmatch(a.pat, name) {
				return true
			}
		} else if wildmatch(a.pat, rel) {
			return true
		}
	}
	return false
}

// MayContain reports whether a file under the directory rel could match;
// false lets a walk skip the directory.
func (p *Pattern) MayContain(rel string) bool {
	for i := range p.alts {
		if p.alts[i].mayContain(rel) {
			return true
		}
	}
	return false
}

func (a *alt) mayContain(rel string) bool {
	if a.basename {
		return true
	}
	i := 0
	for rel != "" {
		seg := rel
		if j := strings.IndexByte(rel, '/'); j >= 0 {
			seg, rel = rel[:j], rel[j+1:]
		} else {
			rel = ""
		}
		if i >= len(a.segs)-1 {
			// The last segment names the file: a directory this deep
			// can only match through "**".
			return i < len(a.segs) && a.segs[i] == "**"
		}
		if a.segs[i] == "**" {
			return true
		}
		if !wildmatch(a.segs[i], seg) {
			return false
		}
		i++
	}
	return true
}

// NamesHidden reports whether the pattern asks for hidden entries called
// name: some path segment starts with a literal '.' and matches it
// (".github/**", "**/.env", ".*"). A ".git" directory must be named exactly.
func (p *Pattern) NamesHidden(name string) bool {
	for i := range p.alts {
		for _, seg := range p.alts[i].segments() {
			if seg == "" || seg[0] != '.' {
				continue
			}
			if name == ".git" {
				if seg == ".git" {
					return true
				}
				continue
			}
			if wildmatch(seg, name) {
				return true
			}
		}
	}
	return false
}

// NamesExactly reports whether some path segment of the pattern is the
// literal name (no wildcards): such entries are searched even when a
// .gitignore excludes them ("**/.env", "node_modules/react/**").
func (p *Pattern) NamesExactly(name string) bool {
	for i := range p.alts {
		for _, seg := range p.alts[i].segments() {
			if seg == name && !hasMeta(seg) {
				return true
			}
		}
	}
	return false
}

func (a *alt) segments() []string {
	if a.basename {
		return []string{a.pat}
	}
	return a.segs
}

// SplitPattern splits the leading directories without glob characters off a
// slash-separated pattern: "src/app/**/*.ts" gives "src/app" and "**/*.ts",
// "/abs/dir/*.go" gives "/abs/dir" and "*.go". The last segment always stays
// in rest. dir is "" when there is nothing to split.
func SplitPattern(pattern string) (dir, rest string) {
	segs := strings.Split(pattern, "/")
	n := 0
	for n < len(segs)-1 && !hasMeta(segs[n]) {
		n++
	}
	if n == 0 {
		return "", pattern
	}
	dir = strings.Join(segs[:n], "/")
	if dir == "" { // the pattern started with '/'
		dir = "/"
	}
	return dir, strings.Join(segs[n:], "/")
}

// expandBraces expands "{a,b}" alternatives (nested allowed, '\' quotes,
// braces inside [...] are literal) into brace-free patterns.
func expandBraces(p string) ([]string, error) {
	lbrace, rbrace, commas, err := findBraces(p)
	if err != nil {
		return nil, err
	}
	if lbrace < 0 {
		return []string{p}, nil
	}
	prefix, suffix := p[:lbrace], p[rbrace+1:]
	var out []string
	start := lbrace + 1
	for _, c := range append(commas, rbrace) {
		sub, err := expandBraces(prefix + p[start:c] + suffix)
		if err != nil {
			return nil, err
		}
		out = append(out, sub...)
		if len(out) > maxAlternatives {
			return nil, badPattern(p, "its braces expand to more than %d alternatives", maxAlternatives)
		}
		start = c + 1
	}
	return out, nil
}

// findBraces finds the first top-level brace group of p: the index of its
// '{' and '}' and of its top-level commas; lbrace is -1 without braces.
func findBraces(p string) (lbrace, rbrace int, commas []int, err error) {
	lbrace = -1
	depth := 0
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			i++
		case '[':
			if end := bracketEnd(p, i); end > 0 {
				i = end
			}
		case '{':
			if depth == 0 {
				lbrace = i
			}
			depth++
		case ',':
			if depth == 1 {
				commas = append(commas, i)
			}
		case '}':
			if depth == 0 {
				return 0, 0, nil, badPattern(p, "'}' without '{' (write \\} for a literal brace)")
			}
			depth--
			if depth == 0 {
				return lbrace, i, commas, nil
			}
		}
	}
	if depth > 0 {
		return 0, 0, nil, badPattern(p, "'{' without '}' (write \\{ for a literal brace)")
	}
	return -1, -1, nil, nil
}

// bracketEnd returns the index of the ']' closing the bracket expression
// that starts at p[i] == '[', or -1.
func bracketEnd(p string, i int) int {
	j := i + 1
	if j < len(p) && (p[j] == '!' || p[j] == '^') {
		j++
	}
	if j < len(p) && p[j] == ']' {
		j++
	}
	for ; j < len(p); j++ {
		switch p[j] {
		case '\\':
			j++
		case '[':
			if j+1 < len(p) && p[j+1] == ':' {
				if k := strings.Index(p[j+2:], ":]"); k >= 0 {
					j += k + 3
				}
			}
		case ']':
			return j
		}
	}
	return -1
}

// checkBrackets rejects an unterminated '[' and a trailing '\'.
func checkBrackets(p string) error {
	for i := 0; i < len(p); i++ {
		switch p[i] {
		case '\\':
			if i == len(p)-1 {
				return badPattern(p, "it ends with a lone '\\'")
			}
			i++
		case '[':
			end := bracketEnd(p, i)
			if end < 0 {
				return badPattern(p, "'[' without ']' (write \\[ for a literal bracket)")
			}
			i = end
		}
	}
	return nil
}
