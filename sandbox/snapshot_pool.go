package sandbox

import (
	"context"
	"fmt"
)

// Warm pools keyed by snapshot (issue 27 §2, decision 0052): forks of a
// snapshot kept started and ready, as a profile's pool keeps sandboxes of
// its options, so that a fork is a hand-out, not a cold start. They are
// made at runtime (WarmSnapshot), live until the snapshot is deleted (or
// expires) or the manager shuts down, and are not kept over a restart:
// the next daemon's reclaim removes their sandboxes (no configured pool
// wants them).

// snapPool is one snapshot's warm pool.
type snapPool struct {
	p      *pool
	snap   string // the snapshot's id
	cancel context.CancelFunc
}

// WarmSnapshot keeps size forks of a snapshot (id or name) started and
// ready for the forks to come (with no option overrides: a fork that
// overrides starts cold); size 0 removes its pool. A pool's sandboxes are
// started as the manager's start slots allow, after client creates.
func (m *Manager) WarmSnapshot(ctx context.Context, ref string, size int) (Snapshot, error) {
	if size < 0 || size > MaxForks {
		return Snapshot{}, &OptionsError{Problems: []string{fmt.Sprintf("size: %d: want 0 (no pool) to %d", size, MaxForks)}}
	}
	snap, err := m.FindSnapshot(ctx, ref)
	if err != nil {
		return Snapshot{}, err
	}
	o, err := m.Resolve(ForkOptions(snap, SessionOptions{}))
	if err != nil {
		return Snapshot{}, err
	}
	id := poolID("", false, o.Key())
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	if err := m.checkOpen(); err != nil {
		return Snapshot{}, err
	}
	if old := m.snaps.pools[id]; old != nil {
		m.stopSnapPoolLocked(id, old)
	}
	if size == 0 {
		return snap, nil
	}
	p := newPool(m, id, o, PoolOptions{Options: o, Size: size})
	pctx, cancel := context.WithCancel(context.Background())
	if m.snaps.pools == nil {
		m.snaps.pools = map[string]*snapPool{}
	}
	m.snaps.pools[id] = &snapPool{p: p, snap: snap.ID, cancel: cancel}
	if !m.goBackground(func(ctx context.Context) {
		stop := context.AfterFunc(ctx, cancel)
		defer stop()
		p.run(pctx)
	}) {
		cancel()
		delete(m.snaps.pools, id)
		return Snapshot{}, ErrManagerClosed
	}
	m.log.Info("warm pool of a snapshot", "snapshot", snap.ID, "size", size)
	return snap, nil
}

// snapshotPool is the snapshot pool of resolved options key, or nil.
func (m *Manager) snapshotPool(key string) *pool {
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	if sp := m.snaps.pools[poolID("", false, key)]; sp != nil {
		return sp.p
	}
	return nil
}

// stopSnapPoolLocked ends a snapshot's pool and closes its sandboxes.
func (m *Manager) stopSnapPoolLocked(id string, sp *snapPool) {
	sp.cancel()
	for _, s := range sp.p.drain() {
		m.closeInBackground(s)
	}
	delete(m.snaps.pools, id)
}

// stopSnapPools ends the pools of a snapshot (its id), or every pool
// ("", at shutdown), and returns their ready sandboxes to close.
func (m *Manager) stopSnapPools(snapID string) []*Session {
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	var out []*Session
	for id, sp := range m.snaps.pools {
		if snapID != "" && sp.snap != snapID {
			continue
		}
		sp.cancel()
		out = append(out, sp.p.drain()...)
		delete(m.snaps.pools, id)
	}
	return out
}

// closeSnapPools closes the sandboxes of a snapshot's pools and waits.
func (m *Manager) closeSnapPools(ctx context.Context, snapID string) {
	for _, s := range m.stopSnapPools(snapID) {
		_ = s.Close(ctx) // teardown logs a failed removal
	}
}

// dropSnapPooled removes a failed session from its snapshot pool, if it
// waits in one, and closes it.
func (m *Manager) dropSnapPooled(s *Session) {
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	for _, sp := range m.snaps.pools {
		if sp.p.remove(s) {
			m.closeInBackground(s)
			sp.p.signal()
			return
		}
	}
}

// SnapshotPools reports the warm pools of snapshots (PoolStat.Image is the
// snapshot's image).
func (m *Manager) SnapshotPools() []PoolStat {
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	out := make([]PoolStat, 0, len(m.snaps.pools))
	for _, sp := range m.snaps.pools {
		out = append(out, sp.p.stat())
	}
	return out
}
