// Package builtin assembles the tools every sandbox has: the terminal, the
// file editor, grep and glob, under their OpenHands-compatible names; its
// registry also holds the factory of the skill tools ("skills"), which only
// sessions with skills ask for, and OpenAI's shell and apply_patch (with
// local_shell), which a session's tool set selects (Sets, SetSpecs).
package builtin

import (
	"fmt"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/applypatch"
	"github.com/sandboxd/sandboxd/tools/bash"
	"github.com/sandboxd/sandboxd/tools/fileeditor"
	"github.com/sandboxd/sandboxd/tools/glob"
	"github.com/sandboxd/sandboxd/tools/grep"
	"github.com/sandboxd/sandboxd/tools/shell"
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

// openaiFactories are the factories of OpenAI's tool contracts: shell
// (whose params may add the terminal and local_shell on its shell) and
// apply_patch (whose params may add file_editor on its executor).
var openaiFactories = []struct {
	name    string
	factory tools.Factory
}{
	{shell.Name, shell.Factory},
	{applypatch.Name, applypatch.Factory},
}

// ToolNames are the names of the built-in tools, in DefaultSpecs' order,
// then those of OpenAI's contracts: the names skill tools may not take.
func ToolNames() []string {
	names := make([]string, 0, len(factories)+len(openaiFactories)+1)
	for _, f := range factories {
		names = append(names, f.name)
	}
	for _, f := range openaiFactories {
		names = append(names, f.name)
	}
	return append(names, shell.LocalName)
}

// Registry returns a new registry holding the built-in factories and the
// skills factory (skill.FactoryName, not in DefaultSpecs). Callers may
// register more (sidecar tools) on it.
func Registry() *tools.Registry {
	r := &tools.Registry{}
	for _, f := range append(factories[:len(factories):len(factories)], openaiFactories...) {
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

// Tool sets: which contract a session's built-in tools speak.
const (
	// SetOpenHands is terminal, file_editor, grep and glob (the default).
	SetOpenHands = "openhands"
	// SetOpenAI is shell, apply_patch, grep and glob.
	SetOpenAI = "openai"
	// SetBoth is both contracts on one shell and one editor: terminal,
	// shell, file_editor, apply_patch, grep and glob.
	SetBoth = "both"
)

// Sets are the tool sets, the default first.
func Sets() []string { return []string{SetOpenHands, SetOpenAI, SetBoth} }

// SetSpecs are the specs of a tool set; "" is SetOpenHands.
func SetSpecs(set string) ([]tools.Spec, error) {
	switch set {
	case "", SetOpenHands:
		return DefaultSpecs(), nil
	case SetOpenAI:
		return []tools.Spec{{Name: shell.Name}, {Name: applypatch.Name}, {Name: grep.Name}, {Name: glob.Name}}, nil
	case SetBoth:
		return []tools.Spec{
			{Name: shell.Name, Params: []byte(`{"terminal":true}`)},
			{Name: applypatch.Name, Params: []byte(`{"file_editor":true}`)},
			{Name: grep.Name}, {Name: glob.Name},
		}, nil
	}
	return nil, fmt.Errorf("tool set %q is not one of %v", set, Sets())
}

// SetDefinitions are the definitions of a tool set's tools with their
// default parameters, as Definitions gives them for the default set.
func SetDefinitions(set, workspace string) ([]tools.Definition, error) {
	switch set {
	case "", SetOpenHands:
		return Definitions(workspace), nil
	case SetOpenAI:
		return []tools.Definition{shell.Definition(workspace), applypatch.Definition(workspace),
			grep.Definition(workspace), glob.Definition(workspace)}, nil
	case SetBoth:
		return []tools.Definition{bash.NewDefinition(bash.Options{Dir: workspace}), shell.Definition(workspace),
			fileeditor.Definition(workspace, 0), applypatch.Definition(workspace),
			grep.Definition(workspace), glob.Definition(workspace)}, nil
	}
	return nil, fmt.Errorf("tool set %q is not one of %v", set, Sets())
}

// AllDefinitions are the definitions of every built-in tool, local_shell
// included, once each.
func AllDefinitions(workspace string) []tools.Definition {
	defs, _ := SetDefinitions(SetBoth, workspace)
	return append(defs, shell.LocalDefinition(workspace))
}
