package sandbox

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
)

// Labels of a snapshot's image (decision 0052). A snapshot is complete
// when its image carries its final reference (SnapshotRuntime); the labels
// are the rest of its record, read back after a restart.
const (
	LabelSnapshot        = "sandboxd.snapshot"         // the snapshot's id
	LabelSnapshotName    = "sandboxd.snapshot.name"    // its name, "" for none
	LabelSnapshotSession = "sandboxd.snapshot.session" // the session it was taken of
	LabelSnapshotCreated = "sandboxd.snapshot.created" // RFC 3339
	LabelSnapshotExpires = "sandboxd.snapshot.expires" // RFC 3339; "" never
)

// Snapshot limits and defaults.
const (
	// DefaultSnapshotRetention is how long a snapshot is kept unless the
	// operator says otherwise (serve --snapshot-retention, a profile's
	// snapshot_retention).
	DefaultSnapshotRetention = 24 * time.Hour
	// MaxForks is the most sessions one fork makes.
	MaxForks = 32
	// snapshotSweep is how often expired snapshots are looked for.
	snapshotSweep = time.Minute
)

// SnapshotRepo is the repository of snapshot images: a runtime names a
// snapshot's image SnapshotRepo/<scope>:<id>.
const SnapshotRepo = "sandboxd-snapshot"

// IsSnapshotImage reports whether an image reference is a snapshot's.
func IsSnapshotImage(ref string) bool { return strings.HasPrefix(ref, SnapshotRepo+"/") }

// ErrSnapshotNotFound: no complete snapshot with that id or name.
var ErrSnapshotNotFound = errors.New("snapshot not found")

// snapshotNameRe is what a snapshot's name may be: it is a label value
// and a handle people type.
var snapshotNameRe = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// Snapshot is a complete snapshot of a session's filesystems: the
// container's root changes, /workspace, HOME and the editable paths, kept
// as an image of the runtime's. Running processes are not part of it.
type Snapshot struct {
	ID   string
	Name string // "" when none was given
	// SessionID is the session it was taken of (which may be gone).
	SessionID string
	// Image is the runtime's reference of the snapshot's image: the image
	// of the sessions forked from it.
	Image string
	// Options are the options of the session it was taken of, with Image
	// set to the snapshot's: what a fork starts with unless it overrides.
	Options SessionOptions
	Created time.Time
	// Expires is when the retention removes it; zero: never.
	Expires time.Time
	// Size is the image's size in bytes as the runtime reports it (the
	// layers it shares with its base image included).
	Size int64
	// Warm and WarmReady are its warm pool's size and ready forks
	// (WarmSnapshot); zero without one.
	Warm, WarmReady int
}

// SnapshotSpec is what a runtime needs to take one snapshot.
type SnapshotSpec struct {
	ID        string
	SessionID string
	// Options are the session's resolved options (recorded for forks).
	Options SessionOptions
	// Labels go on the snapshot's image: the LabelSnapshot* record, the
	// session's options (LabelOptions) and the runtime's own.
	Labels map[string]string
}

// SnapshotRuntime is implemented by runtimes that can snapshot a session
// (decision 0052). A snapshot is complete or absent: a runtime writes it
// under a temporary name and marks it complete last, so that one cut off
// half-way is never listed and PruneSnapshots removes what it left.
type SnapshotRuntime interface {
	// Snapshot takes a snapshot of a running session's filesystems.
	Snapshot(ctx context.Context, spec SnapshotSpec) (Snapshot, error)
	// Snapshots lists the complete snapshots of the runtime's scope.
	Snapshots(ctx context.Context) ([]Snapshot, error)
	// DeleteSnapshot removes a snapshot by id; one that sessions still
	// run from is unlisted at once and its image removed with the last
	// of them (PruneSnapshots). Deleting what is gone is no error.
	DeleteSnapshot(ctx context.Context, id string) error
	// PruneSnapshots removes what is left of snapshots cut off half-way
	// and of deleted ones no session uses any more.
	PruneSnapshots(ctx context.Context) error
}

// snapshotRuntime returns the runtime's snapshot side, or the typed error
// of a runtime without one.
func (m *Manager) snapshotRuntime() (SnapshotRuntime, error) {
	if sr, ok := m.rt.(SnapshotRuntime); ok {
		return sr, nil
	}
	return nil, &UnsupportedError{Runtime: runtimeName(m.rt), Feature: "snapshots (session.snapshot, fork, restore)"}
}

// runtimeName names a runtime for messages: its package ("docker").
func runtimeName(rt Runtime) string {
	t := fmt.Sprintf("%T", rt)
	t = strings.TrimPrefix(t, "*")
	if p, _, ok := strings.Cut(t, "."); ok {
		return p
	}
	return t
}

// snapshots is the manager's state of snapshots in the making: names
// taken by a snapshot not yet listed.
type snapshots struct {
	mu      sync.Mutex
	pending map[string]bool      // names
	pools   map[string]*snapPool // warm pools by pool id (snapshot_pool.go)
}

// SnapshotRequest is what a snapshot asks for.
type SnapshotRequest struct {
	// Name, when set, names the snapshot: unique among the scope's
	// snapshots, a handle for fork and restore beside its id.
	Name string
	// Retention is how long it is kept: 0 is ManagerOptions'
	// SnapshotRetention, negative never.
	Retention time.Duration
}

// Snapshot takes a snapshot of a ready session's filesystems (decision
// 0052): the session goes on running; its processes are not part of the
// snapshot.
func (m *Manager) Snapshot(ctx context.Context, sessionID string, req SnapshotRequest) (Snapshot, error) {
	sr, err := m.snapshotRuntime()
	if err != nil {
		return Snapshot{}, err
	}
	if req.Name != "" && !snapshotNameRe.MatchString(req.Name) {
		return Snapshot{}, &OptionsError{Problems: []string{fmt.Sprintf("name: %q is not a snapshot name (letters, digits, '_', '.', '-'; at most 63, starting with a letter or digit)", req.Name)}}
	}
	s, err := m.Get(sessionID)
	if err != nil {
		return Snapshot{}, err
	}
	if _, err := s.begin(); err != nil {
		return Snapshot{}, err
	}
	defer s.end()
	if req.Name != "" {
		if err := m.reserveName(ctx, sr, req.Name); err != nil {
			return Snapshot{}, err
		}
		defer m.releaseName(req.Name)
	}
	now := time.Now().UTC()
	id := uuid.NewString()
	labels := map[string]string{
		LabelManaged:         "true",
		LabelSnapshot:        id,
		LabelSnapshotName:    req.Name,
		LabelSnapshotSession: sessionID,
		LabelSnapshotCreated: now.Format(time.RFC3339Nano),
		LabelSnapshotExpires: "",
		LabelOptions:         s.opts.encode(),
	}
	retention := req.Retention
	if retention == 0 {
		retention = m.opts.SnapshotRetention
	}
	if retention > 0 {
		labels[LabelSnapshotExpires] = now.Add(retention).Format(time.RFC3339Nano)
	}
	start := time.Now()
	snap, err := sr.Snapshot(ctx, SnapshotSpec{ID: id, SessionID: sessionID, Options: s.opts, Labels: labels})
	if err != nil {
		return Snapshot{}, fmt.Errorf("session %s: snapshot: %w", sessionID, err)
	}
	s.log.Info("snapshot taken", "snapshot", snap.ID, "name", snap.Name, "bytes", snap.Size, "took", time.Since(start).Round(time.Millisecond))
	return snap, nil
}

// reserveName takes name for a snapshot in the making, unless a complete
// or pending snapshot has it.
func (m *Manager) reserveName(ctx context.Context, sr SnapshotRuntime, name string) error {
	m.snaps.mu.Lock()
	defer m.snaps.mu.Unlock()
	if m.snaps.pending[name] {
		return &OptionsError{Problems: []string{fmt.Sprintf("name: a snapshot named %q is being taken", name)}}
	}
	all, err := sr.Snapshots(ctx)
	if err != nil {
		return err
	}
	if slices.ContainsFunc(all, func(s Snapshot) bool { return s.Name == name }) {
		return &OptionsError{Problems: []string{fmt.Sprintf("name: a snapshot named %q exists; delete it or choose another name", name)}}
	}
	if m.snaps.pending == nil {
		m.snaps.pending = map[string]bool{}
	}
	m.snaps.pending[name] = true
	return nil
}

func (m *Manager) releaseName(name string) {
	m.snaps.mu.Lock()
	delete(m.snaps.pending, name)
	m.snaps.mu.Unlock()
}

// Snapshots lists the complete snapshots, oldest first.
func (m *Manager) Snapshots(ctx context.Context) ([]Snapshot, error) {
	sr, err := m.snapshotRuntime()
	if err != nil {
		return nil, err
	}
	all, err := sr.Snapshots(ctx)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(all, func(a, b Snapshot) int { return a.Created.Compare(b.Created) })
	m.snaps.mu.Lock()
	for _, sp := range m.snaps.pools {
		for i := range all {
			if all[i].ID == sp.snap {
				st := sp.p.stat()
				all[i].Warm, all[i].WarmReady = st.Min, st.Ready
			}
		}
	}
	m.snaps.mu.Unlock()
	return all, nil
}

// FindSnapshot returns a complete snapshot by id or name.
func (m *Manager) FindSnapshot(ctx context.Context, ref string) (Snapshot, error) {
	all, err := m.Snapshots(ctx)
	if err != nil {
		return Snapshot{}, err
	}
	if ref == "" {
		return Snapshot{}, &OptionsError{Problems: []string{"snapshot: name a snapshot by id or name"}}
	}
	for _, s := range all {
		if s.ID == ref || (s.Name != "" && s.Name == ref) {
			return s, nil
		}
	}
	return Snapshot{}, fmt.Errorf("snapshot %q: %w", ref, ErrSnapshotNotFound)
}

// DeleteSnapshot deletes a snapshot by id or name.
func (m *Manager) DeleteSnapshot(ctx context.Context, ref string) error {
	snap, err := m.FindSnapshot(ctx, ref)
	if err != nil {
		return err
	}
	sr, _ := m.snapshotRuntime()
	m.closeSnapPools(ctx, snap.ID) // its sandboxes run its image
	if err := sr.DeleteSnapshot(ctx, snap.ID); err != nil {
		return fmt.Errorf("snapshot %s: deleting: %w", snap.ID, err)
	}
	m.log.Info("snapshot deleted", "snapshot", snap.ID, "name", snap.Name)
	return nil
}

// ForkOptions are the options a session forked from snap starts with:
// over, the fork's own fields, over the snapshot's recorded options. A
// fork runs the snapshot's image, whatever over says.
func ForkOptions(snap Snapshot, over SessionOptions) SessionOptions {
	o := over.Over(snap.Options)
	o.Image = snap.Image
	return o
}

// sweepSnapshots deletes expired snapshots and prunes the remains of
// half-made and deleted ones, every snapshotSweep, until the manager shuts
// down. A runtime without snapshots has nothing to sweep.
func (m *Manager) sweepSnapshots(ctx context.Context) {
	sr, ok := m.rt.(SnapshotRuntime)
	if !ok {
		return
	}
	t := time.NewTicker(snapshotSweep)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		m.sweepOnce(ctx, sr, time.Now())
	}
}

// sweepOnce deletes the snapshots expired at now and prunes.
func (m *Manager) sweepOnce(ctx context.Context, sr SnapshotRuntime, now time.Time) {
	cctx, cancel := context.WithTimeout(ctx, m.opts.RemoveTimeout)
	defer cancel()
	all, err := sr.Snapshots(cctx)
	if err != nil {
		m.log.Warn("listing snapshots for their retention", "err", err)
		return
	}
	for _, s := range all {
		if s.Expires.IsZero() || now.Before(s.Expires) {
			continue
		}
		m.closeSnapPools(cctx, s.ID)
		if err := sr.DeleteSnapshot(cctx, s.ID); err != nil {
			m.log.Warn("deleting an expired snapshot", "snapshot", s.ID, "err", err)
			continue
		}
		m.log.Info("snapshot expired and deleted", "snapshot", s.ID, "name", s.Name, "expired", s.Expires)
	}
	if err := sr.PruneSnapshots(cctx); err != nil {
		m.log.Warn("pruning snapshots", "err", err)
	}
}

// reclaimSnapshots removes, at start, what snapshots cut off half-way by
// the previous daemon left (decision 0052: complete or absent).
func (m *Manager) reclaimSnapshots(ctx context.Context) {
	sr, ok := m.rt.(SnapshotRuntime)
	if !ok {
		return
	}
	if err := sr.PruneSnapshots(ctx); err != nil {
		m.log.Warn("pruning the remains of snapshots", "err", err)
	}
}

// DecodeOptions parses the options label (LabelOptions) of a session's
// container or a snapshot's image.
func DecodeOptions(s string) (SessionOptions, error) { return decodeOptions(s) }
