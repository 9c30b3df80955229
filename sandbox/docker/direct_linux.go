//go:build linux

package docker

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/sandbox"
)

// ListenDirect implements sandbox.DirectRuntime: a socket of a random name
// in the session's folder. It binds through the folder's descriptor
// (/proc/self/fd/N/name), opened without following a symlink, so the
// length of the state directory's path does not matter (a socket address
// holds 107 bytes) and the socket lands in that very folder.
func (r *Runtime) ListenDirect(sessionID string) (net.Listener, string, error) {
	if r.directErr != nil {
		return nil, "", fmt.Errorf("%w: %v", sandbox.ErrNoDirect, r.directErr)
	}
	dir := r.DirectFolder(sessionID)
	if dir == "" {
		return nil, "", fmt.Errorf("%w: invalid session id %q", sandbox.ErrNoDirect, sessionID)
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			// Made without one (before this runtime had it, or with it off).
			return nil, "", fmt.Errorf("%w: the sandbox has no direct path folder", sandbox.ErrNoDirect)
		}
		return nil, "", fmt.Errorf("direct path folder %s: %w", dir, err)
	}
	var b [9]byte
	if _, err := rand.Read(b[:]); err != nil {
		_ = unix.Close(fd)
		return nil, "", err
	}
	name := "d-" + hex.EncodeToString(b[:]) + ".sock"
	at := fmt.Sprintf("/proc/self/fd/%d/%s", fd, name)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: at, Net: "unix"})
	if err != nil {
		_ = unix.Close(fd)
		return nil, "", fmt.Errorf("direct path socket: %w", err)
	}
	ln.SetUnlinkOnClose(false) // by name in the folder, below: the fd path may be reused by then
	// Made with the umask's mode; widened only now, inside 0700 folders.
	if err := unix.Fchmodat(fd, name, 0o666, 0); err != nil {
		_ = ln.Close()
		_ = unix.Unlinkat(fd, name, 0)
		_ = unix.Close(fd)
		return nil, "", fmt.Errorf("direct path socket: %w", err)
	}
	return &directListener{UnixListener: ln, dirfd: fd, name: name}, sandbox.DirectDir + "/" + name, nil
}

// directListener unlinks its socket from the folder it holds open.
type directListener struct {
	*net.UnixListener
	dirfd int
	name  string
	once  sync.Once
}

// Close stops listening and unlinks the socket; it is idempotent.
func (l *directListener) Close() error {
	var err error
	l.once.Do(func() {
		err = l.UnixListener.Close()
		_ = unix.Unlinkat(l.dirfd, l.name, 0) // gone already is fine: the folder goes at Remove anyway
		_ = unix.Close(l.dirfd)
	})
	return err
}
