//go:build linux

package bash

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Terminal size of the shell's pty (OpenHands' tmux session is 256x200).
const (
	ptyCols = 256
	ptyRows = 200
)

// openPTY opens a pseudo-terminal pair with golang.org/x/sys/unix (no cgo, no
// libc, no extra module). The master is non-blocking and so registered with
// Go's poller: Close unblocks a pending Read and write deadlines work. Its fd
// must only be reached through SyscallConn, since File.Fd would switch it
// back to blocking mode. The slave is a plain file for the child's stdio.
func openPTY() (master, slave *os.File, err error) {
	mfd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	if err := unix.IoctlSetPointerInt(mfd, unix.TIOCSPTLCK, 0); err != nil {
		unix.Close(mfd)
		return nil, nil, fmt.Errorf("unlock pty: %w", err)
	}
	sfd, name, err := openPeer(mfd)
	if err != nil {
		unix.Close(mfd)
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

// withFD runs fn on the raw descriptor of a poller-managed file.
func withFD(f *os.File, fn func(fd int) error) error {
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

// configureTTY sets the line discipline the session relies on and returns
// it as the baseline restored before every command. Termios ioctls on a
// Linux pty master act on the slave side.
//   - echo off: the typed command never appears in the output, and busybox
//     ash skips its line editor (which would print escapes and query the
//     cursor position) when echo is off;
//   - canonical mode and signals on, so C-c becomes SIGINT;
//   - no XON/XOFF, so a stray C-s cannot freeze the output;
//   - IUTF8 for correct erase of multi-byte characters.
func configureTTY(master *os.File) (*unix.Termios, error) {
	var t *unix.Termios
	err := withFD(master, func(fd int) error {
		var err error
		if t, err = unix.IoctlGetTermios(fd, unix.TCGETS); err != nil {
			return fmt.Errorf("get termios: %w", err)
		}
		t.Lflag &^= unix.ECHO | unix.ECHONL
		t.Lflag |= unix.ICANON | unix.ISIG
		t.Iflag &^= unix.IXON | unix.IXOFF
		t.Iflag |= unix.ICRNL | unix.IUTF8
		if err := unix.IoctlSetTermios(fd, unix.TCSETS, t); err != nil {
			return fmt.Errorf("set termios: %w", err)
		}
		ws := &unix.Winsize{Row: ptyRows, Col: ptyCols}
		if err := unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws); err != nil {
			return fmt.Errorf("set window size: %w", err)
		}
		return nil
	})
	return t, err
}

// restoreTTY puts the baseline settings back if a program (or `stty`) left
// the terminal changed, e.g. echo on or raw mode after a crash.
func restoreTTY(master *os.File, base *unix.Termios) error {
	return withFD(master, func(fd int) error {
		cur, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		if err != nil {
			return err
		}
		if *cur == *base {
			return nil
		}
		return unix.IoctlSetTermios(fd, unix.TCSETS, base)
	})
}

// foregroundPgrp is the process group that owns the terminal: the running
// command's job, or the shell itself when it waits at the prompt.
func foregroundPgrp(master *os.File) (int, error) {
	var pgrp int
	err := withFD(master, func(fd int) error {
		v, err := unix.IoctlGetUint32(fd, unix.TIOCGPGRP)
		pgrp = int(int32(v))
		return err
	})
	return pgrp, err
}
