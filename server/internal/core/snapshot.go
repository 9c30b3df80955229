package core

import (
	"context"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
)

// SnapshotBackend is implemented by backends that snapshot, fork and
// restore sessions (decision 0052); errors come mapped (apierr).
type SnapshotBackend interface {
	Snapshot(ctx context.Context, sessionID string, req sandbox.SnapshotRequest) (sandbox.Snapshot, error)
	Snapshots(ctx context.Context) ([]sandbox.Snapshot, error)
	FindSnapshot(ctx context.Context, ref string) (sandbox.Snapshot, error)
	DeleteSnapshot(ctx context.Context, ref string) error
	Restore(ctx context.Context, sessionID, ref string) (sandbox.Snapshot, error)
	WarmSnapshot(ctx context.Context, ref string, size int) (sandbox.Snapshot, error)
}

// WarmSnapshot keeps size forks of a snapshot ready (operator only).
func (c *Core) WarmSnapshot(ctx context.Context, p Principal, ref string, size int) (sandbox.Snapshot, error) {
	if !p.Operator {
		return sandbox.Snapshot{}, apierr.New(apierr.PermissionDenied, "a session token cannot start sessions; warm a snapshot with the operator token")
	}
	b, err := c.snapshots()
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	return b.WarmSnapshot(ctx, ref, size)
}

func (c *Core) snapshots() (SnapshotBackend, error) {
	if b, ok := c.opts.Backend.(SnapshotBackend); ok {
		return b, nil
	}
	return nil, apierr.New(apierr.InvalidParams, "this server's backend cannot snapshot sessions")
}

// SnapshotRetention is the retention of a snapshot of s that names none:
// its profile's (Options.SnapshotRetention), else 0 (the manager's).
func (c *Core) snapshotRetention(s *Session, asked time.Duration) time.Duration {
	if asked != 0 || s == nil {
		return asked
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.opts.SnapshotRetention[s.profile]
}

// Snapshot takes a snapshot of s (authorized by the caller).
func (c *Core) Snapshot(ctx context.Context, s *Session, name string, retention time.Duration) (sandbox.Snapshot, error) {
	b, err := c.snapshots()
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	if err := c.beginCall(); err != nil {
		return sandbox.Snapshot{}, err
	}
	defer c.endCall()
	return b.Snapshot(ctx, s.id, sandbox.SnapshotRequest{Name: name, Retention: c.snapshotRetention(s, retention)})
}

// Snapshots lists the snapshots p may see: all for the operator, those of
// its own session for a session token.
func (c *Core) Snapshots(ctx context.Context, p Principal) ([]sandbox.Snapshot, error) {
	b, err := c.snapshots()
	if err != nil {
		return nil, err
	}
	all, err := b.Snapshots(ctx)
	if err != nil || p.Operator {
		return all, err
	}
	var own []sandbox.Snapshot
	for _, s := range all {
		if s.SessionID == p.SessionID {
			own = append(own, s)
		}
	}
	return own, nil
}

// findSnapshot finds a snapshot p may use: any for the operator, one of
// its own session for a session token (another's is not found, as a
// session that is not yours).
func (c *Core) findSnapshot(ctx context.Context, p Principal, ref string) (sandbox.Snapshot, error) {
	b, err := c.snapshots()
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	snap, err := b.FindSnapshot(ctx, ref)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	if !p.Operator && snap.SessionID != p.SessionID {
		return sandbox.Snapshot{}, apierr.New(apierr.NotFound, "snapshot %q: not found", ref)
	}
	return snap, nil
}

// DeleteSnapshot deletes a snapshot p may use.
func (c *Core) DeleteSnapshot(ctx context.Context, p Principal, ref string) error {
	snap, err := c.findSnapshot(ctx, p, ref)
	if err != nil {
		return err
	}
	b, _ := c.snapshots()
	return b.DeleteSnapshot(ctx, snap.ID)
}

// Restore rolls s back to a snapshot p may use (a session token: one of
// its own session's), in place.
func (c *Core) Restore(ctx context.Context, p Principal, s *Session, ref string) (sandbox.Snapshot, error) {
	snap, err := c.findSnapshot(ctx, p, ref)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	if err := c.beginCall(); err != nil {
		return sandbox.Snapshot{}, err
	}
	defer c.endCall()
	b, _ := c.snapshots()
	return b.Restore(ctx, s.id, snap.ID)
}

// ForkRequest is what a fork asks for: a snapshot by id or name, or a
// live session (snapshotted first with Name and Retention), Count forks,
// and Options over the snapshot's session options.
type ForkRequest struct {
	Snapshot  string
	Session   *Session
	Name      string
	Retention time.Duration
	Count     int
	Options   sandbox.SessionOptions
}

// ForkOne is one fork's outcome: a session or its error.
type ForkOne struct {
	Result CreateResult
	Err    error
}

// Fork starts Count sessions from a snapshot (operator only); they start
// at once, as many in parallel as the manager's start slots allow, and
// each succeeds or fails on its own.
func (c *Core) Fork(ctx context.Context, p Principal, api string, req ForkRequest) (sandbox.Snapshot, []ForkOne, error) {
	if !p.Operator {
		return sandbox.Snapshot{}, nil, apierr.New(apierr.PermissionDenied, "a session token cannot create sessions; fork with the operator token")
	}
	if req.Count == 0 {
		req.Count = 1
	}
	if req.Count < 1 || req.Count > sandbox.MaxForks {
		return sandbox.Snapshot{}, nil, apierr.New(apierr.InvalidParams, "count must be 1 to %d, not %d", sandbox.MaxForks, req.Count)
	}
	if req.Options.Image != "" {
		return sandbox.Snapshot{}, nil, apierr.New(apierr.InvalidParams, "a fork runs its snapshot's image: options.image is not allowed")
	}
	if req.Options.User == sandbox.UserImage {
		return sandbox.Snapshot{}, nil, apierr.New(apierr.PermissionDenied, "user %q is for session profiles only", sandbox.UserImage)
	}
	for _, m := range req.Options.MCPServers {
		if err := c.checkImage(m.Image); err != nil {
			return sandbox.Snapshot{}, nil, err
		}
	}
	if (req.Snapshot == "") == (req.Session == nil) {
		return sandbox.Snapshot{}, nil, apierr.New(apierr.InvalidParams, "name either a snapshot or a session to fork")
	}
	var snap sandbox.Snapshot
	var err error
	if req.Session != nil {
		snap, err = c.Snapshot(ctx, req.Session, req.Name, req.Retention)
	} else {
		snap, err = c.findSnapshot(ctx, p, req.Snapshot)
	}
	if err != nil {
		return sandbox.Snapshot{}, nil, err
	}
	opts := sandbox.ForkOptions(snap, req.Options)
	out := make([]ForkOne, req.Count)
	var wg sync.WaitGroup
	for i := range out {
		wg.Go(func() {
			cctx, cancel := c.callContext(ctx)
			defer cancel()
			r, err := c.create(cctx, api, opts, sandbox.CreateOptions{})
			if err == nil && ctx.Err() != nil {
				c.abandoned("", r.Session.id) // its client left
				err = ctx.Err()
			}
			out[i] = ForkOne{Result: r, Err: err}
		})
	}
	wg.Wait()
	return snap, out, nil
}
