//go:build !linux

package agent

import (
	"io"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// protocolStdio returns stdin/stdout as the protocol connection. The agent
// runs on Linux; this lets the binary build elsewhere for development.
func protocolStdio(in io.Reader, out io.Writer) (io.ReadWriteCloser, error) {
	return proto.JoinConn(io.NopCloser(in), nopWriteCloser{out}), nil
}
