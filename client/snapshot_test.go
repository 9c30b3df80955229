package client_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/servertest"
	"github.com/sandboxd/sandboxd/wsproto"
)

// The snapshot methods through the Go client and the WebSocket API, over
// the fake backend: snapshot, fork (results one by one), restore in place,
// who may do what, list and delete.
func TestSnapshotForkRestore(t *testing.T) {
	ts := servertest.Start(t, nil)
	c := dial(t, ts.URL, ts.Token, client.Options{})
	s, err := c.CreateSession(ctx(t), client.CreateOptions{Env: map[string]string{"A": "1"}})
	require.NoError(t, err)
	require.NoError(t, s.Upload(ctx(t), "/workspace/f", bytes.NewReader([]byte("one"))))
	snap, err := s.Snapshot(ctx(t), client.SnapshotOptions{Name: "turn-1"})
	require.NoError(t, err)
	assert.Equal(t, s.ID, snap.SessionID)
	assert.Equal(t, wsproto.SnapshotNote, snap.Note)
	_, err = s.Snapshot(ctx(t), client.SnapshotOptions{Name: "turn-1"})
	var werr *client.Error
	require.ErrorAs(t, err, &werr)
	assert.Equal(t, wsproto.CodeInvalidParams, werr.Code, "a name is unique")

	f, err := c.Fork(ctx(t), client.ForkOptions{Snapshot: "turn-1", Count: 3, Options: &client.CreateOptions{Env: map[string]string{"B": "2"}}})
	require.NoError(t, err)
	require.NoError(t, f.Err())
	assert.Equal(t, snap.SnapshotID, f.SnapshotID)
	require.Len(t, f.Sessions, 3)
	for _, fs := range f.Sessions {
		assert.NotEqual(t, s.ID, fs.ID)
		assert.NotEmpty(t, fs.Token)
		o := ts.Backend.Sandbox(fs.ID).Options()
		assert.Equal(t, map[string]string{"A": "1", "B": "2"}, o.Env, "the fork's options over the snapshot's")
		assert.Equal(t, snap.Image, o.Image)
		var out bytes.Buffer
		require.NoError(t, fs.Download(ctx(t), "/workspace/f", &out))
		assert.Equal(t, "one", out.String(), "a fork has the snapshot's files")
	}
	_, err = c.Fork(ctx(t), client.ForkOptions{Snapshot: "turn-1", Count: wsproto.MaxForks + 1})
	require.ErrorAs(t, err, &werr)
	assert.Equal(t, wsproto.CodeInvalidParams, werr.Code)
	_, err = c.Fork(ctx(t), client.ForkOptions{Snapshot: "turn-1", Options: &client.CreateOptions{Image: "other"}})
	require.ErrorAs(t, err, &werr)
	assert.Equal(t, wsproto.CodeInvalidParams, werr.Code, "a fork runs its snapshot's image")

	// Fork a live session: a snapshot is taken first.
	live, err := c.Fork(ctx(t), client.ForkOptions{Session: s, Name: "live"})
	require.NoError(t, err)
	require.NoError(t, live.Err())
	assert.NotEqual(t, snap.SnapshotID, live.SnapshotID)

	// The session's own token: restore in place, no fork, only its own.
	sc := dial(t, ts.URL, s.Token, client.Options{})
	own := sc.Session(s.ID, s.Token)
	require.NoError(t, own.Upload(ctx(t), "/workspace/f", bytes.NewReader([]byte("two"))))
	r, err := own.Restore(ctx(t), "turn-1")
	require.NoError(t, err)
	assert.Equal(t, s.ID, r.SessionID)
	var out bytes.Buffer
	require.NoError(t, own.Download(ctx(t), "/workspace/f", &out))
	assert.Equal(t, "one", out.String(), "restored in place")
	_, err = sc.Fork(ctx(t), client.ForkOptions{Snapshot: "turn-1"})
	require.ErrorAs(t, err, &werr)
	assert.Equal(t, wsproto.CodePermission, werr.Code)

	other, err := c.CreateSession(ctx(t), client.CreateOptions{})
	require.NoError(t, err)
	theirs, err := other.Snapshot(ctx(t), client.SnapshotOptions{})
	require.NoError(t, err)
	_, err = own.Restore(ctx(t), theirs.SnapshotID)
	require.ErrorAs(t, err, &werr)
	assert.Equal(t, wsproto.CodeNotFound, werr.Code, "another session's snapshot is not found")
	require.ErrorAs(t, sc.DeleteSnapshot(ctx(t), theirs.SnapshotID), &werr)
	mine, err := sc.Snapshots(ctx(t))
	require.NoError(t, err)
	assert.Len(t, mine, 2, "a session token lists its own session's")

	require.NoError(t, c.WarmSnapshot(ctx(t), "turn-1", 4))
	assert.Equal(t, 4, ts.Backend.WarmSize(snap.SnapshotID))
	require.ErrorAs(t, sc.WarmSnapshot(ctx(t), "turn-1", 1), &werr)
	assert.Equal(t, wsproto.CodePermission, werr.Code, "a session token cannot warm")

	all, err := c.Snapshots(ctx(t))
	require.NoError(t, err)
	assert.Len(t, all, 3)
	require.NoError(t, c.DeleteSnapshot(ctx(t), "turn-1"))
	err = c.DeleteSnapshot(ctx(t), "turn-1")
	require.True(t, errors.As(err, &werr) && werr.Code == wsproto.CodeNotFound, "%v", err)
}
