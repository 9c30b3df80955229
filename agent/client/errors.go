package agentclient

import (
	"errors"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

// codes is the protocol's code table (proto.Codes) with the rows of the tool
// set's sentinels, which proto does not import; the agent adds the same
// rows (agent/errors.go).
var codes = proto.Codes.With(
	proto.Row{Code: proto.CodeUnknownTool, Err: tools.ErrUnknownTool},
	proto.Row{Code: proto.CodeClosed, Err: tools.ErrClosed},
)

// ErrStreamWindow: the agent streamed more of a call's output than its
// window allows (StreamWindow); the excess was dropped.
var ErrStreamWindow = errors.New("agent streamed past the call's window")

// remoteError is an error response as the client returns it: the agent's
// *proto.Error, which also matches the tool set's sentinels of its code
// (errors.Is(err, tools.ErrUnknownTool) holds for an unknown tool).
type remoteError struct{ err *proto.Error }

func (e remoteError) Error() string        { return e.err.Error() }
func (e remoteError) Is(target error) bool { return codes.Matches(e.err.Code, target) }
func (e remoteError) Unwrap() error        { return e.err }

// MethodError is an error of one call to the agent: the method (and the
// tool, for tools/call) it came from, and what went wrong. Its text names
// both ("agent tools/call terminal: ..."), for the daemon's logs; the API
// shows clients Err's text in its place (server/internal/apierr), since
// method names are protocol internals.
type MethodError struct {
	Method, Name string
	Err          error
}

func (e *MethodError) Error() string {
	if e.Name != "" {
		return "agent " + e.Method + " " + e.Name + ": " + e.Err.Error()
	}
	return "agent " + e.Method + ": " + e.Err.Error()
}

func (e *MethodError) Unwrap() error { return e.Err }
