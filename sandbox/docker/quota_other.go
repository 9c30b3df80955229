//go:build !linux

package docker

import "errors"

var errNoLoop = errors.New("loop devices are Linux only")

func loopSupported() error              { return errNoLoop }
func loopAttach(string) (string, error) { return "", errNoLoop }
func loopDetach(string) error           { return errNoLoop }
func loopsOf(string) ([]string, error)  { return nil, nil }
