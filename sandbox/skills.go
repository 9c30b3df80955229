package sandbox

import (
	"encoding/json"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/sandboxd/sandboxd/tools"
)

// SkillsFactory is the agent's tool factory of a session's skills
// (load_skill and one tool per executable skill); it reads the skills the
// runtime mounted at SkillsDir.
const SkillsFactory = "skills"

// SkillMount is one folder of a session's selected skills as the runtime
// shows it: read-only at SkillsDir/Path.
type SkillMount struct {
	// Path is the folder relative to SkillsDir, slash-separated.
	Path string
	// Source is the folder on the daemon's host: <skill root>/<Path>. The
	// runtime opens it under the root at every create and refuses a
	// component of Path that is a link or not a folder (decision 0039).
	Source string
}

// SkillSource resolves a session's selection (SessionOptions.Skills) to the
// folders to mount. The daemon's implementation reads its skill roots; the
// manager keeps no skill state of its own.
type SkillSource interface {
	// Mounts returns the folders that show the selected skills, sorted by
	// Path, none nested in another. An entry of allow that selects no
	// skill is an error that names it.
	Mounts(allow []string) ([]SkillMount, error)
}

// skillMounts resolves o's selection, or says why it cannot be served.
func (m *Manager) skillMounts(o SessionOptions) ([]SkillMount, error) {
	if len(o.Skills) == 0 {
		return nil, nil
	}
	var p problems
	if m.opts.Skills == nil {
		p.add("skills", "this server has no skills (it was started without skill roots)")
		return nil, p.err()
	}
	mounts, err := m.opts.Skills.Mounts(o.Skills)
	if err != nil {
		p.add("skills", "%v", err)
		return nil, p.err()
	}
	for _, mt := range mounts {
		if !skillPathRe.MatchString(mt.Path) || path.Clean(mt.Path) != mt.Path || strings.HasPrefix(mt.Path, "..") {
			return nil, fmt.Errorf("skills: the skill source returned a bad path %q", mt.Path)
		}
	}
	return TopSkillMounts(mounts), nil
}

// TopSkillMounts sorts mounts by Path and drops every folder that lies
// inside another one (the outer mount shows it already).
func TopSkillMounts(mounts []SkillMount) []SkillMount {
	out := slices.Clone(mounts)
	slices.SortFunc(out, func(a, b SkillMount) int { return strings.Compare(a.Path, b.Path) })
	out = slices.CompactFunc(out, func(a, b SkillMount) bool { return a.Path == b.Path })
	top := out[:0]
	for _, mt := range out {
		if len(top) > 0 {
			last := top[len(top)-1].Path
			if strings.HasPrefix(mt.Path, last+"/") {
				continue
			}
		}
		top = append(top, mt)
	}
	return top
}

// skillsSpec is the agent's tool spec of o's skills: the mounted folder and
// the selection, which the agent applies again (a mounted folder may hold
// skills the selection leaves out, e.g. the nested ones under "all").
func skillsSpec(o SessionOptions) tools.Spec {
	params, _ := json.Marshal(struct {
		Dir   string   `json:"dir"`
		Allow []string `json:"allow"`
	}{SkillsDir, o.Skills})
	return tools.Spec{Name: SkillsFactory, Params: params}
}
