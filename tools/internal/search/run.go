package search

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/sandboxd/sandboxd/tools/internal/walk"
)

// Run runs find with a time budget of its own and returns what it found,
// newest first. When the budget runs out, what was found so far comes back
// with incomplete set. err is ctx's error once ctx has ended (the call
// returns it), else the search's failure, which the model reads.
func Run(ctx context.Context, budget time.Duration, find func(context.Context) ([]walk.Found, error)) (found []walk.Found, incomplete bool, err error) {
	searchCtx, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	found, err = find(searchCtx)
	if ctx.Err() != nil {
		return nil, false, ctx.Err()
	}
	if err != nil {
		if !errors.Is(err, context.DeadlineExceeded) {
			return nil, false, err
		}
		incomplete = true
	}
	walk.SortNewestFirst(found)
	return found, incomplete, nil
}

// Collect walks root and returns the files match takes. match runs on the
// walk's workers at once; worker (0 to opts.NumWorkers()-1) lets it keep
// state per worker without locks.
func Collect(ctx context.Context, root string, opts walk.Options, match func(worker int, e walk.Entry) (walk.Found, bool)) ([]walk.Found, error) {
	found := make([][]walk.Found, opts.NumWorkers())
	err := walk.Walk(ctx, root, opts, func(w int, e walk.Entry) error {
		if f, ok := match(w, e); ok {
			found[w] = append(found[w], f)
		}
		return nil
	})
	return slices.Concat(found...), err
}

// Paths are the paths of the first limit files, and whether there were
// more.
func Paths(found []walk.Found, limit int) (paths []string, truncated bool) {
	paths = make([]string, 0, min(limit, len(found)))
	for _, f := range found[:min(limit, len(found))] {
		paths = append(paths, f.Path)
	}
	return paths, len(found) > limit
}
