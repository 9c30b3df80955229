package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/server/daemon"
	"github.com/sandboxd/sandboxd/skills"
)

// builtinSkills is the manager's skill source of the built-in skills,
// extracted under a folder of the test.
func builtinSkills(t *testing.T, operatorRoots ...string) daemon.Skills {
	t.Helper()
	dir, err := skills.ExtractBuiltin(t.TempDir())
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = filepath.WalkDir(dir, func(p string, _ os.DirEntry, _ error) error { return os.Chmod(p, 0o755) })
	})
	roots := make([]skills.Root, 0, len(operatorRoots)+1)
	for _, r := range operatorRoots {
		roots = append(roots, skills.Root{Dir: r})
	}
	return daemon.Skills{Lib: skills.NewLibrary(append(roots, skills.BuiltinRoot(dir))...)}
}

// Copy mode (a remote engine): the selected skills reach the sandbox as
// read-only volumes filled over the API, not binds of this host's paths.
func TestSkillsCopyMode(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, func(o *sdocker.Options) { o.CopyAgent = true })
	t.Cleanup(func() { assert.NoError(t, rt.Prune(context.Background())) })
	m := newManager(t, rt, sandbox.ManagerOptions{Skills: builtinSkills(t)})
	for range 2 { // the second session reuses the filled volume
		s, err := m.Create(ctxT(t), sandbox.SessionOptions{Skills: []string{"repo-summary"}})
		require.NoError(t, err)
		out := sh(t, s, "head -3 /skills/repo-summary/SKILL.md; ls -l /skills/repo-summary/scripts; touch /skills/repo-summary/x 2>&1")
		assert.Contains(t, out, "name: repo-summary")
		assert.Contains(t, out, "r-xr-xr-x", "scripts keep their execute bits")
		assert.Contains(t, out, "Read-only file system")
		found := false
		for _, mt := range containerOf(t, s.ID()).Mounts {
			if mt.Destination == "/skills/repo-summary" {
				found = true
				assert.Equal(t, "volume", string(mt.Type))
				assert.False(t, mt.RW)
			}
		}
		assert.True(t, found, "a mount at /skills/repo-summary")
		require.NoError(t, s.Close(ctxT(t)))
	}
}

// The built-in repo-summary skill, as a tool of a session on the default
// image (git in it), reports a repository's state as JSON.
func TestBuiltinSkillRepoSummary(t *testing.T) {
	t.Parallel()
	needImage(t, defaultImage)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: defaultImage}, Skills: builtinSkills(t)})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Skills: []string{"all"}})
	require.NoError(t, err)
	defer s.Close(context.Background())
	sh(t, s, `cd /workspace && git init -q repo && cd repo && git config user.email a@b && git config user.name a && `+
		`printf 'package main\n' > main.go && printf 'x\n' > notes.md && git add . && git commit -qm first && printf 'y\n' >> notes.md`)
	obs, err := s.Call(ctxT(t), "repo-summary", json.RawMessage(`{"path":"/workspace/repo"}`), nil)
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())
	b, err := json.Marshal(obs.Structured)
	require.NoError(t, err)
	assert.Contains(t, string(b), "first", "the last commit's subject")
	assert.Contains(t, string(b), "notes.md", "the changed file")
	defs, err := s.Tools(ctxT(t))
	require.NoError(t, err)
	var names []string
	for _, d := range defs {
		names = append(names, d.Name)
	}
	assert.Subset(t, names, []string{"terminal", "load_skill", "repo-summary", "run-tests"})
}
