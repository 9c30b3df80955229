package wsapi

import (
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/wsproto"
)

// snapshotInfo is a snapshot on the wire.
func snapshotInfo(s sandbox.Snapshot) wsproto.SnapshotInfo {
	info := wsproto.SnapshotInfo{
		SnapshotID: s.ID, Name: s.Name, SessionID: s.SessionID, Image: s.Image,
		Created: s.Created, SizeBytes: s.Size, Note: wsproto.SnapshotNote, Warm: s.Warm, WarmReady: s.WarmReady,
	}
	if !s.Expires.IsZero() {
		e := s.Expires
		info.Expires = &e
	}
	return info
}

func sessionSnapshot(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.SnapshotParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	s, err := c.session(p.SessionRef)
	if err != nil {
		return nil, err
	}
	snap, err := c.h.core.Snapshot(c.ctx, s, p.Name, time.Duration(p.Retention))
	if err != nil {
		return nil, err
	}
	info := snapshotInfo(snap)
	return &info, nil
}

func sessionFork(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.ForkParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	fr := core.ForkRequest{Snapshot: p.Snapshot, Name: p.Name, Retention: time.Duration(p.Retention), Count: p.Count}
	if p.SessionID != "" {
		s, err := c.session(p.SessionRef)
		if err != nil {
			return nil, err
		}
		fr.Session = s
	}
	if o := p.Options; o != nil {
		if o.Image != "" || o.Profile != "" || o.IdempotencyKey != "" {
			return nil, apierr.New(apierr.InvalidParams, "options: a fork runs its snapshot's image and options: image, profile and idempotency_key are not allowed")
		}
		opts, err := createOptions(*o)
		if err != nil {
			return nil, err
		}
		fr.Options = opts
	}
	snap, forks, err := c.h.core.Fork(c.ctx, c.p, core.APIWebSocket, fr)
	if err != nil {
		return nil, err
	}
	res := &wsproto.ForkResult{SnapshotID: snap.ID, Forks: make([]wsproto.ForkEntry, len(forks)), Note: wsproto.SnapshotNote}
	for i, f := range forks {
		if f.Err != nil {
			res.Forks[i].Error = apierr.JSONRPC(apierr.From(f.Err))
			continue
		}
		c.grant(f.Result.Session)
		res.Forks[i].SessionID, res.Forks[i].SessionToken = f.Result.Session.ID(), f.Result.Token
	}
	return res, nil
}

func sessionRestore(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.RestoreParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	if p.Snapshot == "" {
		return nil, apierr.New(apierr.InvalidParams, "snapshot is required")
	}
	s, err := c.session(p.SessionRef)
	if err != nil {
		return nil, err
	}
	snap, err := c.h.core.Restore(c.ctx, c.p, s, p.Snapshot)
	if err != nil {
		return nil, err
	}
	return &wsproto.RestoreResult{SessionID: s.ID(), SnapshotID: snap.ID, State: s.Info().State, Note: wsproto.RestoreNote}, nil
}

func snapshotList(c *conn, req *wsproto.Request) (any, error) {
	if err := decode(req, &struct{}{}); err != nil {
		return nil, err
	}
	all, err := c.h.core.Snapshots(c.ctx, c.p)
	if err != nil {
		return nil, err
	}
	res := &wsproto.SnapshotListResult{Snapshots: make([]wsproto.SnapshotInfo, len(all))}
	for i, s := range all {
		res.Snapshots[i] = snapshotInfo(s)
	}
	return res, nil
}

func snapshotDelete(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.SnapshotDeleteParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	if p.Snapshot == "" {
		return nil, apierr.New(apierr.InvalidParams, "snapshot is required")
	}
	if err := c.h.core.DeleteSnapshot(c.ctx, c.p, p.Snapshot); err != nil {
		return nil, err
	}
	return &wsproto.SnapshotDeleteResult{Deleted: true}, nil
}

func snapshotWarm(c *conn, req *wsproto.Request) (any, error) {
	var p wsproto.SnapshotWarmParams
	if err := decode(req, &p); err != nil {
		return nil, err
	}
	if p.Snapshot == "" {
		return nil, apierr.New(apierr.InvalidParams, "snapshot is required")
	}
	snap, err := c.h.core.WarmSnapshot(c.ctx, c.p, p.Snapshot, p.Size)
	if err != nil {
		return nil, err
	}
	return &wsproto.SnapshotWarmResult{SnapshotID: snap.ID, Size: p.Size}, nil
}
