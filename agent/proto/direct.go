package proto

import (
	"encoding/hex"
	"errors"
)

// The direct path (decision 0035): the host listens on a unix socket in a
// folder of its own, mounted read-only into the sandbox, and asks the agent
// over the stream it already has (attach or agent-proxy) to dial it. The
// agent presents the one-time token of the request as the first frame of
// the new connection, then serves it like any other; the host accepts only
// the connection that presents it.
const (
	// MethodDirectDial is a host -> agent request {path, token}: dial the
	// unix socket at path, send MethodDirectHello with token, and serve the
	// connection. The answer comes once the hello is written.
	MethodDirectDial = "direct/dial"
	// MethodDirectHello is the first frame on a direct connection, agent
	// -> host: a notification {token}.
	MethodDirectHello = "direct/hello"

	// DirectTokenBytes is the size of a direct token's randomness; the
	// token on the wire is its hex (64 characters).
	DirectTokenBytes = 32
)

// ErrDirect: the direct path could not be set up (the dial, the hello, or
// no connection presented the token in time). Calls keep going over the
// stream that asked for it.
var ErrDirect = errors.New("direct connection to the agent not made")

type (
	// DirectParams are the params of direct/dial.
	DirectParams struct {
		Path  string `json:"path"`
		Token string `json:"token"`
	}
	// HelloParams are the params of direct/hello.
	HelloParams struct {
		Token string `json:"token"`
	}
)

// ValidDirectToken reports whether t has the form of a direct token:
// DirectTokenBytes of randomness in hex.
func ValidDirectToken(t string) bool {
	if len(t) != 2*DirectTokenBytes {
		return false
	}
	_, err := hex.DecodeString(t)
	return err == nil
}
