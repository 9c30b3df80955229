//go:build linux

package bash

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/pty"
)

// Terminal size of the shell's pty (OpenHands' tmux session is 256x200).
const (
	ptyCols = 256
	ptyRows = 200
)

// openPTY opens the shell's pseudo-terminal (package internal/pty: the
// master is poller-managed, so Close unblocks a pending Read and write
// deadlines work).
func openPTY() (master, slave *os.File, err error) { return pty.Open() }

// withFD runs fn on the raw descriptor of a poller-managed file.
func withFD(f *os.File, fn func(fd int) error) error { return pty.WithFD(f, fn) }

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
