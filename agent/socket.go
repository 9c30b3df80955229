package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// listenUnix listens on a unix socket that only the agent's user may use
// (0600, and its directory created 0700 if missing). A stale socket left by
// a crashed agent is replaced; a live one (another agent answers) is an
// error, as is any other kind of file at the path.
func listenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("socket %s: a %v is in the way; remove it or choose another path", path, fi.Mode().Type())
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close() // it answered: that is all this dial was for
			return nil, fmt.Errorf("socket %s: another agent is listening on it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("socket %s: removing the stale socket: %w", path, err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	// The umask makes the socket 0600 from the start: no window in which
	// another user could connect.
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close() // unusable anyway; the chmod error is the one to report
		return nil, fmt.Errorf("socket %s: %w", path, err)
	}
	return ln, nil
}
