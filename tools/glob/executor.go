package glob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/internal/search"
	"github.com/sandboxd/sandboxd/tools/internal/walk"
)

// DefaultTimeout caps one search. When it passes, what was found so far is
// returned, marked incomplete.
const DefaultTimeout = search.DefaultTimeout

// Options configure an Executor.
type Options = search.Options

// Executor runs glob actions. It holds no state between calls, so calls
// may run concurrently (no chdir: patterns never depend on the cwd).
type Executor struct {
	opts Options
}

var _ tools.Executor[Action] = (*Executor)(nil)

// NewExecutor validates opts and returns an executor.
func NewExecutor(opts Options) (*Executor, error) {
	opts, err := opts.Normalize(Name)
	if err != nil {
		return nil, err
	}
	return &Executor{opts: opts}, nil
}

// Params are the factory parameters of the "glob" spec.
type Params = search.Params

// Factory makes the glob tool for a session: it searches env.Workspace by
// default.
func Factory(env tools.Env, params json.RawMessage) ([]*tools.Tool, error) {
	return search.Factory[Action](Name, env, params, NewExecutor, Definition)
}

// Close does nothing: the executor holds no resources.
func (e *Executor) Close() error { return nil }

// Call runs one search. Bad arguments give an error observation; a Go
// error means ctx ended.
func (e *Executor) Call(ctx context.Context, a Action) (*tools.Observation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out := &Output{Files: []string{}, Pattern: a.Pattern}
	q, err := e.plan(a)
	out.SearchPath = q.searchPath
	if err != nil {
		return search.ErrorResult(out, "%v", err), nil
	}
	if fi, err := os.Stat(q.searchPath); err != nil || !fi.IsDir() {
		return search.ErrorResult(out, "%s", badPath(a.Path, q.searchPath, err)), nil
	}

	found, incomplete, err := search.Run(ctx, e.opts.Timeout, func(ctx context.Context) ([]walk.Found, error) {
		return e.find(ctx, q)
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		return search.Failed(out, q.searchPath, err), nil
	}
	out.Incomplete, out.Count = incomplete, len(found)
	out.Files, out.Truncated = search.Paths(found, Limit)
	return tools.TextResult(format(out, e.opts.Timeout), out), nil
}

// query is a planned search: the directory the model sees as searched, the
// directory actually walked (narrowed by the pattern's literal leading
// directories), and the pattern relative to the walked one.
type query struct {
	searchPath string
	walkRoot   string
	pattern    *walk.Pattern
}

func (e *Executor) plan(a Action) (query, error) {
	pattern := a.Pattern
	if strings.TrimSpace(pattern) == "" {
		// Upstream lists every file; an empty pattern is far more often a
		// mistake than a wish for the whole tree, which '**/*' says.
		return query{searchPath: walk.Resolve(e.opts.Workspace, a.Path)}, fmt.Errorf("Invalid glob pattern %q: the pattern is empty; to list every file, use '**/*'", pattern) //nolint:staticcheck // the model reads this text; OpenHands' glob errors start with "Invalid"
	}
	if pattern == "~" || strings.HasPrefix(pattern, "~/") {
		pattern = walk.Resolve(e.opts.Workspace, pattern[:1]) + pattern[1:]
	}
	var q query
	var rest string
	if filepath.IsAbs(pattern) {
		// The literal directories of an absolute pattern are the search
		// path; the path parameter gives way.
		dir, r := walk.SplitPattern(pattern)
		q.searchPath, rest = filepath.Clean(dir), r
		q.walkRoot = q.searchPath
	} else {
		q.searchPath = walk.Resolve(e.opts.Workspace, a.Path)
		q.walkRoot = q.searchPath
		rest = strings.TrimPrefix(pattern, "./")
		if strings.Contains(rest, "/") {
			dir, r := walk.SplitPattern(rest)
			if dir != "" {
				q.walkRoot, rest = filepath.Join(q.searchPath, dir), r
			}
		}
	}
	// Once directories were split off (or the pattern had a '/'), the rest
	// is relative to walkRoot even without a '/' of its own.
	anchored := q.walkRoot != q.searchPath || filepath.IsAbs(pattern)
	p, err := walk.CompilePattern(rest, anchored)
	if err != nil {
		return q, errors.New(search.PatternProblem("Invalid glob pattern", a.Pattern, err))
	}
	q.pattern = p
	return q, nil
}

// find walks the tree and returns the matching files with their times.
func (e *Executor) find(ctx context.Context, q query) ([]walk.Found, error) {
	if fi, err := os.Stat(q.walkRoot); err != nil || !fi.IsDir() {
		return nil, nil // e.g. "src/**/*.go" where there is no src
	}
	p := q.pattern
	return search.Collect(ctx, q.walkRoot, p.WalkOptions(e.opts.Workers), func(_ int, f walk.Entry) (walk.Found, bool) {
		if !p.Match(f.Rel, f.Name) {
			return walk.Found{}, false
		}
		fi, err := f.Info()
		if err != nil {
			return walk.Found{}, false // removed since the directory was read
		}
		return walk.Found{Path: f.Path, ModTime: fi.ModTime().UnixNano()}, true
	})
}

func format(out *Output, timeout time.Duration) string {
	var b strings.Builder
	if len(out.Files) == 0 {
		fmt.Fprintf(&b, "No files found matching pattern '%s' in directory '%s'", out.Pattern, out.SearchPath)
	} else {
		fmt.Fprintf(&b, "Found %d file(s) matching pattern '%s' in '%s':\n%s",
			len(out.Files), out.Pattern, out.SearchPath, strings.Join(out.Files, "\n"))
		if out.Truncated {
			b.WriteString("\n\n[Results truncated to first 100 files. Consider using a more specific pattern.]")
		}
	}
	if out.Incomplete {
		fmt.Fprintf(&b, "\n\n[The search stopped after %v, so these results are incomplete. Search a narrower path or pattern.]", timeout)
	}
	return b.String()
}

// badPath words the error for a search path that is not a directory.
func badPath(given, resolved string, err error) string {
	problem := search.PathProblem(err)
	if problem == "" {
		problem = ": it is a file"
	}
	msg := fmt.Sprintf("Search path '%s' is not a valid directory%s", resolved, problem)
	if given != "" && !filepath.IsAbs(given) {
		msg += fmt.Sprintf(" (the relative path '%s' was taken from the working directory; give an absolute path)", given)
	}
	return msg
}
