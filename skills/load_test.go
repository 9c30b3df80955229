package skills

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// writeSkill writes a minimal valid SKILL.md in root/rel.
func writeSkill(t testing.TB, root, rel string) {
	t.Helper()
	dir := filepath.Join(root, filepath.FromSlash(rel))
	require.NoError(t, os.MkdirAll(dir, 0o755))
	name := filepath.Base(dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, SkillFile), []byte("---\nname: "+name+"\ndescription: The skill "+rel+".\n---\nbody\n"), 0o644))
}

func paths(skills []*Skill) []string {
	out := make([]string, 0, len(skills))
	for _, s := range skills {
		out = append(out, s.Path)
	}
	return out
}

// TestLoad300Skills: 300 generated skills (in three categories) all load,
// sorted, and the selections see them.
func TestLoad300Skills(t *testing.T) {
	root := t.TempDir()
	var want []string
	for i := range 300 {
		rel := fmt.Sprintf("cat%d/skill-%03d", i%3, i)
		writeSkill(t, root, rel)
		want = append(want, rel)
	}
	skills, skipped := Load(root, root)
	assert.Empty(t, skipped)
	require.Len(t, skills, 300)
	got := paths(skills)
	assert.IsNonDecreasing(t, got)
	assert.ElementsMatch(t, want, got)
	assert.Empty(t, Select(skills, []string{SelectAll}), "no skill is top-level")
	assert.Len(t, Select(skills, []string{"cat1"}), 100)
	assert.Equal(t, []string{"cat2/skill-005"}, paths(Select(skills, []string{"cat2/skill-005"})))
}

// TestLoadBounds: depth, directories, resources.
func TestLoadBounds(t *testing.T) {
	t.Run("depth", func(t *testing.T) {
		root := t.TempDir()
		writeSkill(t, root, "a/b/c/d/e/f")   // depth 6: found
		writeSkill(t, root, "a/b/c/d/e/f/g") // depth 7: not looked for
		skills, skipped := Load(root, "r")
		assert.Empty(t, skipped)
		assert.Equal(t, []string{"a/b/c/d/e/f"}, paths(skills))
	})
	t.Run("directories", func(t *testing.T) {
		root := t.TempDir()
		for i := range MaxDirs + 10 {
			require.NoError(t, os.Mkdir(filepath.Join(root, fmt.Sprintf("d%04d", i)), 0o755))
		}
		writeSkill(t, root, "d0001/early")
		writeSkill(t, root, "zz-late")
		skills, skipped := Load(root, "r")
		assert.Equal(t, []string{"d0001/early"}, paths(skills))
		require.Len(t, skipped, 1)
		assert.Contains(t, skipped[0].Reason, "scan stopped: more than 2000 directories under the root")
	})
	t.Run("resources", func(t *testing.T) {
		root := t.TempDir()
		writeSkill(t, root, "many")
		for i := range MaxResources + 50 {
			sub := filepath.Join(root, "many", "references", fmt.Sprintf("g%d", i%7))
			require.NoError(t, os.MkdirAll(sub, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(sub, fmt.Sprintf("f%03d.md", i)), nil, 0o644))
		}
		skills, skipped := Load(root, "r")
		assert.Empty(t, skipped)
		require.Len(t, skills, 1)
		assert.Len(t, skills[0].Resources, MaxResources)
		assert.IsIncreasing(t, skills[0].Resources)
		assert.Equal(t, []string{"SKILL.md: resources: 250 files; only the first 200 are listed"}, skills[0].Warnings)
	})
	t.Run("skipped folders", func(t *testing.T) {
		root := t.TempDir()
		writeSkill(t, root, "ok")
		writeSkill(t, root, "ok/node_modules/dep")
		writeSkill(t, root, ".git/hooks")
		writeSkill(t, root, "node_modules/x")
		require.NoError(t, os.WriteFile(filepath.Join(root, "ok", "node_modules", "big.js"), nil, 0o644))
		skills, skipped := Load(root, "r")
		assert.Empty(t, skipped)
		assert.Equal(t, []string{"ok"}, paths(skills))
		assert.Empty(t, skills[0].Resources, "node_modules is not listed")
	})
	t.Run("a SKILL.md at the top of the root", func(t *testing.T) {
		root := t.TempDir()
		writeSkill(t, root, ".")
		skills, skipped := Load(root, "r")
		assert.Empty(t, skills)
		require.Len(t, skipped, 1)
		assert.Contains(t, skipped[0].Reason, "a SKILL.md at the top of a root")
	})
	t.Run("missing root", func(t *testing.T) {
		skills, skipped := Load(filepath.Join(t.TempDir(), "nope"), "r")
		assert.Empty(t, skills)
		require.Len(t, skipped, 1)
		assert.Equal(t, "r", skipped[0].Root)
		assert.Contains(t, skipped[0].Reason, "cannot open the root: no such file or directory")
	})
}

// TestLoadSymlinks: links never lead out of the root, and links to folders
// are not followed.
func TestLoadSymlinks(t *testing.T) {
	outside := t.TempDir()
	writeSkill(t, outside, "secret")
	root := t.TempDir()
	writeSkill(t, root, "inside")
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "linked-dir")))
	require.NoError(t, os.Mkdir(filepath.Join(root, "linked-file"), 0o755))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret", SkillFile), filepath.Join(root, "linked-file", SkillFile)))
	require.NoError(t, os.Symlink("../"+SkillFile, filepath.Join(root, "inside", "escape.md")))
	skills, skipped := Load(root, "r")
	assert.Equal(t, []string{"inside"}, paths(skills))
	assert.Empty(t, skills[0].Resources, "a symbolic link is not a resource")
	require.Len(t, skipped, 1)
	assert.Equal(t, "linked-file", skipped[0].Path)
	assert.Contains(t, skipped[0].Reason, "cannot read: path escapes from parent")
}

func TestSelect(t *testing.T) {
	var all []*Skill
	for _, p := range []string{"fuzz", "fuzz/run-campaign", "fuzz/triage", "fuzzy", "git/log", "run-tests"} {
		all = append(all, &Skill{Path: p})
	}
	all = append(all, &Skill{Path: "fuzz", Root: "second"}) // a duplicate path: the first wins
	cases := []struct {
		allow []string
		want  []string
	}{
		{nil, nil},
		{[]string{}, nil},
		{[]string{""}, nil},
		{[]string{SelectAll}, []string{"fuzz", "fuzzy", "run-tests"}},
		{[]string{"fuzz"}, []string{"fuzz", "fuzz/run-campaign", "fuzz/triage"}},
		{[]string{"fuzz/"}, []string{"fuzz", "fuzz/run-campaign", "fuzz/triage"}},
		{[]string{"fuzz/run-campaign"}, []string{"fuzz/run-campaign"}},
		{[]string{"git"}, []string{"git/log"}},
		{[]string{"nothing"}, nil},
		{[]string{"run-tests", "fuzz/triage", "run-tests"}, []string{"fuzz/triage", "run-tests"}},
		{[]string{SelectAll, "git"}, []string{"fuzz", "fuzzy", "git/log", "run-tests"}},
	}
	for _, c := range cases {
		got := Select(all, c.allow)
		assert.Equal(t, c.want, nilIfEmpty(paths(got)), "%q", c.allow)
		for _, s := range got {
			assert.Empty(t, s.Root, "the first of a duplicate path")
		}
	}
}

func nilIfEmpty(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}

// TestLibraryPrecedence: operator roots before the built-in root, the first
// operator root before the next; shadowed skills say by what.
func TestLibraryPrecedence(t *testing.T) {
	first, second := t.TempDir(), t.TempDir()
	writeSkill(t, first, "run-tests") // shadows the built-in
	writeSkill(t, first, "mine")
	writeSkill(t, second, "mine")
	writeSkill(t, second, "theirs")
	// The built-in root given first still comes last.
	lib := NewLibrary(BuiltinRoot(""), Root{Dir: first}, Root{Dir: second, Name: "second"})
	got := map[string]string{}
	for _, s := range lib.Skills() {
		got[s.Path] = s.Root
	}
	assert.Equal(t, map[string]string{"run-tests": first, "mine": first, "theirs": "second", "repo-summary": RootBuiltin}, got)
	assert.ElementsMatch(t, []Skipped{
		{Path: "mine", Root: "second", Reason: "shadowed by " + first},
		{Path: "run-tests", Root: RootBuiltin, Reason: "shadowed by " + first},
	}, lib.Skipped())
	s, ok := lib.Get("run-tests")
	require.True(t, ok)
	assert.Equal(t, filepath.Join(first, "run-tests"), s.Dir)
	assert.Equal(t, []string{"mine", "repo-summary", "run-tests", "theirs"}, paths(lib.Select([]string{SelectAll})))
	assert.Empty(t, lib.Select(nil))
}

// TestLibraryRoots: OperatorRoots, a root from an fs.FS with its extracted
// directory, relative directories named by their absolute path.
func TestLibraryRoots(t *testing.T) {
	roots := OperatorRoots("a", "b")
	require.Len(t, roots, 3)
	assert.Equal(t, Root{Dir: "a"}, roots[0])
	assert.Equal(t, RootBuiltin, roots[2].Name)

	fsys := fstest.MapFS{"x/SKILL.md": {Data: []byte("---\nname: x\ndescription: d\n---\n")}}
	lib := NewLibrary(Root{Name: "mem", FS: fsys, Dir: "/extracted/abc"})
	s, ok := lib.Get("x")
	require.True(t, ok)
	assert.Equal(t, "mem", s.Root)
	assert.Equal(t, "/extracted/abc/x", s.Dir)

	dir := t.TempDir()
	writeSkill(t, dir, "rel")
	t.Chdir(dir)
	lib = NewLibrary(Root{Dir: "."})
	s, ok = lib.Get("rel")
	require.True(t, ok)
	assert.True(t, filepath.IsAbs(s.Root), s.Root)
	assert.Equal(t, "rel", s.Dir)
}

// TestLibraryConcurrentReads: the race detector checks that reads share
// nothing mutable.
func TestLibraryConcurrentReads(t *testing.T) {
	lib := NewLibrary(BuiltinRoot(""))
	done := make(chan struct{})
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 100 {
				_ = lib.Select([]string{SelectAll})
				_, _ = lib.Get("run-tests")
				_ = lib.Skills()
				_ = lib.Skipped()
			}
		}()
	}
	for range 8 {
		<-done
	}
	assert.Len(t, lib.Skills(), 2)
}

func TestMarkdownSections(t *testing.T) {
	body := strings.Join([]string{
		"# Title",              // 10
		"## Usage",             // 11
		"```bash",              // 12
		"## not a heading",     // 13
		"````",                 // 14: longer, still closes? no: a closing fence may be longer
		"text",                 // 15
		"## Timeout ##",        // 16
		"    ## indented code", // 17
		"#hashtag",             // 18
		"~~~",                  // 19
		"## in tilde code",     // 20
		"```",                  // 21: does not close a ~~~ block
		"~~~",                  // 22
		"### sub",              // 23
		"# Other",              // 24
		"after",                // 25
	}, "\n")
	lines := bodyLines(body, 10)
	secs := sections(lines, 2)
	require.Len(t, secs, 2)
	assert.Equal(t, "Usage", secs[0].title)
	assert.Equal(t, 11, secs[0].n)
	assert.Equal(t, "Timeout", secs[1].title)
	assert.Equal(t, 16, secs[1].n)
	assert.Len(t, secs[1].lines, 7, "up to the level-1 heading")
	code, n, ok := firstCodeBlock(secs[0].lines)
	require.True(t, ok)
	assert.Equal(t, 12, n)
	assert.Equal(t, "## not a heading\n", code)
	subs := sections(secs[1].lines, 3)
	require.Len(t, subs, 1)
	assert.Equal(t, "sub", subs[0].title)
	_, count := findSection(secs, "timeout")
	assert.Equal(t, 1, count)
	text, tn := firstText(secs[1].lines)
	assert.Equal(t, "## indented code", text)
	assert.Equal(t, 17, tn)
}

// BenchmarkLoad300: a root of 300 skills (each a SKILL.md and one
// script), loaded as the daemon loads a root at start.
func BenchmarkLoad300(b *testing.B) {
	root := b.TempDir()
	for i := range 300 {
		rel := fmt.Sprintf("cat%d/skill-%03d", i%3, i)
		writeSkill(b, root, rel)
		require.NoError(b, os.MkdirAll(filepath.Join(root, rel, "scripts"), 0o755))
		require.NoError(b, os.WriteFile(filepath.Join(root, rel, "scripts", "run.sh"), []byte("#!/bin/sh\n"), 0o755))
	}
	b.ResetTimer()
	for b.Loop() {
		skills, _ := Load(root, root)
		if len(skills) != 300 {
			b.Fatal(len(skills))
		}
	}
}

// BenchmarkBuiltin: the embedded skills, parsed (NewLibrary's cost for
// them).
func BenchmarkBuiltin(b *testing.B) {
	for b.Loop() {
		skills, _ := LoadFS(Builtin(), RootBuiltin)
		if len(skills) != 2 {
			b.Fatal(len(skills))
		}
	}
}

// BenchmarkExtractBuiltinPresent: ExtractBuiltin when the copy is there
// (every start after the first).
func BenchmarkExtractBuiltinPresent(b *testing.B) {
	base := b.TempDir()
	b.Cleanup(func() { _ = removeTree(base) })
	if _, err := ExtractBuiltin(base); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := ExtractBuiltin(base); err != nil {
			b.Fatal(err)
		}
	}
}
