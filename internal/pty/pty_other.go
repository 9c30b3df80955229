//go:build !linux

// Package pty opens pseudo-terminals on Linux; elsewhere (a developer's Mac
// running `go vet`) these stubs keep the packages that use it compiling.
package pty

import (
	"errors"
	"os"
	"syscall"
	"time"
)

var errNotLinux = errors.New("pty: pseudo-terminals are opened on Linux only")

func Open() (master, slave *os.File, err error)    { return nil, nil, errNotLinux }
func WithFD(*os.File, func(fd int) error) error    { return errNotLinux }
func SetSize(*os.File, uint16, uint16) error       { return errNotLinux }
func Size(*os.File) (rows, cols uint16, err error) { return 0, 0, errNotLinux }

func ProcStat(int) (state byte, session int, ok bool)            { return 0, 0, false }
func ProcStatGroup(int) (state byte, pgrp, session int, ok bool) { return 0, 0, 0, false }
func SignalSession(int, syscall.Signal) int                      { return 0 }

// Member is a process found by ScanSession (Linux only).
type Member struct {
	PID, Pgrp int
	State     byte
}

// Stopped reports whether the member was stopped when read.
func (m Member) Stopped() bool { return false }

func ScanSession(int, func(int) bool) []Member { return nil }

// Sweeper ends a terminal session's processes (Linux only).
type Sweeper struct{}

func NewSweeper(int, func(int) bool) *Sweeper                                       { return &Sweeper{} }
func (*Sweeper) Signal(syscall.Signal) (found, running int)                         { return 0, 0 }
func (*Sweeper) FreezeAndKill(time.Duration, func(syscall.Signal) bool) (bool, int) { return true, 0 }
