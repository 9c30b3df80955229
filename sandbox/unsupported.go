package sandbox

import (
	"errors"
	"fmt"
)

// ErrUnsupported: the session asks for something its runtime cannot do
// (yet), e.g. MCP sidecars on Kubernetes. The error is an
// *UnsupportedError naming the runtime and the feature: a runtime answers
// it rather than start a sandbox that differs from what was asked.
var ErrUnsupported = errors.New("not supported by this runtime")

// UnsupportedError is an ErrUnsupported naming what is not supported
// where.
type UnsupportedError struct {
	// Runtime names the runtime ("kubernetes").
	Runtime string
	// Feature is the option or capability, as a client names it
	// ("mcp_servers (MCP sidecars)").
	Feature string
	// Detail says why, or what to do instead; may be empty.
	Detail string
}

func (e *UnsupportedError) Error() string {
	msg := fmt.Sprintf("%s is not supported on the %s runtime", e.Feature, e.Runtime)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Is makes errors.Is(err, ErrUnsupported) hold.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// OptionsChecker is implemented by runtimes that cannot honour every
// SessionOptions: CheckOptions returns an *UnsupportedError (or an
// *OptionsError) for what they cannot do. The manager asks before it makes
// anything of a session, and the daemon asks of its profiles at start.
type OptionsChecker interface {
	CheckOptions(o SessionOptions) error
}
