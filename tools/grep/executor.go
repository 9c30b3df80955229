package grep

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/internal/search"
	"github.com/sandboxd/sandboxd/tools/internal/walk"
)

// DefaultTimeout caps one search. When it passes, what was found so far is
// returned, marked incomplete.
const DefaultTimeout = search.DefaultTimeout

// Options configure an Executor.
type Options = search.Options

// Executor runs grep actions. It holds no state between calls, so calls
// may run concurrently.
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

// Params are the factory parameters of the "grep" spec.
type Params = search.Params

// Factory makes the grep tool for a session: it searches env.Workspace by
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
	out := &Output{Matches: []string{}, Pattern: a.Pattern, IncludePattern: a.Include, OutputMode: a.OutputMode}
	if out.OutputMode == "" {
		out.OutputMode = ModeFiles
		if a.Context > 0 {
			out.OutputMode = ModeContent
		}
	}
	limit := a.Limit
	if limit == 0 {
		limit = DefaultLimit
	}

	root := walk.Resolve(e.opts.Workspace, a.Path)
	out.SearchPath = root
	fi, err := os.Stat(root)
	if err != nil || (!fi.IsDir() && !fi.Mode().IsRegular()) {
		return search.ErrorResult(out, "%s", badPath(a.Path, root, err, fi)), nil
	}
	m, err := compilePattern(a.Pattern, a.CaseSensitive)
	if err != nil {
		return search.ErrorResult(out, "Invalid regex pattern: %v", err), nil
	}
	var include *walk.Pattern
	if a.Include != "" {
		if include, err = walk.CompilePattern(a.Include, false); err != nil {
			return search.ErrorResult(out, "%s", search.PatternProblem("Invalid include pattern", a.Include, err)), nil
		}
	}

	found, incomplete, err := search.Run(ctx, e.opts.Timeout, func(ctx context.Context) ([]walk.Found, error) {
		if fi.IsDir() {
			return e.findFiles(ctx, root, m, include)
		}
		return searchOne(ctx, root, m)
	})
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err != nil {
		return search.Failed(out, root, err), nil
	}
	out.Incomplete, out.Count = incomplete, len(found)

	// Lines and counts are read from the files found, newest first, with a
	// time budget of their own so a walk that ran out of time still shows
	// some.
	showCtx, cancelShow := context.WithTimeout(ctx, e.opts.Timeout)
	defer cancelShow()
	switch out.OutputMode {
	case ModeContent:
		e.contentMode(showCtx, out, found, m, a.Context, limit)
	case ModeCount:
		countMode(showCtx, out, found, m, limit)
	default:
		out.Matches, out.Truncated = search.Paths(found, limit)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if showCtx.Err() != nil {
		out.Incomplete = true
	}
	return tools.TextResult(format(out, limit, e.opts.Timeout), out), nil
}

// findFiles walks root and returns the files with a matching line.
func (e *Executor) findFiles(ctx context.Context, root string, m *matcher, include *walk.Pattern) ([]walk.Found, error) {
	opts := walk.Options{Workers: e.opts.Workers}
	if include != nil {
		opts = include.WalkOptions(e.opts.Workers)
	}
	searchers := make([]*searcher, opts.NumWorkers())
	return search.Collect(ctx, root, opts, func(w int, f walk.Entry) (walk.Found, bool) {
		if include != nil && !include.Match(f.Rel, f.Name) {
			return walk.Found{}, false
		}
		s := searchers[w]
		if s == nil {
			s = newSearcher(ctx, m)
			searchers[w] = s
		}
		res, err := s.search(f.Path, false)
		// Unreadable and binary files are skipped.
		return walk.Found{Path: f.Path, ModTime: res.mtime}, err == nil && res.matched
	})
}

// searchOne searches a path that is a file.
func searchOne(ctx context.Context, path string, m *matcher) ([]walk.Found, error) {
	res, err := newSearcher(ctx, m).search(path, false)
	if errors.Is(err, errBinary) || (err == nil && !res.matched) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return []walk.Found{{Path: path, ModTime: res.mtime}}, nil
}

func (e *Executor) contentMode(ctx context.Context, out *Output, found []walk.Found, m *matcher, ctxLines, limit int) {
	s := newSearcher(ctx, m)
	shown, used := 0, 0
	for _, f := range found {
		if ctx.Err() != nil {
			return
		}
		if shown == limit {
			out.Truncated = true // every file left has a match
			return
		}
		lines, n, more, err := s.content(f.Path, ctxLines, limit-shown)
		if err != nil || n == 0 {
			continue
		}
		if keep, kept := fitLines(lines, MaxContentBytes-used); keep < len(lines) {
			// The text would outgrow what a model should read (and what a
			// frame carries): keep whole lines up to the budget, ending on
			// a match's group.
			if kept > 0 {
				out.Lines = append(out.Lines, lines[:keep]...)
				out.Matches = append(out.Matches, f.Path)
			}
			out.Truncated, out.OutputCut = true, true
			return
		}
		for _, l := range lines {
			used += lineBytes(l)
		}
		out.Lines = append(out.Lines, lines...)
		out.Matches = append(out.Matches, f.Path)
		shown += n
		if more {
			out.Truncated = true
			return
		}
	}
}

// lineBytes is about what a line takes in the text: "path:N:text\n".
func lineBytes(l Line) int { return len(l.Path) + len(l.Text) + 12 }

// fitLines returns how many of lines fit in budget bytes, cut back to just
// after the last matching line that fits (context after it included when
// it fits too), and how many matching lines that keeps.
func fitLines(lines []Line, budget int) (keep, matches int) {
	used, lastMatch, m := 0, -1, 0
	for i, l := range lines {
		used += lineBytes(l)
		if used > budget {
			break
		}
		keep = i + 1
		if l.Match {
			lastMatch, m = i, m+1
		}
	}
	if keep == len(lines) {
		return keep, m
	}
	if lastMatch < 0 {
		return 0, 0
	}
	// Keep the context lines after the last match up to the next match.
	end := lastMatch + 1
	for end < keep && !lines[end].Match {
		end++
	}
	return end, m
}

func countMode(ctx context.Context, out *Output, found []walk.Found, m *matcher, limit int) {
	s := newSearcher(ctx, m)
	for _, f := range found[:min(limit, len(found))] {
		if ctx.Err() != nil {
			return
		}
		res, err := s.search(f.Path, true)
		if err != nil || !res.matched {
			continue
		}
		out.Matches = append(out.Matches, f.Path)
		out.Counts = append(out.Counts, FileCount{Path: f.Path, Count: res.lines})
	}
	out.Truncated = len(found) > limit
}

// badPath words the error for a search path that is not usable.
func badPath(given, resolved string, err error, fi os.FileInfo) string {
	shown := given
	if given == "" {
		shown = resolved
	}
	msg := fmt.Sprintf("Search path '%s' is not a valid directory%s", shown, why(err, fi))
	if given != "" && !filepath.IsAbs(given) {
		msg += fmt.Sprintf(" (a relative path is taken from the working directory: '%s'; give an absolute path)", resolved)
	}
	return msg
}

func why(err error, fi os.FileInfo) string {
	if err == nil && fi != nil && !fi.IsDir() && !fi.Mode().IsRegular() {
		return ": it is not a directory or a regular file"
	}
	return search.PathProblem(err)
}
