package skills

import (
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// pathRe is a skill path the sandbox can mount and a selection can name:
// slash-separated names of letters, digits, '.', '_' and '-', none starting
// with '.' or '-' (the same rule as sandbox.SessionOptions.Skills).
var pathRe = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._-]{0,127}(/[A-Za-z0-9_][A-Za-z0-9._-]{0,127})*$`)

// maxPathLen bounds a skill path.
const maxPathLen = 512

// scan finds the folders holding a SKILL.md under the root of fsys: at most
// MaxDepth deep, at most MaxDirs directories read, never into .git or
// node_modules, never through a symbolic link to a directory. It returns
// their slash paths in walk order, and what it could not read.
func scan(fsys fs.FS, root string) (dirs []string, skipped []Skipped) {
	count := 0
	stopped := false
	var visit func(dir string, depth int)
	visit = func(dir string, depth int) {
		if stopped {
			return
		}
		count++
		if count > MaxDirs {
			stopped = true
			skipped = append(skipped, Skipped{Path: dir, Root: root,
				Reason: fmt.Sprintf("scan stopped: more than %d directories under the root; skills from here on were not loaded", MaxDirs)})
			return
		}
		entries, err := fs.ReadDir(fsys, dir)
		if err != nil {
			skipped = append(skipped, Skipped{Path: dir, Root: root, Reason: fmt.Sprintf("cannot read the directory: %v", pathless(err))})
			return
		}
		for _, e := range entries {
			if e.Name() == SkillFile && !e.IsDir() {
				dirs = append(dirs, dir)
				break
			}
		}
		if depth >= MaxDepth {
			return
		}
		for _, e := range entries {
			if e.IsDir() && !skipDir(e.Name()) {
				visit(path.Join(dir, e.Name()), depth+1)
			}
		}
	}
	visit(".", 0)
	return dirs, skipped
}

// LoadFS loads every skill under the root of fsys, leniently: a skill that
// cannot be used is Skipped with its reason. Skill.Root is root, Dir is
// empty. The skills are sorted by Path.
func LoadFS(fsys fs.FS, root string) ([]*Skill, []Skipped) {
	dirs, skipped := scan(fsys, root)
	var out []*Skill
	for _, dir := range dirs {
		switch {
		case dir == ".":
			skipped = append(skipped, Skipped{Path: ".", Root: root,
				Reason: "a SKILL.md at the top of a root: a root holds skill folders (name the folder above as the root)"})
			continue
		case !pathRe.MatchString(dir) || len(dir) > maxPathLen:
			skipped = append(skipped, Skipped{Path: dir, Root: root,
				Reason: "the folder's path cannot name a skill: use letters, digits, '.', '_' and '-' in folder names, not starting with '.' or '-'"})
			continue
		}
		s, err := Parse(fsys, dir)
		if err != nil {
			skipped = append(skipped, Skipped{Path: dir, Root: root, Reason: err.Error()})
			continue
		}
		s.Root = root
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	sort.SliceStable(skipped, func(i, j int) bool { return skipped[i].Path < skipped[j].Path })
	return out, skipped
}

// Load loads every skill under the directory dir, as LoadFS, through an
// os.Root: no symbolic link leads out of dir. Skill.Root is root and
// Skill.Dir the folder on this filesystem.
func Load(dir, root string) ([]*Skill, []Skipped) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, []Skipped{{Root: root, Reason: fmt.Sprintf("cannot open the root: %v", pathless(err))}}
	}
	defer r.Close()
	skills, skipped := LoadFS(rootFS{r}, root)
	for _, s := range skills {
		s.Dir = filepath.Join(dir, filepath.FromSlash(s.Path))
	}
	return skills, skipped
}

// SelectAll selects every top-level skill (OpenSage's enabled_skills "all").
const SelectAll = "all"

// Select returns the skills allow selects, as OpenSage's enabled_skills:
// none for an empty allow; SelectAll selects the top-level skills (a Path
// without '/'); any other entry p selects the skill at p and every skill
// under it. Sorted by Path, each Path once (the first in all).
func Select(all []*Skill, allow []string) []*Skill {
	if len(allow) == 0 {
		return nil
	}
	var out []*Skill
	seen := map[string]bool{}
	for _, s := range all {
		if seen[s.Path] || !selected(s.Path, allow) {
			continue
		}
		seen[s.Path] = true
		out = append(out, s)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

func selected(p string, allow []string) bool {
	for _, a := range allow {
		a = strings.Trim(a, "/")
		switch {
		case a == "":
		case a == SelectAll:
			if !strings.Contains(p, "/") {
				return true
			}
		case p == a, strings.HasPrefix(p, a+"/"):
			return true
		}
	}
	return false
}
