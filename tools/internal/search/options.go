// Package search is what the grep and glob tools share above the walk:
// their options and factory, the time budget of a search and the order of
// its results, and the wording of the errors a model reads.
package search

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// DefaultTimeout caps one grep or glob search (OpenHands gives ripgrep
// 30 s). When it passes, what was found so far is returned, marked
// incomplete.
const DefaultTimeout = 30 * time.Second

// Options configure the grep and glob executors.
type Options struct {
	// Workspace is the directory searched when the action has no path, and
	// the base of relative paths. Empty means the process's working
	// directory.
	Workspace string
	// Workers is the number of directories read (glob) or files searched
	// (grep) at once; 0 means one per CPU.
	Workers int
	// Timeout caps one search; 0 means DefaultTimeout.
	Timeout time.Duration
}

// Normalize validates o and fills its defaults; tool names the errors.
func (o Options) Normalize(tool string) (Options, error) {
	if o.Workspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			return o, fmt.Errorf("%s: no workspace given and no working directory: %w", tool, err)
		}
		o.Workspace = wd
	}
	if !filepath.IsAbs(o.Workspace) {
		return o, fmt.Errorf("%s: workspace %q is not an absolute path", tool, o.Workspace)
	}
	o.Workspace = filepath.Clean(o.Workspace)
	if o.Workers < 0 {
		return o, fmt.Errorf("%s: workers %d is negative", tool, o.Workers)
	}
	if o.Timeout < 0 {
		return o, fmt.Errorf("%s: timeout %v is negative", tool, o.Timeout)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	return o, nil
}

// Params are the factory parameters of the "grep" and "glob" specs.
type Params struct {
	Workers        int     `json:"workers,omitempty"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// OptionsFromParams turns a spec's params into options searching
// env.Workspace by default.
func OptionsFromParams(tool string, env tools.Env, params json.RawMessage) (Options, error) {
	var p Params
	if err := tools.DecodeParams(params, &p); err != nil {
		return Options{}, fmt.Errorf("%s: params: %w", tool, err)
	}
	return Options{
		Workspace: env.Workspace,
		Workers:   p.Workers,
		Timeout:   time.Duration(p.TimeoutSeconds * float64(time.Second)),
	}, nil
}
