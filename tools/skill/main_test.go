package skill

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fixture is a skills root in a temporary directory, a workspace, a state
// directory and a HOME, for executors built on them.
type fixture struct {
	t         *testing.T
	root      string
	workspace string
	state     string
	home      string
	environ   []string
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{t: t, root: t.TempDir(), workspace: t.TempDir(), state: t.TempDir(), home: t.TempDir()}
	f.environ = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + f.home, "LANG=C.UTF-8", "FIXTURE=" + f.state}
	return f
}

// skill writes a skill's folder: SKILL.md from its fields (front matter
// and body), and files (scripts are made executable).
func (f *fixture) skill(s *skills.Skill, files map[string]string) *skills.Skill {
	f.t.Helper()
	dir := filepath.Join(f.root, filepath.FromSlash(s.Path))
	require.NoError(f.t, os.MkdirAll(dir, 0o755))
	if s.Name == "" {
		s.Name = filepath.Base(dir)
	}
	if s.Description == "" {
		s.Description = "The skill " + s.Name + "."
	}
	if s.Body == "" {
		s.Body = "# " + s.Name + "\n\nHow to use " + s.Name + ".\n"
	}
	md := "---\nname: " + s.Name + "\ndescription: " + s.Description + "\n---\n" + s.Body
	require.NoError(f.t, os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(md), 0o644))
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(f.t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(f.t, os.WriteFile(p, []byte(content), 0o755))
		s.Resources = append(s.Resources, name)
	}
	sort.Strings(s.Resources)
	s.Dir = dir
	s.Root = LoadRoot
	return s
}

func (f *fixture) executor(ss ...*skills.Skill) *Executor {
	f.t.Helper()
	return f.executorWith(Options{Skills: ss})
}

func (f *fixture) executorWith(opts Options) *Executor {
	f.t.Helper()
	opts.Dir, opts.Workspace, opts.StateDir, opts.Environ = f.root, f.workspace, f.state, f.environ
	if opts.BuiltinNames == nil {
		opts.BuiltinNames = []string{"terminal", "file_editor", "grep", "glob"}
	}
	x, err := New(opts)
	require.NoError(f.t, err)
	f.t.Cleanup(func() { require.NoError(f.t, x.Close()) })
	return x
}

// toolset serves x's tools.
func toolset(t *testing.T, x *Executor) *tools.Toolset {
	t.Helper()
	ts, warnings := x.Tools()
	require.Empty(t, warnings)
	set, err := tools.NewToolset(ts...)
	require.NoError(t, err)
	return set
}

func call(t *testing.T, ts *tools.Toolset, name, args string) *tools.Observation {
	t.Helper()
	return callCtx(context.Background(), t, ts, name, args)
}

func callCtx(ctx context.Context, t *testing.T, ts *tools.Toolset, name, args string) *tools.Observation {
	t.Helper()
	obs, err := ts.Call(ctx, name, json.RawMessage(args))
	require.NoError(t, err)
	require.NotNil(t, obs)
	return obs
}

// exec is an executable skill's Exec with a bash entry.
func execOf(params ...skills.Param) *skills.Exec {
	return &skills.Exec{Entry: "scripts/run.sh", Params: params}
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return strings.Count(string(b), "\n")
}
