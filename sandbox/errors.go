package sandbox

import (
	"errors"
	"fmt"
	"sort"
	"strings"
)

// Sentinel errors. Errors returned by this package wrap them; the API layer
// maps them to protocol codes with errors.Is.
var (
	// ErrInvalidOptions: SessionOptions or ManagerOptions failed validation
	// (the error is an *OptionsError listing every problem).
	ErrInvalidOptions = errors.New("invalid options")
	// ErrNotFound: no session with that id.
	ErrNotFound = errors.New("session not found")
	// ErrClosed: the session is closing or closed.
	ErrClosed = errors.New("session is closed")
	// ErrNotReady: the session is still starting.
	ErrNotReady = errors.New("session is still starting")
	// ErrFailed: the session's sandbox died or its agent stopped answering.
	ErrFailed = errors.New("sandbox failed")
	// ErrManagerClosed: the Manager is shut down.
	ErrManagerClosed = errors.New("session manager is shut down")
	// ErrStart: a sandbox could not be started (engine error, bad image,
	// agent did not answer).
	ErrStart = errors.New("sandbox did not start")
	// ErrImageNotFound: the session's image is not on the engine (a client
	// error: build or pull it, or name another).
	ErrImageNotFound = errors.New("image not found")
)

// OptionsError lists every problem found in a set of options.
type OptionsError struct {
	Problems []string // "field: problem", sorted
}

func (e *OptionsError) Error() string {
	return "invalid options: " + strings.Join(e.Problems, "; ")
}

// Is makes errors.Is(err, ErrInvalidOptions) hold.
func (e *OptionsError) Is(target error) bool { return target == ErrInvalidOptions }

type problems []string

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, field+": "+fmt.Sprintf(format, args...))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	sorted := append([]string(nil), p...)
	sort.Strings(sorted)
	return &OptionsError{Problems: sorted}
}
