//go:build !linux

package docker

import (
	"fmt"
	"net"

	"github.com/sandboxd/sandboxd/sandbox"
)

// ListenDirect implements sandbox.DirectRuntime: the direct path needs
// Linux (a socket bound through a folder's descriptor).
func (r *Runtime) ListenDirect(string) (net.Listener, string, error) {
	return nil, "", fmt.Errorf("%w: only on Linux", sandbox.ErrNoDirect)
}
