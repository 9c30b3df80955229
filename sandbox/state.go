package sandbox

import "fmt"

// State is where a session is in its life (see the package doc).
type State int32

const (
	// StateStarting: the sandbox is being created; calls fail with ErrNotReady.
	StateStarting State = iota
	// StateReady: the agent answers; calls run.
	StateReady
	// StateFailed: the sandbox died or its agent stopped answering; calls
	// fail fast with Session.Err. Close still removes its resources.
	StateFailed
	// StateClosing: Close is tearing the sandbox down.
	StateClosing
	// StateClosed: the session's resources are gone (or, after Shutdown
	// with keepSessions, left running for the next daemon to adopt).
	StateClosed
	// StatePaused: the sandbox is frozen (Session.Pause); calls fail fast
	// with ErrPaused until Resume, and it is never idle.
	StatePaused
)

var stateNames = [...]string{"starting", "ready", "failed", "closing", "closed", "paused"}

func (s State) String() string {
	if s >= 0 && int(s) < len(stateNames) {
		return stateNames[s]
	}
	return fmt.Sprintf("State(%d)", int32(s))
}

// MarshalText makes states read as words in JSON.
func (s State) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// transitions lists the allowed moves; anything else is a bug or a race lost
// to a later state (e.g. a failure noticed after Close began), and is refused.
var transitions = map[State][]State{
	StateStarting: {StateReady, StateFailed, StateClosing},
	StateReady:    {StateFailed, StateClosing, StateClosed, StatePaused},
	StatePaused:   {StateReady, StateFailed, StateClosing, StateClosed},
	StateFailed:   {StateClosing, StateClosed},
	StateClosing:  {StateClosed},
	StateClosed:   nil,
}

// canMove reports whether a session in state from may move to state to.
func canMove(from, to State) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}
