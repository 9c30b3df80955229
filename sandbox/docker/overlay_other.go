//go:build !linux

package docker

import (
	"context"
	"errors"
	"sync/atomic"
)

var errNoOverlay = errors.New("seeding by overlay is Linux only")

func (r *Runtime) probeOverlay(context.Context, string) *overlaySupport {
	return &overlaySupport{err: errNoOverlay}
}

// overlayFixer is Linux only.
type overlayFixer struct {
	host           string
	entries, fixed atomic.Int64
}

func (fx *overlayFixer) pass(context.Context) error { return errNoOverlay }

func (r *Runtime) mountOverlay(context.Context, vol, []string, int, int, bool) (*overlayFixer, error) {
	return nil, errNoOverlay
}

func releaseOverlay(string) error { return nil }
