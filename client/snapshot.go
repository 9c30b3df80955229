package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/sandboxd/sandboxd/wsproto"
)

// Snapshots, forks and restore (docs/snapshots.md). A snapshot holds a
// session's files (root changes, /workspace, HOME, editable paths), never
// its running processes.

// SnapshotOptions are the options of Session.Snapshot.
type SnapshotOptions struct {
	// Name, when set, is a unique handle for forks and restores.
	Name string
	// Retention is how long the server keeps it: 0 its default (the
	// profile's, else serve --snapshot-retention, 24 h), negative until
	// deleted.
	Retention time.Duration
}

// Snapshot takes a snapshot of the session's filesystems.
func (s *Session) Snapshot(ctx context.Context, o SnapshotOptions) (wsproto.SnapshotInfo, error) {
	var r wsproto.SnapshotInfo
	err := s.c.call(ctx, wsproto.MethodSessionSnapshot, wsproto.SnapshotParams{
		SessionRef: s.ref(), Name: o.Name, Retention: wsproto.Duration(o.Retention),
	}, &r)
	return r, err
}

// Restore rolls the session back to a snapshot (an id or name) in place:
// the same id and token, exactly the snapshot's files; its processes
// start afresh (a new terminal shell, no background jobs). A session
// token may restore only to snapshots of its own session.
func (s *Session) Restore(ctx context.Context, snapshot string) (wsproto.RestoreResult, error) {
	var r wsproto.RestoreResult
	err := s.c.call(ctx, wsproto.MethodSessionRestore, wsproto.RestoreParams{SessionRef: s.ref(), Snapshot: snapshot}, &r)
	return r, err
}

// ForkOptions are the options of Client.Fork.
type ForkOptions struct {
	// Snapshot forks a snapshot by id or name; or Session, a live
	// session (snapshotted first, under Name with Retention).
	Snapshot  string
	Session   *Session
	Name      string
	Retention time.Duration
	// Count is how many sessions (1 to wsproto.MaxForks; 0 is 1).
	Count int
	// Options overlay the snapshot's session options; image, profile and
	// idempotency key must be empty.
	Options *CreateOptions
}

// Fork is what Client.Fork made: the snapshot forked, and one entry per
// fork in order, a session or that fork's error.
type Fork struct {
	SnapshotID string
	Sessions   []*Session
	Errors     []error
}

// Err joins the errors of the forks that failed (nil if none did).
func (f *Fork) Err() error { return errors.Join(f.Errors...) }

// Fork starts sessions from a snapshot or a live session (operator token).
// Each fork succeeds or fails on its own: Sessions[i] is nil where
// Errors[i] says why.
func (c *Client) Fork(ctx context.Context, o ForkOptions) (*Fork, error) {
	p := wsproto.ForkParams{Snapshot: o.Snapshot, Name: o.Name, Retention: wsproto.Duration(o.Retention), Count: o.Count, Options: o.Options}
	if o.Session != nil {
		p.SessionRef = o.Session.ref()
	}
	var r wsproto.ForkResult
	if err := c.call(ctx, wsproto.MethodSessionFork, p, &r); err != nil {
		return nil, err
	}
	f := &Fork{SnapshotID: r.SnapshotID, Sessions: make([]*Session, len(r.Forks)), Errors: make([]error, len(r.Forks))}
	for i, e := range r.Forks {
		if e.Error != nil {
			f.Errors[i] = fmt.Errorf("fork %d: %w", i, e.Error)
			continue
		}
		s := newSession(c, e.SessionID, e.SessionToken)
		c.register(s)
		f.Sessions[i] = s
	}
	return f, nil
}

// Snapshots lists the snapshots the token may see.
func (c *Client) Snapshots(ctx context.Context) ([]wsproto.SnapshotInfo, error) {
	var r wsproto.SnapshotListResult
	err := c.call(ctx, wsproto.MethodSnapshotList, nil, &r)
	return r.Snapshots, err
}

// DeleteSnapshot deletes a snapshot by id or name.
func (c *Client) DeleteSnapshot(ctx context.Context, snapshot string) error {
	return c.call(ctx, wsproto.MethodSnapshotDelete, wsproto.SnapshotDeleteParams{Snapshot: snapshot}, nil)
}

// WarmSnapshot keeps size forks of a snapshot (id or name) started and
// ready for the next Fork of it without Options (operator token); 0
// removes the pool. The pool lives until the snapshot is deleted or the
// server stops.
func (c *Client) WarmSnapshot(ctx context.Context, snapshot string, size int) error {
	return c.call(ctx, wsproto.MethodSnapshotWarm, wsproto.SnapshotWarmParams{Snapshot: snapshot, Size: size}, nil)
}
