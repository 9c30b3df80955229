package sandbox

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeSnapRuntime is a fakeRuntime with snapshots kept in memory; a
// snapshot's image is SnapshotRepo/test:<id>, and a fork from it starts like any
// session.
type fakeSnapRuntime struct {
	*fakeRuntime
	smu     sync.Mutex
	snaps   map[string]Snapshot
	deleted []string
	pruned  int
}

func newFakeSnapRuntime(t *testing.T) *fakeSnapRuntime {
	return &fakeSnapRuntime{fakeRuntime: newFakeRuntime(t), snaps: map[string]Snapshot{}}
}

func (f *fakeSnapRuntime) Snapshot(ctx context.Context, spec SnapshotSpec) (Snapshot, error) {
	if _, err := f.box(spec.SessionID); err != nil {
		return Snapshot{}, err
	}
	s := Snapshot{ID: spec.ID, Name: spec.Labels[LabelSnapshotName], SessionID: spec.SessionID, Image: SnapshotRepo + "/test:" + spec.ID, Options: spec.Options}
	s.Options.Image = s.Image
	s.Created, _ = time.Parse(time.RFC3339Nano, spec.Labels[LabelSnapshotCreated])
	s.Expires, _ = time.Parse(time.RFC3339Nano, spec.Labels[LabelSnapshotExpires])
	f.smu.Lock()
	f.snaps[s.ID] = s
	f.smu.Unlock()
	return s, nil
}

func (f *fakeSnapRuntime) Snapshots(context.Context) ([]Snapshot, error) {
	f.smu.Lock()
	defer f.smu.Unlock()
	var out []Snapshot
	for _, s := range f.snaps {
		out = append(out, s)
	}
	return out, nil
}

func (f *fakeSnapRuntime) DeleteSnapshot(_ context.Context, id string) error {
	f.smu.Lock()
	defer f.smu.Unlock()
	delete(f.snaps, id)
	f.deleted = append(f.deleted, id)
	return nil
}

func (f *fakeSnapRuntime) PruneSnapshots(context.Context) error {
	f.smu.Lock()
	f.pruned++
	f.smu.Unlock()
	return nil
}

func TestSnapshotUnsupportedRuntime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := newTestManager(t, newFakeRuntime(t), ManagerOptions{})
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		_, err = m.Snapshot(context.Background(), s.ID(), SnapshotRequest{})
		var ue *UnsupportedError
		require.ErrorAs(t, err, &ue)
		require.ErrorIs(t, err, ErrUnsupported)
		assert.Equal(t, "sandbox", ue.Runtime, "the runtime is named (its package)")
		_, err = m.Restore(context.Background(), s.ID(), "x")
		require.ErrorIs(t, err, ErrUnsupported)
		_, err = m.Snapshots(context.Background())
		require.ErrorIs(t, err, ErrUnsupported)
	})
}

func TestSnapshotNamesAndRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeSnapRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		assert.Equal(t, 1, rt.pruned, "the remains of half-made snapshots are pruned at start")
		ctx := context.Background()
		s, err := m.Create(ctx, SessionOptions{Env: map[string]string{"A": "1"}})
		require.NoError(t, err)

		for _, bad := range []string{"-x", "a b", "a/b", string(make([]byte, 70))} {
			_, err := m.Snapshot(ctx, s.ID(), SnapshotRequest{Name: bad})
			require.ErrorIs(t, err, ErrInvalidOptions, "name %q", bad)
		}
		_, err = m.Snapshot(ctx, "nope", SnapshotRequest{})
		require.ErrorIs(t, err, ErrNotFound)

		snap, err := m.Snapshot(ctx, s.ID(), SnapshotRequest{Name: "base"})
		require.NoError(t, err)
		assert.Equal(t, time.Now().Add(DefaultSnapshotRetention).UTC(), snap.Expires.UTC(), "default retention")
		_, err = m.Snapshot(ctx, s.ID(), SnapshotRequest{Name: "base"})
		require.ErrorIs(t, err, ErrInvalidOptions, "a name is unique")
		forever, err := m.Snapshot(ctx, s.ID(), SnapshotRequest{Retention: -1})
		require.NoError(t, err)
		assert.True(t, forever.Expires.IsZero())
		short, err := m.Snapshot(ctx, s.ID(), SnapshotRequest{Retention: time.Hour})
		require.NoError(t, err)

		got, err := m.FindSnapshot(ctx, "base")
		require.NoError(t, err)
		assert.Equal(t, snap.ID, got.ID)
		_, err = m.FindSnapshot(ctx, "other")
		require.ErrorIs(t, err, ErrSnapshotNotFound)

		fo := ForkOptions(snap, SessionOptions{Image: "elsewhere", Env: map[string]string{"B": "2"}})
		assert.Equal(t, snap.Image, fo.Image, "a fork runs the snapshot's image")
		assert.Equal(t, map[string]string{"A": "1", "B": "2"}, fo.Env, "overrides over the parent's options")
		f, err := m.Create(ctx, fo)
		require.NoError(t, err)
		assert.Equal(t, snap.Image, f.Options().Image)

		// The retention: an hour on, only the short one has expired.
		m.sweepOnce(ctx, rt, time.Now().Add(time.Hour+time.Second))
		assert.Equal(t, []string{short.ID}, rt.deleted)
		m.sweepOnce(ctx, rt, time.Now().Add(DefaultSnapshotRetention+time.Second))
		assert.ElementsMatch(t, []string{short.ID, snap.ID}, rt.deleted)
		all, err := m.Snapshots(ctx)
		require.NoError(t, err)
		require.Len(t, all, 1)
		assert.Equal(t, forever.ID, all[0].ID)

		require.NoError(t, m.DeleteSnapshot(ctx, forever.ID))
		require.ErrorIs(t, m.DeleteSnapshot(ctx, forever.ID), ErrSnapshotNotFound)
	})
}

func TestRestoreInPlace(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeSnapRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		ctx := context.Background()
		s, err := m.Create(ctx, SessionOptions{})
		require.NoError(t, err)
		snap, err := m.Snapshot(ctx, s.ID(), SnapshotRequest{Name: "turn-1"})
		require.NoError(t, err)
		before := rt.starts.Load()
		got, err := m.Restore(ctx, s.ID(), "turn-1")
		require.NoError(t, err)
		assert.Equal(t, snap.ID, got.ID)
		assert.Equal(t, before+1, rt.starts.Load(), "the sandbox is made again")
		b, err := rt.box(s.ID())
		require.NoError(t, err)
		assert.Equal(t, snap.Image, b.spec.Options.Image, "from the snapshot's image")
		assert.Equal(t, "hi", echo(t, s, "hi"), "the same session serves on")
		assert.Equal(t, StateReady, s.State())

		_, err = m.Restore(ctx, s.ID(), "missing")
		require.ErrorIs(t, err, ErrSnapshotNotFound)

		// A failed restore fails the session, saying why.
		rt.startErr = errors.New("engine refused")
		_, err = m.Restore(ctx, s.ID(), snap.ID)
		require.Error(t, err)
		<-s.Done()
		require.ErrorIs(t, s.Err(), ErrFailed)
		assert.Contains(t, s.Err().Error(), "engine refused")
	})
}

func TestWarmSnapshotPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeSnapRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{})
		ctx := context.Background()
		s, err := m.Create(ctx, SessionOptions{})
		require.NoError(t, err)
		snap, err := m.Snapshot(ctx, s.ID(), SnapshotRequest{Name: "base"})
		require.NoError(t, err)
		_, err = m.WarmSnapshot(ctx, "base", MaxForks+1)
		require.ErrorIs(t, err, ErrInvalidOptions)

		_, err = m.WarmSnapshot(ctx, "base", 2)
		require.NoError(t, err)
		synctest.Wait()
		pools := m.SnapshotPools()
		require.Len(t, pools, 1)
		assert.Equal(t, 2, pools[0].Ready)
		assert.Equal(t, snap.Image, pools[0].Image)

		starts := rt.starts.Load()
		f, err := m.Create(ctx, ForkOptions(snap, SessionOptions{}))
		require.NoError(t, err)
		assert.Equal(t, "hi", echo(t, f, "hi"))
		b, err := rt.box(f.ID())
		require.NoError(t, err)
		assert.True(t, b.spec.Pooled, "the fork was handed out of the snapshot's pool")
		synctest.Wait()
		assert.Equal(t, starts+1, rt.starts.Load(), "and the pool refilled, once")
		cold, err := m.Create(ctx, ForkOptions(snap, SessionOptions{Env: map[string]string{"X": "1"}}))
		require.NoError(t, err)
		assert.Equal(t, starts+2, rt.starts.Load(), "a fork with overrides starts cold")
		require.NoError(t, cold.Close(ctx))

		// Deleting the snapshot ends its pool and closes its sandboxes.
		require.NoError(t, m.DeleteSnapshot(ctx, "base"))
		synctest.Wait()
		assert.Empty(t, m.SnapshotPools())
		assert.Equal(t, 2, rt.count(), "the parent and the fork; the pool's sandboxes are gone")
	})
}
