package daemon

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
	"github.com/sandboxd/sandboxd/tools/skill"
)

// Skills serves the daemon's skill library to the manager (the folders a
// selection mounts) and to the API layers (the tools a selection adds,
// for lists made without a sandbox: MCP 2026-07-28, profiles).
type Skills struct {
	Lib *skills.Library
	Log *slog.Logger
}

var _ sandbox.SkillSource = Skills{}

// Mounts returns the folders of the skills allow selects. An entry that
// selects nothing is an error naming it and what the server has.
func (s Skills) Mounts(allow []string) ([]sandbox.SkillMount, error) {
	var out []sandbox.SkillMount
	var missing []string
	for _, a := range allow {
		sel := s.Lib.Select([]string{a})
		if len(sel) == 0 {
			missing = append(missing, fmt.Sprintf("%q", a))
			continue
		}
		for _, sk := range sel {
			if sk.Dir == "" {
				return nil, fmt.Errorf("skill %s (%s) has no folder on this host to mount", sk.Path, sk.Root)
			}
			out = append(out, sandbox.SkillMount{Path: sk.Path, Source: sk.Dir})
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%s select%s no skill; this server has: %s", strings.Join(missing, ", "),
			map[bool]string{true: "s", false: ""}[len(missing) == 1], s.catalog())
	}
	return out, nil
}

// catalog names the server's skills for an error message (at most 20).
func (s Skills) catalog() string {
	all := s.Lib.Skills()
	if len(all) == 0 {
		return "none"
	}
	names := make([]string, 0, min(len(all), 20))
	for i, sk := range all {
		if i == 20 {
			names = append(names, fmt.Sprintf("and %d more (sandboxd skills list)", len(all)-20))
			break
		}
		names = append(names, sk.Path)
	}
	return strings.Join(names, ", ")
}

// Definitions are the tools a session with the selection allow serves
// besides the built-in ones: load_skill and one per executable skill, as
// the agent makes them from the same skills.
func (s Skills) Definitions(allow []string) []tools.Definition {
	if len(allow) == 0 || s.Lib == nil {
		return nil
	}
	defs, warnings := skill.Definitions(s.Lib.Select(allow), builtin.ToolNames())
	if s.Log != nil {
		for _, w := range warnings {
			s.Log.Warn("skills", "selection", allow, "warning", w)
		}
	}
	return defs
}
