//go:build !linux

package main

import (
	"io"

	"github.com/sandboxd/sandboxd/agent"
)

// protocolStdio returns stdin/stdout as the protocol connection. The agent
// runs on Linux; this lets the binary build elsewhere for development.
func protocolStdio(std stdio) (io.ReadWriteCloser, error) {
	return agent.JoinConn(io.NopCloser(std.in), nopWriteCloser{std.out}), nil
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
