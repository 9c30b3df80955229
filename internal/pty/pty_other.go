//go:build !linux

// Package pty opens pseudo-terminals on Linux; elsewhere (a developer's Mac
// running `go vet`) these stubs keep the packages that use it compiling.
package pty

import (
	"errors"
	"os"
	"syscall"
)

var errNotLinux = errors.New("pty: pseudo-terminals are opened on Linux only")

func Open() (master, slave *os.File, err error)    { return nil, nil, errNotLinux }
func WithFD(*os.File, func(fd int) error) error    { return errNotLinux }
func SetSize(*os.File, uint16, uint16) error       { return errNotLinux }
func Size(*os.File) (rows, cols uint16, err error) { return 0, 0, errNotLinux }

func ProcStat(int) (state byte, session int, ok bool)            { return 0, 0, false }
func ProcStatGroup(int) (state byte, pgrp, session int, ok bool) { return 0, 0, 0, false }
func SignalSession(int, syscall.Signal) int                      { return 0 }
