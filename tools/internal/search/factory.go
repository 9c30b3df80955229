package search

import (
	"encoding/json"

	"github.com/sandboxd/sandboxd/tools"
)

// Factory makes a search tool for a session: the executor newExec makes of
// the spec's params (searching env.Workspace by default), described by
// define for the workspace it searches. tool names the errors.
func Factory[A any, E tools.Executor[A]](tool string, env tools.Env, params json.RawMessage,
	newExec func(Options) (E, error), define func(workspace string) tools.Definition,
) ([]*tools.Tool, error) {
	opts, err := OptionsFromParams(tool, env, params)
	if err != nil {
		return nil, err
	}
	// newExec normalizes them again, to the same: the definition names the
	// workspace the executor searches.
	if opts, err = opts.Normalize(tool); err != nil {
		return nil, err
	}
	ex, err := newExec(opts)
	if err != nil {
		return nil, err
	}
	t, err := tools.New[A](define(opts.Workspace), ex)
	if err != nil {
		return nil, err
	}
	return []*tools.Tool{t}, nil
}
