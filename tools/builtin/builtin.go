// Package builtin assembles the tools every sandbox has: the terminal, the
// file editor, grep and glob, under their OpenHands-compatible names.
package builtin

import (
	"fmt"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/bash"
	"github.com/sandboxd/sandboxd/tools/fileeditor"
	"github.com/sandboxd/sandboxd/tools/glob"
	"github.com/sandboxd/sandboxd/tools/grep"
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

// Registry returns a new registry holding the built-in factories. Callers
// may register more (skills, sidecar tools) on it.
func Registry() *tools.Registry {
	r := &tools.Registry{}
	for _, f := range factories {
		if err := r.Register(f.name, f.factory); err != nil {
			panic(fmt.Sprintf("builtin: %v", err)) // a duplicate name is a programming error
		}
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
