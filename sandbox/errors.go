package sandbox

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"
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
	// ErrReconnecting: the session's agent stream broke and the container
	// engine does not answer; the session reconnects when it does (or
	// fails after ManagerOptions.EngineOutage).
	ErrReconnecting = errors.New("sandbox is reconnecting")
	// ErrManagerClosed: the Manager is shut down.
	ErrManagerClosed = errors.New("session manager is shut down")
	// ErrStart: a sandbox could not be started (engine error, bad image,
	// agent did not answer).
	ErrStart = errors.New("sandbox did not start")
	// ErrImageNotFound: the session's image is not on the engine (a client
	// error: build or pull it, or name another).
	ErrImageNotFound = errors.New("image not found")
	// ErrBusy: a create could not start soon enough (every start slot was
	// taken for longer than ManagerOptions.MaxStartWait, its caller's
	// deadline came first, or its start ran past its own deadline). The
	// error is a *BusyError saying when to retry; a start already under
	// way is kept for that retry (decision 0041).
	ErrBusy = errors.New("sandboxd is busy")
	// ErrClaimed: a pooled sandbox was claimed by another daemon first
	// (Runtime.Claim lost a race for it).
	ErrClaimed = errors.New("sandbox already claimed")
)

// BusyError is an ErrBusy with the time after which a retry is likely to
// get a sandbox. It never wraps a context error: a busy create is not a
// timeout to the client, it is a "retry after N s".
type BusyError struct {
	// RetryAfter is in whole seconds, at least one.
	RetryAfter time.Duration
	// Reason says what the create waited for, for people.
	Reason string
}

// busy makes a *BusyError; retry is rounded up to whole seconds and kept
// between 1 s and maxRetryAfter.
func busy(retry time.Duration, format string, args ...any) *BusyError {
	retry = min(max(retry, time.Second), maxRetryAfter)
	retry = (retry + time.Second - 1).Truncate(time.Second)
	return &BusyError{RetryAfter: retry, Reason: fmt.Sprintf(format, args...)}
}

// maxRetryAfter bounds the retry time a BusyError asks for.
const maxRetryAfter = 5 * time.Minute

func (e *BusyError) Error() string {
	return fmt.Sprintf("%v: %s; retry after %d s", ErrBusy, e.Reason, int(e.RetryAfter/time.Second))
}

// Is makes errors.Is(err, ErrBusy) hold.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// RetryAfter is how long a create that failed with err should wait before
// it tries again, when err is an ErrBusy (ok false otherwise).
func RetryAfter(err error) (d time.Duration, ok bool) {
	var be *BusyError
	if errors.As(err, &be) {
		return be.RetryAfter, true
	}
	return 0, false
}

// OptionsError lists every problem found in a set of options.
type OptionsError struct {
	Problems []string // "field: problem", sorted
	// Details are the problems Validate found, in the order of Problems,
	// with the names of options kept apart from the text (see Named).
	// Errors made from text alone (a runtime's) have none.
	Details []Problem
}

func (e *OptionsError) Error() string {
	return "invalid options: " + strings.Join(e.Problems, "; ")
}

// Is makes errors.Is(err, ErrInvalidOptions) hold.
func (e *OptionsError) Is(target error) bool { return target == ErrInvalidOptions }

// Named returns the error with every option named by name, for an API
// whose clients spell some options differently (limits.memory_mb for
// limits.memory); the order of the problems is kept. Without Details it
// returns e.
func (e *OptionsError) Named(name func(Field) string) *OptionsError {
	if len(e.Details) == 0 {
		return e
	}
	named := &OptionsError{Problems: make([]string, len(e.Details)), Details: e.Details}
	for i, p := range e.Details {
		named.Problems[i] = p.Text(name)
	}
	return named
}

// Field is the name of an option as this package spells it: the JSON
// name, with a dot into Limits ("limits.memory").
type Field string

// A Problem is one thing wrong with a set of options: the option at
// fault, and a text whose Field arguments name options too.
type Problem struct {
	Field  Field
	format string
	args   []any
}

// Text is "field: problem" with every option named by name.
func (p Problem) Text(name func(Field) string) string {
	args := make([]any, len(p.args))
	for i, a := range p.args {
		if f, ok := a.(Field); ok {
			a = name(f)
		}
		args[i] = a
	}
	return name(p.Field) + ": " + fmt.Sprintf(p.format, args...)
}

// String is the problem with this package's names.
func (p Problem) String() string { return p.Text(func(f Field) string { return string(f) }) }

type problems []Problem

// add records a problem of field; Field arguments in args name options.
func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, Problem{Field: Field(field), format: format, args: args})
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	e := &OptionsError{Problems: make([]string, len(p)), Details: append([]Problem(nil), p...)}
	sort.SliceStable(e.Details, func(i, j int) bool { return e.Details[i].String() < e.Details[j].String() })
	for i, pr := range e.Details {
		e.Problems[i] = pr.String()
	}
	return e
}
