package skills

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Problem is one thing Validate found wrong.
type Problem struct {
	// File is the file it is in (a path as Validate was given it), or the
	// folder when it is about no file.
	File string `json:"file"`
	// Line is the line in File, 1-based; 0 when it is about no line.
	Line int `json:"line,omitempty"`
	// Field is the front matter field or section it is about, if any.
	Field string `json:"field,omitempty"`
	Msg   string `json:"msg"`
}

// String is "file:line: field: msg", leaving out what is empty.
func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.File)
	if p.Line > 0 {
		fmt.Fprintf(&b, ":%d", p.Line)
	}
	if p.Field != "" {
		b.WriteString(": ")
		b.WriteString(p.Field)
	}
	b.WriteString(": ")
	b.WriteString(p.Msg)
	return b.String()
}

// Validate checks dir strictly and returns every problem: dir is one
// skill's folder (it has a SKILL.md) or a root of skills, which is walked as
// Load walks it. Strict is the Agent Skills specification (name, description,
// compatibility, metadata as strings, no unknown top-level field) plus the
// fields sandboxd reads (OpenSage's should_run_in_sandbox and returns_json,
// Claude's disable-model-invocation) and sandboxd's own checks: the
// ## Parameters headings, ## Timeout and ## Priority parse, the entry script
// exists, the installers the body names exist. Everything the lenient loader
// forgives is a problem here.
func Validate(dir string) []Problem {
	_, problems := ValidateCount(dir)
	return problems
}

// ValidateCount is Validate that also says how many skills it checked.
func ValidateCount(dir string) (int, []Problem) {
	fi, err := os.Stat(dir)
	if err != nil {
		return 0, []Problem{{File: dir, Msg: fmt.Sprintf("cannot read: %v", pathless(err))}}
	}
	if !fi.IsDir() {
		return 0, []Problem{{File: dir, Msg: "not a directory: give a skill's folder (with a SKILL.md) or a root of skills"}}
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return 0, []Problem{{File: dir, Msg: fmt.Sprintf("cannot open: %v", pathless(err))}}
	}
	defer r.Close()
	fsys := rootFS{r}
	if _, err := os.Lstat(filepath.Join(dir, SkillFile)); err == nil {
		abs, err := filepath.Abs(dir)
		if err != nil {
			abs = dir
		}
		return 1, problemsOf(filepath.Join(dir, SkillFile), parseIssues(fsys, ".", filepath.Base(abs)))
	}
	dirs, skipped := scan(fsys, dir)
	var out []Problem
	for _, s := range skipped {
		out = append(out, Problem{File: filepath.Join(dir, filepath.FromSlash(s.Path)), Msg: s.Reason})
	}
	n := 0
	for _, d := range dirs {
		n++
		file := filepath.Join(dir, filepath.FromSlash(d), SkillFile)
		if !pathRe.MatchString(d) || len(d) > maxPathLen {
			out = append(out, Problem{File: file, Msg: "the folder's path cannot name a skill: use letters, digits, '.', '_' and '-' in folder names, not starting with '.' or '-'"})
		}
		out = append(out, problemsOf(file, parseIssues(fsys, d, filepath.Base(filepath.FromSlash(d))))...)
	}
	if n == 0 && len(out) == 0 {
		out = append(out, Problem{File: dir, Msg: "no SKILL.md in this folder or below it"})
	}
	return n, out
}

// parseIssues is every issue of the skill at dir: Validate reports them
// all, whatever their severity.
func parseIssues(fsys fs.FS, dir, folder string) []issue {
	_, issues := parse(fsys, dir, folder)
	return issues
}

// problemsOf turns one skill's issues into problems in file.
func problemsOf(file string, issues []issue) []Problem {
	out := make([]Problem, 0, len(issues))
	for _, is := range issues {
		out = append(out, Problem{File: file, Line: is.line, Field: is.field, Msg: is.msg})
	}
	return out
}
