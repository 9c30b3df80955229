package servertest

import (
	"context"
	"maps"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
)

// Snapshots of the fake backend: a snapshot keeps a session's uploaded
// files (its "filesystem"); a fork is a Create of the snapshot's image
// "snap:<id>" with the files copied in; a restore puts them back.

var _ core.SnapshotBackend = (*FakeBackend)(nil)

type fakeSnap struct {
	snap  sandbox.Snapshot
	files map[string][]byte
}

// Snapshot implements core.SnapshotBackend.
func (m *FakeBackend) Snapshot(ctx context.Context, id string, req sandbox.SnapshotRequest) (sandbox.Snapshot, error) {
	s := m.Sandbox(id)
	if s == nil || s.closed.Load() {
		return sandbox.Snapshot{}, apierr.New(apierr.NotFound, "no session %q", id)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, fs := range m.snaps {
		if req.Name != "" && fs.snap.Name == req.Name {
			return sandbox.Snapshot{}, apierr.New(apierr.InvalidParams, "invalid options: name: a snapshot named %q exists", req.Name)
		}
	}
	sid := "snap-" + auth.NewToken()[:12]
	snap := sandbox.Snapshot{ID: sid, Name: req.Name, SessionID: id, Image: "snap:" + sid, Options: s.Options(), Created: time.Now().UTC()}
	snap.Options.Image = snap.Image
	if req.Retention > 0 {
		snap.Expires = snap.Created.Add(req.Retention)
	}
	s.mu.Lock()
	files := maps.Clone(s.files)
	s.mu.Unlock()
	if m.snaps == nil {
		m.snaps = map[string]*fakeSnap{}
	}
	m.snaps[sid] = &fakeSnap{snap: snap, files: files}
	return snap, nil
}

// Snapshots implements core.SnapshotBackend.
func (m *FakeBackend) Snapshots(context.Context) ([]sandbox.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]sandbox.Snapshot, 0, len(m.snaps))
	for _, fs := range m.snaps {
		out = append(out, fs.snap)
	}
	return out, nil
}

func (m *FakeBackend) findSnap(ref string) (*fakeSnap, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, fs := range m.snaps {
		if fs.snap.ID == ref || (fs.snap.Name != "" && fs.snap.Name == ref) {
			return fs, nil
		}
	}
	return nil, apierr.New(apierr.NotFound, "snapshot %q: snapshot not found", ref)
}

// FindSnapshot implements core.SnapshotBackend.
func (m *FakeBackend) FindSnapshot(_ context.Context, ref string) (sandbox.Snapshot, error) {
	fs, err := m.findSnap(ref)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	return fs.snap, nil
}

// DeleteSnapshot implements core.SnapshotBackend.
func (m *FakeBackend) DeleteSnapshot(_ context.Context, ref string) error {
	fs, err := m.findSnap(ref)
	if err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.snaps, fs.snap.ID)
	m.mu.Unlock()
	return nil
}

// Restore implements core.SnapshotBackend: the session's files become the
// snapshot's.
func (m *FakeBackend) Restore(_ context.Context, id, ref string) (sandbox.Snapshot, error) {
	fs, err := m.findSnap(ref)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	s := m.Sandbox(id)
	if s == nil {
		return sandbox.Snapshot{}, apierr.New(apierr.NotFound, "no session %q", id)
	}
	s.mu.Lock()
	s.files = maps.Clone(fs.files)
	if s.files == nil {
		s.files = map[string][]byte{}
	}
	s.mu.Unlock()
	return fs.snap, nil
}

// forked fills a session created from a snapshot's image with its files.
func (m *FakeBackend) forked(s *FakeSandbox) {
	m.mu.Lock()
	var files map[string][]byte
	for _, fs := range m.snaps {
		if fs.snap.Image == s.opts.Image {
			files = maps.Clone(fs.files)
		}
	}
	m.mu.Unlock()
	if files != nil {
		s.files = files
	}
}

// WarmSnapshot implements core.SnapshotBackend: it records the size
// (WarmSize); the fake starts nothing ahead.
func (m *FakeBackend) WarmSnapshot(_ context.Context, ref string, size int) (sandbox.Snapshot, error) {
	fs, err := m.findSnap(ref)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	m.mu.Lock()
	if m.warm == nil {
		m.warm = map[string]int{}
	}
	m.warm[fs.snap.ID] = size
	m.mu.Unlock()
	return fs.snap, nil
}

// WarmSize is what snapshot.warm last asked of a snapshot's pool.
func (m *FakeBackend) WarmSize(id string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.warm[id]
}
