package core

import (
	"context"
	"encoding/json"
	"io"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/tools"
)

// Backend is what the API needs of the session manager. The real one is
// *sandbox.Manager behind internal/sandboxmgr, which maps its errors to the
// API's (apierr.FromSandbox); unit tests use a fake.
type Backend interface {
	// Create starts a session; zero fields of opts take the manager's
	// defaults. co is how this create serves it beyond its options (an
	// API's own idle timeout).
	Create(ctx context.Context, opts sandbox.SessionOptions, co sandbox.CreateOptions) (Sandbox, error)
	Get(id string) (Sandbox, bool)
	List() []Sandbox
	Stats() metrics.Stats
	// Shutdown closes every session, or with keepSessions leaves them
	// running for the next daemon to adopt.
	Shutdown(ctx context.Context, keepSessions bool) error
}

// Sandbox is one session of the backend: a sandbox as the API sees it (a
// *sandbox.Session behind internal/sandboxmgr). The API's own session, with
// its token, stream and calls, is Session.
type Sandbox interface {
	ID() string
	Info() Info
	Tools(ctx context.Context) ([]tools.Definition, error)
	Call(ctx context.Context, name string, args json.RawMessage, stream tools.StreamFunc) (*tools.Observation, error)
	Upload(ctx context.Context, destDir string, tar io.Reader) error
	Download(ctx context.Context, path string, w io.Writer) error
	// OpenPTY opens a PTY in the sandbox: a program on a pseudo-terminal
	// of its own, or a read-only view of a tool (o.Watch); h gets its
	// output and end (see agentclient.PTYHandler).
	OpenPTY(ctx context.Context, o proto.PTYOptions, h agentclient.PTYHandler) (PTY, error)
	// Close is idempotent.
	Close(ctx context.Context) error
	// Done is closed when the session leaves service; EndReason says why
	// when it was not closed by its owner (it failed, or idled out), else "".
	Done() <-chan struct{}
	EndReason() string
}

// PTY is an open PTY of a sandbox (an *agentclient.PTY behind internal/sandboxmgr).
type PTY interface {
	// Opened says what it runs (process id, argv; neither when watching).
	Opened() proto.PTYOpened
	// Input sends bytes to the program; calls from one goroutine keep
	// their order.
	Input(ctx context.Context, data []byte) error
	Resize(ctx context.Context, rows, cols int) error
	// Ack returns n bytes of output window: call it once output has been
	// passed on, never blocks.
	Ack(n int)
	// Close ends the PTY and says how its program ended.
	Close(ctx context.Context) (proto.PTYExit, error)
}

// Info describes a session.
type Info struct {
	State  string // starting, ready, failed, closing, closed
	Image  string
	Labels map[string]string
}
