package wsproto

import "time"

// Snapshots, forks and restore (decision 0052, docs/snapshots.md).
const (
	// MethodSessionSnapshot takes a snapshot of a session's filesystems
	// (its root changes, /workspace, HOME, editable paths): never its
	// running processes.
	MethodSessionSnapshot = "session.snapshot"
	// MethodSessionFork starts up to MaxForks sessions from a snapshot, or
	// from a live session (a snapshot is taken first). Operator only.
	MethodSessionFork = "session.fork"
	// MethodSessionRestore rolls a live session back to a snapshot in
	// place: same id and token, the snapshot's files exactly; its
	// processes start afresh (a new terminal shell, no background jobs).
	MethodSessionRestore = "session.restore"
	// MethodSnapshotList lists the complete snapshots: all for the
	// operator, those of its own session for a session token.
	MethodSnapshotList = "snapshot.list"
	// MethodSnapshotDelete deletes a snapshot by id or name.
	MethodSnapshotDelete = "snapshot.delete"
	// MethodSnapshotWarm keeps forks of a snapshot started and ready (a
	// warm pool keyed by snapshot). Operator only.
	MethodSnapshotWarm = "snapshot.warm"
)

// MaxForks is the most sessions one session.fork starts.
const MaxForks = 32

// SnapshotNote is what every snapshot result says of processes.
const SnapshotNote = "a snapshot holds files only: running processes (the terminal's shell, background jobs) are not carried over"

// SnapshotParams are the params of session.snapshot.
type SnapshotParams struct {
	SessionRef
	// Name, when set, is a handle for fork and restore beside the id:
	// unique, letters, digits, '_', '.', '-', at most 63.
	Name string `json:"name,omitempty"`
	// Retention is how long the snapshot is kept: 0 (or absent) the
	// session's profile's snapshot_retention, else the server's
	// (serve --snapshot-retention, default 24 h); negative: until deleted.
	Retention Duration `json:"retention,omitempty"`
}

// SnapshotInfo describes a snapshot: the result of session.snapshot, an
// entry of snapshot.list.
type SnapshotInfo struct {
	SnapshotID string `json:"snapshot_id"`
	Name       string `json:"name,omitempty"`
	// SessionID is the session it was taken of (which may have ended).
	SessionID string    `json:"session_id"`
	Image     string    `json:"image"`
	Created   time.Time `json:"created"`
	// Expires is when the retention deletes it; absent: never.
	Expires   *time.Time `json:"expires,omitempty"`
	SizeBytes int64      `json:"size_bytes"`
	// Warm and WarmReady are its warm pool's size and ready forks
	// (snapshot.warm); absent without one.
	Warm      int `json:"warm,omitempty"`
	WarmReady int `json:"warm_ready,omitempty"`
	// Note says what a snapshot does not hold (SnapshotNote).
	Note string `json:"note,omitempty"`
}

// ForkParams are the params of session.fork: Snapshot (an id or name), or
// a live session by SessionID (snapshotted first, with Name and
// Retention), and how many forks.
type ForkParams struct {
	Snapshot string `json:"snapshot,omitempty"`
	// SessionID (with SessionToken unless the operator's connection may
	// see it) forks a live session: a snapshot is taken first.
	SessionRef
	Name      string   `json:"name,omitempty"`
	Retention Duration `json:"retention,omitempty"`
	// Count is how many sessions, 1 to MaxForks (default 1).
	Count int `json:"count,omitempty"`
	// Options overlay the snapshot's session options (as session.create's
	// fields overlay a profile's); image, profile and idempotency_key are
	// not allowed: a fork runs the snapshot's image.
	Options *CreateParams `json:"options,omitempty"`
}

// ForkResult is the result of session.fork: one entry per fork, in order,
// each a session or the error that fork met (the others are unaffected).
type ForkResult struct {
	SnapshotID string      `json:"snapshot_id"`
	Forks      []ForkEntry `json:"forks"`
	Note       string      `json:"note,omitempty"`
}

// ForkEntry is one fork: its session and token, or its error.
type ForkEntry struct {
	SessionID    string `json:"session_id,omitempty"`
	SessionToken string `json:"session_token,omitempty"`
	Error        *Error `json:"error,omitempty"`
}

// RestoreParams are the params of session.restore. A session token may
// restore its session only to a snapshot of that session.
type RestoreParams struct {
	SessionRef
	Snapshot string `json:"snapshot"`
}

// RestoreResult is the result of session.restore.
type RestoreResult struct {
	SessionID  string `json:"session_id"`
	SnapshotID string `json:"snapshot_id"`
	State      string `json:"state"`
	Note       string `json:"note,omitempty"`
}

// RestoreNote is what session.restore says of processes.
const RestoreNote = "the sandbox was made again from the snapshot: its processes started afresh (a new terminal shell, no background jobs, open PTYs ended)"

// SnapshotListResult is the result of snapshot.list.
type SnapshotListResult struct {
	Snapshots []SnapshotInfo `json:"snapshots"`
}

// SnapshotDeleteParams are the params of snapshot.delete.
type SnapshotDeleteParams struct {
	Snapshot string `json:"snapshot"`
}

// SnapshotDeleteResult is the result of snapshot.delete.
type SnapshotDeleteResult struct {
	Deleted bool `json:"deleted"`
}

// SnapshotWarmParams are the params of snapshot.warm: keep Size forks of
// the snapshot started and ready for session.fork (without options:
// a fork with options starts cold); 0 removes the pool. At most MaxForks.
type SnapshotWarmParams struct {
	Snapshot string `json:"snapshot"`
	Size     int    `json:"size"`
}

// SnapshotWarmResult is the result of snapshot.warm.
type SnapshotWarmResult struct {
	SnapshotID string `json:"snapshot_id"`
	Size       int    `json:"size"`
}
