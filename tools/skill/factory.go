package skill

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"

	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
)

// LoadRoot is the Root of skills loaded inside the sandbox.
const LoadRoot = "session"

// Params are the factory's parameters: {"dir": "/skills", "allow": [...]}.
type Params struct {
	// Dir is where the session's skills are mounted; default MountDir.
	Dir string `json:"dir,omitempty"`
	// Allow is the session's selection (path prefixes, as
	// SessionOptions.Skills), applied again to what is loaded: a mounted
	// folder may hold skills the selection leaves out. Absent (null):
	// every skill under Dir.
	Allow []string `json:"allow,omitempty"`
}

// Factory is the factory of the skill tools: it loads the skills under
// Params.Dir, as the session's sandbox sees them, and makes load_skill and
// one tool per executable skill, none named like builtinNames. Warnings
// (skills skipped by the loader, skills that are not tools) go to the
// default logger, the agent's stderr. Without skills it makes no tools.
func Factory(builtinNames []string) tools.Factory {
	names := slices.Clone(builtinNames)
	return func(env tools.Env, params json.RawMessage) ([]*tools.Tool, error) {
		p := Params{Dir: MountDir}
		if err := tools.DecodeParams(params, &p); err != nil {
			return nil, fmt.Errorf("skills params: %w", err)
		}
		if !filepath.IsAbs(p.Dir) {
			return nil, fmt.Errorf("skills params: dir %q is not an absolute path", p.Dir)
		}
		log := slog.Default().With("component", "skills")
		ss, skipped := skills.Load(p.Dir, LoadRoot)
		for _, sk := range skipped {
			log.Warn("skills: skipped", "path", sk.Path, "reason", sk.Reason)
		}
		if p.Allow != nil {
			ss = skills.Select(ss, p.Allow)
		}
		x, err := New(Options{
			Dir:          p.Dir,
			Skills:       ss,
			BuiltinNames: names,
			Workspace:    env.Workspace,
			StateDir:     env.StateDir,
			Logger:       log,
		})
		if err != nil {
			return nil, err
		}
		ts, warnings := x.Tools()
		for _, w := range warnings {
			log.Warn("skills: " + w)
		}
		if len(ts) == 0 {
			log.Warn("skills: no skills found", "dir", p.Dir)
			_ = x.Close() // nothing ran on it
			return nil, nil
		}
		return ts, nil
	}
}
