package skills

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
)

// FuzzParse: no SKILL.md makes the parser panic (the recover in parse would
// hide it, so it is checked here), and what loads is consistent.
func FuzzParse(f *testing.F) {
	for _, root := range []string{"testdata", "."} {
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == SkillFile {
				if data, err := os.ReadFile(p); err == nil {
					f.Add(data)
				}
			}
			return nil
		})
	}
	f.Add([]byte("---\nname: a\ndescription: b: c\n---\n## Parameters\n### x (optional, positional position 0+)\n**Type**: `list`\n"))
	f.Add([]byte("---\n---\n```\n## Timeout\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{
			"s/SKILL.md":          {Data: data},
			"s/scripts/run.sh":    {Data: []byte("#!/bin/sh\n")},
			"s/deps/install.sh":   {Data: []byte("#!/bin/sh\n")},
			"s/references/doc.md": {Data: []byte("doc")},
		}
		p := &parser{fsys: fsys, dir: "s", folder: "s"}
		p.run() // without parse's recover: a panic fails the fuzz run
		s, err := Parse(fsys, "s")
		if err != nil {
			if s != nil {
				t.Fatal("a skill and an error")
			}
			return
		}
		if strings.TrimSpace(s.Description) == "" || s.Name == "" {
			t.Fatalf("loaded without a name or description: %+v", s)
		}
		if len(s.Resources) > MaxResources || s.Timeout < 0 || s.Timeout > MaxTimeout {
			t.Fatalf("out of bounds: %+v", s)
		}
		if s.Exec == nil {
			return
		}
		seen := map[int]bool{}
		for _, prm := range s.Exec.Params {
			if prm.Kind == Positional {
				seen[prm.Position] = true
			}
			if !paramNameRe.MatchString(prm.Name) || (prm.Kind == Flag && prm.Type != "boolean") {
				t.Fatalf("bad parameter %+v", prm)
			}
		}
		for i := range len(seen) {
			if !seen[i] {
				t.Fatalf("positions with a gap: %+v", s.Exec.Params)
			}
		}
	})
}
