//go:build !linux

package bash

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/internal/pty"
)

// The terminal runs inside Linux sandboxes only; these stubs keep the
// package compiling elsewhere (e.g. `go vet` on a developer's Mac).

var errNotLinux = errors.New("the terminal tool needs Linux")

func openPTY() (master, slave *os.File, err error)    { return nil, nil, errNotLinux }
func configureTTY(*os.File) (*unix.Termios, error)    { return nil, errNotLinux }
func restoreTTY(*os.File, *unix.Termios) error        { return errNotLinux }
func foregroundPgrp(*os.File) (int, error)            { return 0, errNotLinux }
func sessionMembers(int, string) []int                { return nil }
func procStat(int) (state byte, session int, ok bool) { return 0, 0, false }

func newSweeper(int, string) *pty.Sweeper { return &pty.Sweeper{} }
