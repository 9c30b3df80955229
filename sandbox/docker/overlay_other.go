//go:build !linux

package docker

import (
	"context"
	"errors"
)

var errNoOverlay = errors.New("seeding by overlay is Linux only")

func (r *Runtime) probeOverlay(context.Context, string) *overlaySupport {
	return &overlaySupport{err: errNoOverlay}
}

func (r *Runtime) mountOverlay(context.Context, vol, []string, int, int, bool) (string, error) {
	return "", errNoOverlay
}

func releaseOverlay(string) error { return nil }
