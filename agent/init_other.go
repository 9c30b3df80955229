//go:build !linux

package agent

import (
	"fmt"
	"io"
)

// Undumpable is a no-op off Linux.
func Undumpable() error { return nil }

// Init is only for a Linux container's PID 1.
func Init(_ []string, stderr io.Writer) int {
	_, _ = fmt.Fprintln(stderr, "sandboxd init: only on Linux")
	return 1
}
