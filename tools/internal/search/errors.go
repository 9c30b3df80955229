package search

import (
	"errors"
	"fmt"
	"os"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/internal/walk"
)

// ErrorResult is a failed observation that still carries the structured
// output (its search path, pattern).
func ErrorResult(out any, format string, args ...any) *tools.Observation {
	obs := tools.Errorf(format, args...)
	obs.Structured = out
	return obs
}

// Failed words a search that failed for another reason than its time
// budget (see Run).
func Failed(out any, searchPath string, err error) *tools.Observation {
	return ErrorResult(out, "Search in '%s' failed: %v", searchPath, err)
}

// PathProblem is why a search path cannot be used, as ": it does not exist"
// to follow "is not a valid directory"; "" if the error (of its stat) is
// nil.
func PathProblem(err error) string {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return ": it does not exist"
	case errors.Is(err, os.ErrPermission):
		return ": permission denied"
	case err != nil:
		return ": " + err.Error()
	}
	return ""
}

// PatternProblem words a glob pattern's compile error for the model:
// "Invalid glob pattern 'x[': ...", what being the first words.
func PatternProblem(what, pattern string, err error) string {
	var pe *walk.PatternError
	if errors.As(err, &pe) {
		return fmt.Sprintf("%s '%s': %s", what, pattern, pe.Problem)
	}
	return fmt.Sprintf("%s '%s': %v", what, pattern, err)
}
