package walk

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// DefaultSearchTimeout caps one grep or glob search (OpenHands gives
// ripgrep 30 s). When it passes, what was found so far is returned, marked
// incomplete.
const DefaultSearchTimeout = 30 * time.Second

// SearchOptions configure the grep and glob executors.
type SearchOptions struct {
	// Workspace is the directory searched when the action has no path, and
	// the base of relative paths. Empty means the process's working
	// directory.
	Workspace string
	// Workers is the number of directories read (glob) or files searched
	// (grep) at once; 0 means one per CPU.
	Workers int
	// Timeout caps one search; 0 means DefaultSearchTimeout.
	Timeout time.Duration
}

// Normalize validates o and fills its defaults; tool names the errors.
func (o SearchOptions) Normalize(tool string) (SearchOptions, error) {
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
		o.Timeout = DefaultSearchTimeout
	}
	return o, nil
}

// SearchParams are the factory parameters of the "grep" and "glob" specs.
type SearchParams struct {
	Workers        int     `json:"workers,omitempty"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// SearchOptionsFromParams turns a spec's params into options searching
// env.Workspace by default.
func SearchOptionsFromParams(tool string, env tools.Env, params json.RawMessage) (SearchOptions, error) {
	var p SearchParams
	if err := tools.DecodeParams(params, &p); err != nil {
		return SearchOptions{}, fmt.Errorf("%s: params: %w", tool, err)
	}
	return SearchOptions{
		Workspace: env.Workspace,
		Workers:   p.Workers,
		Timeout:   time.Duration(p.TimeoutSeconds * float64(time.Second)),
	}, nil
}
