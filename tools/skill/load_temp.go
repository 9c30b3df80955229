package skill

// TEMPORARY: a minimal stand-in for skills.Load (the loader is written on
// another branch), so that this package compiles and the factory can be
// tried before the merge. It reads name, description, returns_json and
// should_run_in_sandbox, the body, the resources and the installer, but no
// ## Parameters (so no skill is executable through it). At the merge, the
// factory calls skills.Load and skills.Select and this file is deleted.

import (
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/sandboxd/sandboxd/skills"
)

func load(dir, root string) ([]*skills.Skill, []skills.Skipped) {
	var out []*skills.Skill
	var skipped []skills.Skipped
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "SKILL.md" {
			return nil
		}
		folder := filepath.Dir(p)
		rel, _ := filepath.Rel(dir, folder)
		rel = filepath.ToSlash(rel)
		data, err := os.ReadFile(p)
		if err != nil {
			skipped = append(skipped, skills.Skipped{Path: rel, Root: root, Reason: err.Error()})
			return nil
		}
		body := skillBody(string(data))
		var fm struct {
			Name        string `yaml:"name"`
			Description string `yaml:"description"`
			ReturnsJSON bool   `yaml:"returns_json"`
			RunIn       string `yaml:"should_run_in_sandbox"`
		}
		if head := strings.TrimSuffix(string(data), body); yaml.Unmarshal([]byte(strings.Trim(head, "-\n")), &fm) != nil || fm.Description == "" {
			skipped = append(skipped, skills.Skipped{Path: rel, Root: root, Reason: "no front matter with a description"})
			return nil
		}
		s := &skills.Skill{Path: rel, Root: root, Dir: folder, Name: fm.Name, Description: fm.Description, Body: body, ReturnsJSON: fm.ReturnsJSON, RunIn: fm.RunIn}
		_ = filepath.WalkDir(folder, func(q string, e fs.DirEntry, err error) error {
			if err == nil && !e.IsDir() && q != p {
				r, _ := filepath.Rel(folder, q)
				s.Resources = append(s.Resources, filepath.ToSlash(r))
			}
			return nil
		})
		sort.Strings(s.Resources)
		for _, inst := range []string{path.Join("deps", fm.RunIn, "install.sh"), "deps/install.sh"} {
			if _, err := os.Stat(filepath.Join(folder, inst)); err == nil && s.Installer == "" {
				s.Installer = inst
			}
		}
		out = append(out, s)
		return nil
	})
	return out, skipped
}

// selectSkills stands in for skills.Select: OpenSage's enabled_skills
// (nothing for no prefixes, "all" for the top-level skills, else a path
// equal to a prefix or under it).
func selectSkills(all []*skills.Skill, allow []string) []*skills.Skill {
	var out []*skills.Skill
	for _, s := range all {
		for _, a := range allow {
			if (a == "all" && !strings.Contains(s.Path, "/")) || s.Path == a || strings.HasPrefix(s.Path, a+"/") {
				out = append(out, s)
				break
			}
		}
	}
	return out
}
