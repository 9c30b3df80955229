package walk

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
)

// rule is one pattern line of a .gitignore file.
type rule struct {
	pattern  string // without '!', a leading '/' and a trailing '/'
	negate   bool   // "!pattern": re-include
	dirOnly  bool   // "pattern/": directories only
	basename bool   // no '/' inside: matched against the entry name at any depth
	kind     ruleKind
	lit      string // the literal part for the fast kinds
}

type ruleKind uint8

const (
	kindGlob   ruleKind = iota // general wildmatch
	kindExact                  // "name": equality
	kindSuffix                 // "*.ext": suffix
	kindPrefix                 // "name*": prefix
)

// parseIgnore parses the text of a .gitignore (or .git/info/exclude) file
// following gitignore(5): blank lines and '#' comments are skipped, trailing
// spaces are dropped unless escaped with '\', '!' negates, a trailing '/'
// limits the pattern to directories, and a pattern with a '/' at the start
// or in the middle is anchored to the directory of the file.
func parseIgnore(data []byte) []rule {
	var rules []rule
	for len(data) > 0 {
		var line []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			line, data = data, nil
		}
		if r, ok := parseRule(string(line)); ok {
			rules = append(rules, r)
		}
	}
	return rules
}

func parseRule(line string) (rule, bool) {
	line = strings.TrimSuffix(line, "\r")
	// Trailing spaces are ignored unless the last one is escaped.
	for strings.HasSuffix(line, " ") && !strings.HasSuffix(line, "\\ ") {
		line = line[:len(line)-1]
	}
	if line == "" || line[0] == '#' {
		return rule{}, false
	}
	var r rule
	if line[0] == '!' {
		r.negate = true
		line = line[1:]
	} else if strings.HasPrefix(line, `\!`) || strings.HasPrefix(line, `\#`) {
		line = line[1:]
	}
	if strings.HasSuffix(line, "/") {
		r.dirOnly = true
		line = strings.TrimRight(line, "/")
	}
	if line == "" {
		return rule{}, false
	}
	if !strings.Contains(line, "/") {
		r.basename = true
	} else {
		line = strings.TrimPrefix(line, "/")
	}
	r.pattern = line
	if r.basename {
		switch {
		case !hasGlobChar(line):
			r.kind, r.lit = kindExact, line
		case line[0] == '*' && !hasGlobChar(line[1:]):
			r.kind, r.lit = kindSuffix, line[1:]
		case line[len(line)-1] == '*' && !hasGlobChar(line[:len(line)-1]):
			r.kind, r.lit = kindPrefix, line[:len(line)-1]
		}
	}
	return r, true
}

func hasGlobChar(s string) bool { return strings.ContainsAny(s, "*?[\\") }

// match reports whether the rule matches an entry; rel is the entry's path
// relative to the directory of the rule's file.
func (r *rule) match(rel, name string, isDir bool) bool {
	if r.dirOnly && !isDir {
		return false
	}
	if !r.basename {
		return wildmatch(r.pattern, rel)
	}
	switch r.kind {
	case kindExact:
		return name == r.lit
	case kindSuffix:
		return strings.HasSuffix(name, r.lit)
	case kindPrefix:
		return strings.HasPrefix(name, r.lit)
	}
	return wildmatch(r.pattern, name)
}

// ignore is one .gitignore file in the chain of files that apply to a
// directory; the deepest file comes first and parent is the next one up.
type ignore struct {
	parent *ignore
	rules  []rule
	// base is the directory of the file relative to the walk root ("" for
	// the root itself) when the file is inside the walked tree.
	base string
	// above is set for a file above the walk root: the path from its
	// directory down to the root, with a trailing '/'.
	above    string
	hasPaths bool // some rule is anchored (needs the relative path)
}

func newIgnore(parent *ignore, rules []rule, base, above string) *ignore {
	if len(rules) == 0 {
		return parent
	}
	ig := &ignore{parent: parent, rules: rules, base: base, above: above}
	for i := range rules {
		if !rules[i].basename {
			ig.hasPaths = true
		}
	}
	return ig
}

// ignored reports whether the entry at rel (relative to the walk root) is
// ignored. As in git, the deepest file that has a matching rule decides, and
// within a file the last matching rule wins; a directory that is ignored is
// not walked, so nothing under it can be re-included.
func (ig *ignore) ignored(rel, name string, isDir bool) bool {
	for n := ig; n != nil; n = n.parent {
		var p string
		if n.hasPaths {
			switch {
			case n.above != "":
				p = n.above + rel
			case n.base == "":
				p = rel
			default:
				p = rel[len(n.base)+1:]
			}
		}
		for i := len(n.rules) - 1; i >= 0; i-- {
			if n.rules[i].match(p, name, isDir) {
				return !n.rules[i].negate
			}
		}
	}
	return false
}

// readIgnoreFile parses the file at path; a missing or unreadable file has
// no rules. Files over 1 MiB are not ignore files anyone wrote by hand and
// are skipped.
func readIgnoreFile(path string) []rule {
	fi, err := os.Stat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > 1<<20 {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	return parseIgnore(data)
}

// ancestorIgnores returns the chain of ignore files that apply to root from
// above it: the .gitignore files of its parent directories up to and
// including the root of the enclosing git repository (the first directory
// with a .git entry), plus that repository's .git/info/exclude. Outside a git
// repository the parents' files do not apply.
func ancestorIgnores(root string) *ignore {
	if isGitRoot(root) {
		return nil
	}
	type found struct {
		dir   string
		rules []rule
	}
	var files []found
	repo := ""
	for dir := filepath.Dir(root); ; dir = filepath.Dir(dir) {
		if rules := readIgnoreFile(filepath.Join(dir, ".gitignore")); len(rules) > 0 {
			files = append(files, found{dir, rules})
		}
		if isGitRoot(dir) {
			repo = dir
			break
		}
		if parent := filepath.Dir(dir); parent == dir {
			break
		}
	}
	if repo == "" {
		return nil
	}
	var chain *ignore
	aboveOf := func(dir string) string {
		r, err := filepath.Rel(dir, root)
		if err != nil {
			return ""
		}
		return filepath.ToSlash(r) + "/"
	}
	// info/exclude ranks below every .gitignore of the repository.
	chain = newIgnore(chain, readIgnoreFile(filepath.Join(repo, ".git", "info", "exclude")), "", aboveOf(repo))
	for i := len(files) - 1; i >= 0; i-- {
		chain = newIgnore(chain, files[i].rules, "", aboveOf(files[i].dir))
	}
	return chain
}

func isGitRoot(dir string) bool {
	_, err := os.Lstat(filepath.Join(dir, ".git"))
	return err == nil
}
