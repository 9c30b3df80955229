package sandbox

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

// AgentClient is what a session needs of the agent protocol client;
// *agentclient.Client implements it. It is an interface so that tests of the
// Manager can run without containers.
type AgentClient interface {
	Ping(ctx context.Context) error
	ListTools(ctx context.Context) ([]tools.Definition, error)
	Call(ctx context.Context, name string, args json.RawMessage, stream tools.StreamFunc) (*tools.Observation, error)
	Upload(ctx context.Context, destDir string, tarStream io.Reader) error
	Download(ctx context.Context, path string, w io.Writer) error
	// OpenPTY opens a PTY (a program on a pseudo-terminal of its own, or a
	// read-only view of a tool); h gets its output and end.
	OpenPTY(ctx context.Context, o proto.PTYOptions, h agentclient.PTYHandler) (*agentclient.PTY, error)
	// InstallSkills runs the dependency installers of the session's skills
	// that have not run yet (skills_install: eager); see agentclient.Client.
	InstallSkills(ctx context.Context) error
	// Shutdown asks the agent to end its tools and exit.
	Shutdown(ctx context.Context) error
	// Close drops the connection and leaves the agent running.
	Close() error
	// Done is closed when the connection ends; Err says why.
	Done() <-chan struct{}
	Err() error
}

// DialFunc wraps a stream to an agent in a client that logs what the
// stream causes to log (already truncated and rate-limited per session,
// package loglimit).
type DialFunc func(conn io.ReadWriteCloser, log *slog.Logger) AgentClient

// DialAgent is the default DialFunc: the agent package's client.
func DialAgent(conn io.ReadWriteCloser, log *slog.Logger) AgentClient {
	return agentclient.NewClient(conn, agentclient.WithLogger(log))
}
