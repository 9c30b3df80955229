package sandboxmgr

import (
	"github.com/sandboxd/sandboxd/agent"
	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/sandbox"
)

// The errors of the session manager and of the in-sandbox agent (which reach
// the API through the manager) join apierr's table here, with the adapter,
// so the API packages build and test without the sandbox packages.
func init() {
	apierr.Register(sandbox.ErrInvalidOptions, apierr.InvalidParams)
	apierr.Register(sandbox.ErrNotFound, apierr.NotFound)
	apierr.Register(sandbox.ErrNotReady, apierr.Unavailable)
	apierr.Register(sandbox.ErrClosed, apierr.Unavailable)
	apierr.Register(sandbox.ErrFailed, apierr.Unavailable)
	apierr.Register(sandbox.ErrManagerClosed, apierr.Unavailable)
	apierr.Register(sandbox.ErrImageNotFound, apierr.InvalidParams) // before ErrStart, which wraps it
	apierr.Register(sandbox.ErrStart, apierr.Internal)

	apierr.Register(agent.ErrDisconnected, apierr.Unavailable)
	apierr.Register(agent.ErrShuttingDown, apierr.Unavailable)
	apierr.Register(agent.ErrBusy, apierr.Busy)
	apierr.Register(agent.ErrFrameTooLarge, apierr.InvalidParams)
	apierr.Register(agent.ErrOutsideWorkspace, apierr.InvalidParams)
	apierr.Register(agent.ErrBadArchive, apierr.InvalidParams)
	apierr.Register(agent.ErrUnknownTransfer, apierr.NotFound)
	apierr.Register(agent.ErrInvalidParams, apierr.InvalidParams)
}
