// Package builtin assembles the tools every sandbox has: the terminal, the
// file editor, grep and glob, under their OpenHands-compatible names; its
// registry also holds the factory of the skill tools ("skills"), which only
// sessions with skills ask for.
package builtin

import (
	"fmt"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/bash"
	"github.com/sandboxd/sandboxd/tools/fileeditor"
	"github.com/sandboxd/sandboxd/tools/glob"
	"github.com/sandboxd/sandboxd/tools/grep"
	"github.com/sandboxd/sandboxd/tools/skill"
)

// factories are the built-in factories, in the order DefaultSpecs lists
// them (which is the order the model sees the tools in).
var factories = []struct {
	name    string
	factory tools.Factory
}{
	{bash.Name, bash.Factory},
	{fileeditor.Name, fileeditor.Factory},
	{grep.Name, grep.Factory},
	{glob.Name, glob.Factory},
}

// ToolNames are the names of the built-in tools, in DefaultSpecs' order:
// the names skill tools may not take.
func ToolNames() []string {
	names := make([]string, len(factories))
	for i, f := range factories {
		names[i] = f.name
	}
	return names
}

// Registry returns a new registry holding the built-in factories and the
// skills factory (skill.FactoryName, not in DefaultSpecs). Callers may
// register more (sidecar tools) on it.
func Registry() *tools.Registry {
	r := &tools.Registry{}
	for _, f := range factories {
		if err := r.Register(f.name, f.factory); err != nil {
			panic(fmt.Sprintf("builtin: %v", err)) // a duplicate name is a programming error
		}
	}
	if err := r.Register(skill.FactoryName, skill.Factory(ToolNames())); err != nil {
		panic(fmt.Sprintf("builtin: %v", err))
	}
	return r
}

// DefaultSpecs asks for every built-in tool with its default parameters.
func DefaultSpecs() []tools.Spec {
	specs := make([]tools.Spec, len(factories))
	for i, f := range factories {
		specs[i] = tools.Spec{Name: f.name}
	}
	return specs
}

// Definitions returns the definitions of the built-in tools with their
// default parameters, as a session whose workspace is workspace would list
// them, without making any executor: no shell is started and workspace need
// not exist on this machine (it usually names a path inside a sandbox).
func Definitions(workspace string) []tools.Definition {
	return []tools.Definition{
		bash.NewDefinition(bash.Options{Dir: workspace}),
		fileeditor.Definition(workspace, 0),
		grep.Definition(workspace),
		glob.Definition(workspace),
	}
}
