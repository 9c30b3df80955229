package server_test

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Keep-alive connections of http.DefaultTransport (the MCP and
		// HTTP tests' client side). Matched anywhere in the stack, not by
		// the top frame: ignoring internal/poll.runtime_pollWait would
		// hide every goroutine blocked reading a socket, such as a leaked
		// server connection.
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	)
}
