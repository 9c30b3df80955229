package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeSkills serves a fixed set of skill folders: a prefix selects the
// folders equal to it or under it; "all" the top-level ones.
type fakeSkills map[string]string // path → host folder

func (f fakeSkills) Mounts(allow []string) ([]SkillMount, error) {
	var out []SkillMount
	for _, a := range allow {
		n := 0
		for p, src := range f {
			if a == SkillsAll && !containsSlash(p) || p == a || len(p) > len(a) && p[:len(a)+1] == a+"/" {
				out = append(out, SkillMount{Path: p, Source: src})
				n++
			}
		}
		if n == 0 {
			return nil, errors.New(a + " selects no skill")
		}
	}
	return out, nil
}

func containsSlash(s string) bool {
	for _, c := range s {
		if c == '/' {
			return true
		}
	}
	return false
}

func TestTopSkillMounts(t *testing.T) {
	got := TopSkillMounts([]SkillMount{
		{Path: "fuzz/run", Source: "/r/fuzz/run"},
		{Path: "fuzz", Source: "/r/fuzz"},
		{Path: "fuzzy", Source: "/r/fuzzy"},
		{Path: "fuzz", Source: "/r/fuzz"},
		{Path: "a/b", Source: "/r/a/b"},
		{Path: "a/c", Source: "/r/a/c"},
	})
	assert.Equal(t, []SkillMount{
		{Path: "a/b", Source: "/r/a/b"},
		{Path: "a/c", Source: "/r/a/c"},
		{Path: "fuzz", Source: "/r/fuzz"},
		{Path: "fuzzy", Source: "/r/fuzzy"},
	}, got)
	assert.Empty(t, TopSkillMounts(nil))
}

func TestSkillSelectionValidated(t *testing.T) {
	for _, bad := range []string{"/etc", "../x", "a/../b", "a//b", "", "a/./b", "-x"} {
		_, err := SessionOptions{Skills: []string{bad}}.Resolve(SessionOptions{Image: "img"})
		require.ErrorIs(t, err, ErrInvalidOptions, "%q", bad)
		assert.Contains(t, err.Error(), "skills", "%q", bad)
	}
	_, err := SessionOptions{Skills: []string{"all", "fuzz/run-campaign", "a.b_c"}, SkillsInstall: SkillsInstallEager}.Resolve(SessionOptions{Image: "img"})
	require.NoError(t, err)
	_, err = SessionOptions{SkillsInstall: "sometimes"}.Resolve(SessionOptions{Image: "img"})
	require.ErrorContains(t, err, "skills_install")
}

// A selection is resolved before any pool or start: one that no skill
// matches, or any selection on a server without skills, is refused with
// the reason, and the runtime gets the mounts of one that works.
func TestCreateResolvesSkills(t *testing.T) {
	rt := newFakeRuntime(t)
	var specs []Spec
	rt.onStart = func(s Spec) { specs = append(specs, s) }

	none := newTestManager(t, rt, ManagerOptions{})
	_, err := none.Create(context.Background(), SessionOptions{Skills: []string{"fuzz"}})
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "this server has no skills")

	m := newTestManager(t, rt, ManagerOptions{Skills: fakeSkills{"fuzz": "/r/fuzz", "fuzz/run": "/r/fuzz/run", "git": "/r/git"}})
	_, err = m.Create(context.Background(), SessionOptions{Skills: []string{"nope"}})
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Contains(t, err.Error(), "nope selects no skill")
	require.Empty(t, specs, "nothing started for a refused selection")

	s, err := m.Create(context.Background(), SessionOptions{Skills: []string{"fuzz", "git"}})
	require.NoError(t, err)
	defer s.Close(context.Background())
	require.Len(t, specs, 1)
	assert.Equal(t, []SkillMount{{Path: "fuzz", Source: "/r/fuzz"}, {Path: "git", Source: "/r/git"}}, specs[0].Skills)
}

func TestAgentToolSpecsWithSkills(t *testing.T) {
	specs, err := AgentToolSpecs(SessionOptions{Skills: []string{"fuzz", "all"}})
	require.NoError(t, err)
	require.NotEmpty(t, specs)
	last := specs[len(specs)-1]
	assert.Equal(t, SkillsFactory, last.Name)
	var params struct {
		Dir   string   `json:"dir"`
		Allow []string `json:"allow"`
	}
	require.NoError(t, json.Unmarshal(last.Params, &params))
	assert.Equal(t, SkillsDir, params.Dir)
	assert.Equal(t, []string{"fuzz", "all"}, params.Allow)
	assert.Greater(t, len(specs), 1, "the built-in tools stay")

	plain, err := AgentToolSpecs(SessionOptions{})
	require.NoError(t, err)
	assert.Nil(t, plain, "no skills: the agent's defaults, no --tools")
}
