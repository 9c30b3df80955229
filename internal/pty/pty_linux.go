//go:build linux

// Package pty opens pseudo-terminals with golang.org/x/sys/unix: no cgo, no
// libc, no extra module, any Linux image. The terminal tool (tools/bash)
// runs its shell on one; the agent's interactive PTYs (agent.PTY) run
// theirs on others.
package pty

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens a pseudo-terminal pair. The master is non-blocking and so
// registered with Go's poller: Close unblocks a pending Read, and read and
// write deadlines work. Its fd must only be reached through WithFD, since
// File.Fd would switch it back to blocking mode. The slave is a plain file
// for a child's stdio.
func Open() (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		_ = unix.Close(mfd) // the unlock error is the one to report
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	sfd, name, err := openPeer(mfd)
	if err != nil {
		_ = unix.Close(mfd) // the peer's error is the one to report
		return nil, nil, err
	}
	return os.NewFile(uintptr(mfd), "/dev/ptmx"), os.NewFile(uintptr(sfd), name), nil
}

// openPeer opens the slave side: TIOCGPTPEER (Linux 4.13+) needs no /dev/pts
// path lookup; older kernels fall back to the path.
func openPeer(mfd int) (int, string, error) {
	fd, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(mfd), unix.TIOCGPTPEER, uintptr(unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC))
	if errno == 0 {
		return int(fd), "/dev/pts/peer", nil
	}
	n, err := unix.IoctlGetUint32(mfd, unix.TIOCGPTN)
	if err != nil {
		return -1, "", fmt.Errorf("pty number: %w", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	sfd, err := unix.Open(name, unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, "", fmt.Errorf("open %s: %w", name, err)
	}
	return sfd, name, nil
}

// WithFD runs fn on the raw descriptor of a poller-managed file.
func WithFD(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

// SetSize sets the window size of the terminal of f (a master acts on its
// slave); the kernel sends SIGWINCH to the terminal's foreground process
// group when the size changes.
func SetSize(f *os.File, rows, cols uint16) error {
	return WithFD(f, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
}

// Size reads the window size of the terminal of f.
func Size(f *os.File) (rows, cols uint16, err error) {
	err = WithFD(f, func(fd int) error {
		ws, err := unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
		if err == nil {
			rows, cols = ws.Row, ws.Col
		}
		return err
	})
	return rows, cols, err
}
