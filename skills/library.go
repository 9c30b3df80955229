package skills

import (
	"io/fs"
	"path/filepath"
	"sort"
)

// Root is one place skills are loaded from.
type Root struct {
	// Name is Skill.Root of its skills: RootBuiltin for the embedded ones,
	// else the absolute path of Dir (the default).
	Name string
	// Dir is the root's directory on this filesystem. Without FS the skills
	// are read from it (Load); with FS, Dir is only where FS's tree is on
	// disk (the extracted built-ins), for Skill.Dir.
	Dir string
	// FS, when set, is read instead of Dir (LoadFS).
	FS fs.FS
}

// BuiltinRoot is the root of the skills embedded in the binary. dir is where
// ExtractBuiltin put them ("" when they were not extracted).
func BuiltinRoot(dir string) Root { return Root{Name: RootBuiltin, Dir: dir, FS: Builtin()} }

// OperatorRoots are the roots of the given directories followed by the
// built-in root: the roots of `--skills-dir D`... A root from a
// configuration file is one more directory in dirs.
func OperatorRoots(dirs ...string) []Root {
	roots := make([]Root, 0, len(dirs)+1)
	for _, d := range dirs {
		roots = append(roots, Root{Dir: d})
	}
	return append(roots, BuiltinRoot(""))
}

// Library is the skills of several roots, loaded once. Operator roots take
// precedence over the built-in root; among them, the first root given wins:
// a skill whose path an earlier root already has is Skipped as shadowed. It
// is immutable, so safe for concurrent use; the skills it returns are shared
// and must not be modified.
type Library struct {
	skills  []*Skill // sorted by Path, each Path once
	byPath  map[string]*Skill
	skipped []Skipped
}

// NewLibrary loads the roots: those named RootBuiltin after the others,
// each group in the order given.
func NewLibrary(roots ...Root) *Library {
	ordered := make([]Root, 0, len(roots))
	for _, builtin := range []bool{false, true} {
		for _, r := range roots {
			if (r.Name == RootBuiltin) == builtin {
				ordered = append(ordered, r)
			}
		}
	}
	l := &Library{byPath: map[string]*Skill{}}
	for _, r := range ordered {
		name := r.Name
		if name == "" {
			name = r.Dir
			if abs, err := filepath.Abs(r.Dir); err == nil {
				name = abs
			}
		}
		var skills []*Skill
		var skipped []Skipped
		if r.FS != nil {
			skills, skipped = LoadFS(r.FS, name)
			if r.Dir != "" {
				for _, s := range skills {
					s.Dir = filepath.Join(r.Dir, filepath.FromSlash(s.Path))
				}
			}
		} else {
			skills, skipped = Load(r.Dir, name)
		}
		l.skipped = append(l.skipped, skipped...)
		for _, s := range skills {
			if first, dup := l.byPath[s.Path]; dup {
				l.skipped = append(l.skipped, Skipped{Path: s.Path, Root: s.Root, Reason: "shadowed by " + first.Root})
				continue
			}
			l.byPath[s.Path] = s
			l.skills = append(l.skills, s)
		}
	}
	sort.Slice(l.skills, func(i, j int) bool { return l.skills[i].Path < l.skills[j].Path })
	return l
}

// Skills returns every loaded skill, sorted by Path.
func (l *Library) Skills() []*Skill { return append([]*Skill(nil), l.skills...) }

// Skipped returns what was not loaded and why, root by root.
func (l *Library) Skipped() []Skipped { return append([]Skipped(nil), l.skipped...) }

// Select returns the skills allow selects (see Select).
func (l *Library) Select(allow []string) []*Skill { return Select(l.skills, allow) }

// Get returns the skill at path.
func (l *Library) Get(path string) (*Skill, bool) {
	s, ok := l.byPath[path]
	return s, ok
}
