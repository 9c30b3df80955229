package sandboxmgr

import (
	"context"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
)

var _ core.SnapshotBackend = (*Backend)(nil)

// Snapshot takes a snapshot of a session.
func (a *Backend) Snapshot(ctx context.Context, id string, req sandbox.SnapshotRequest) (sandbox.Snapshot, error) {
	s, err := a.m.Snapshot(ctx, id, req)
	return s, apierr.FromSandbox(err)
}

// Snapshots lists the complete snapshots.
func (a *Backend) Snapshots(ctx context.Context) ([]sandbox.Snapshot, error) {
	s, err := a.m.Snapshots(ctx)
	return s, apierr.FromSandbox(err)
}

// FindSnapshot finds a snapshot by id or name.
func (a *Backend) FindSnapshot(ctx context.Context, ref string) (sandbox.Snapshot, error) {
	s, err := a.m.FindSnapshot(ctx, ref)
	return s, apierr.FromSandbox(err)
}

// DeleteSnapshot deletes a snapshot by id or name.
func (a *Backend) DeleteSnapshot(ctx context.Context, ref string) error {
	return apierr.FromSandbox(a.m.DeleteSnapshot(ctx, ref))
}

// Restore rolls a session back to a snapshot in place.
func (a *Backend) Restore(ctx context.Context, id, ref string) (sandbox.Snapshot, error) {
	s, err := a.m.Restore(ctx, id, ref)
	return s, apierr.FromSandbox(err)
}

// WarmSnapshot keeps forks of a snapshot ready.
func (a *Backend) WarmSnapshot(ctx context.Context, ref string, size int) (sandbox.Snapshot, error) {
	s, err := a.m.WarmSnapshot(ctx, ref, size)
	return s, apierr.FromSandbox(err)
}
