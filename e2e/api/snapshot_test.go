package api

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/wsproto"
)

// termOut runs a terminal command and returns its output without the
// trailer.
func termOut(t *testing.T, ctx context.Context, s *client.Session, cmd string) string {
	t.Helper()
	obs, err := s.Call(ctx, "terminal", map[string]any{"command": cmd}, nil)
	require.NoError(t, err)
	require.False(t, obs.IsError, obs.Text())
	out, _, _ := strings.Cut(obs.Text(), "\n[The command completed")
	return strings.TrimSpace(out)
}

// cli runs the sandboxd CLI against a serve process.
func cli(t *testing.T, ctx context.Context, p *serveProc, state string, env []string, args ...string) []byte {
	t.Helper()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = append(append(os.Environ(), "SANDBOXD_URL="+p.url, "SANDBOXD_STATE_DIR="+state), env...)
	out, err := cmd.Output()
	var stderr string
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		stderr = string(ee.Stderr)
	}
	require.NoError(t, err, "sandboxd %v: %s", args, stderr)
	return out
}

// snapshotImages lists the images of t's daemons (any, tagged or not).
func snapshotImages(t *testing.T, ctx context.Context) []image.Summary {
	t.Helper()
	imgs, err := engine.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", labelRun+"="+runID), filters.Arg("label", labelTest+"="+testScope(t)))})
	require.NoError(t, err)
	return imgs
}

// TestSnapshotThroughCLIAndClient: the Go client snapshots, the CLI lists,
// forks and deletes, a session token restores its own session and is
// refused another's snapshot and a fork.
func TestSnapshotThroughCLIAndClient(t *testing.T) {
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	srv := startServe(t, state, "--snapshot-retention", "2h")
	defer srv.stop(t)
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	require.NoError(t, err)
	c, err := client.Dial(ctx, srv.url, token, client.Options{})
	require.NoError(t, err)
	defer c.Close()

	a, err := c.CreateSession(ctx, client.CreateOptions{})
	require.NoError(t, err)
	termOut(t, ctx, a, "echo one > /workspace/f && echo h > ~/h")
	snap, err := a.Snapshot(ctx, client.SnapshotOptions{Name: "turn-1"})
	require.NoError(t, err)
	assert.Equal(t, a.ID, snap.SessionID)
	assert.Equal(t, wsproto.SnapshotNote, snap.Note)
	require.NotNil(t, snap.Expires)
	assert.WithinDuration(t, snap.Created.Add(2*time.Hour), *snap.Expires, time.Minute, "serve --snapshot-retention")

	var list wsproto.SnapshotListResult
	require.NoError(t, json.Unmarshal(cli(t, ctx, srv, state, nil, "snapshot", "list"), &list))
	require.Len(t, list.Snapshots, 1)
	assert.Equal(t, snap.SnapshotID, list.Snapshots[0].SnapshotID)

	var forked wsproto.ForkResult
	require.NoError(t, json.Unmarshal(cli(t, ctx, srv, state, nil, "fork", "--count", "2", "--options", `{"env":{"SEED":"7"}}`, "turn-1"), &forked))
	require.Len(t, forked.Forks, 2)
	for _, f := range forked.Forks {
		require.Nil(t, f.Error)
		fc, err := client.Dial(ctx, srv.url, f.SessionToken, client.Options{})
		require.NoError(t, err)
		fs := fc.Session(f.SessionID, f.SessionToken)
		assert.Equal(t, "one\nh\n7", termOut(t, ctx, fs, "cat /workspace/f ~/h; echo $SEED"))
		require.NoError(t, fs.Close(ctx))
		fc.Close()
	}

	// A warm pool of the snapshot: the next forks are handed out of it.
	cli(t, ctx, srv, state, nil, "snapshot", "warm", "--size", "2", "turn-1")
	waitUntil(t, 3*time.Minute, "2 warm forks of turn-1", func() bool {
		all, err := c.Snapshots(ctx)
		return err == nil && len(all) == 1 && all[0].WarmReady == 2
	})
	pooled := poolContainers(t, ctx)
	require.Len(t, pooled, 2)
	warm, err := c.Fork(ctx, client.ForkOptions{Snapshot: "turn-1", Count: 2})
	require.NoError(t, err)
	require.NoError(t, warm.Err())
	for _, fs := range warm.Sessions {
		assert.Contains(t, pooled, fs.ID, "handed out of the snapshot's pool")
		require.NoError(t, fs.Close(ctx))
	}
	cli(t, ctx, srv, state, nil, "snapshot", "warm", "--size", "0", "turn-1")

	// A session token: its own session's snapshot restores it, in place.
	sc, err := client.Dial(ctx, srv.url, a.Token, client.Options{})
	require.NoError(t, err)
	defer sc.Close()
	as := sc.Session(a.ID, a.Token)
	termOut(t, ctx, as, "echo two > /workspace/f && touch /workspace/later")
	r, err := as.Restore(ctx, "turn-1")
	require.NoError(t, err)
	assert.Equal(t, a.ID, r.SessionID)
	assert.Equal(t, "one|absent", termOut(t, ctx, as, "echo \"$(cat /workspace/f)|$(ls /workspace/later 2>/dev/null || echo absent)\""))
	_, err = sc.Fork(ctx, client.ForkOptions{Snapshot: "turn-1"})
	var werr *wsproto.Error
	require.ErrorAs(t, err, &werr)
	assert.Equal(t, wsproto.CodePermission, werr.Code, "a session token cannot fork")

	b, err := c.CreateSession(ctx, client.CreateOptions{})
	require.NoError(t, err)
	bsnap, err := b.Snapshot(ctx, client.SnapshotOptions{})
	require.NoError(t, err)
	_, err = as.Restore(ctx, bsnap.SnapshotID)
	require.ErrorAs(t, err, &werr)
	assert.Equal(t, wsproto.CodeNotFound, werr.Code, "another session's snapshot is not found for a session token")
	own, err := sc.Snapshots(ctx)
	require.NoError(t, err)
	require.Len(t, own, 1, "a session token lists its own session's snapshots")

	_, err = c.Fork(ctx, client.ForkOptions{Snapshot: "turn-1", Count: wsproto.MaxForks + 1})
	require.ErrorAs(t, err, &werr)
	assert.Equal(t, wsproto.CodeInvalidParams, werr.Code, "at most 32 forks")

	require.NoError(t, a.Close(ctx))
	require.NoError(t, b.Close(ctx))
	cli(t, ctx, srv, state, nil, "snapshot", "delete", "turn-1")
	require.NoError(t, c.DeleteSnapshot(ctx, bsnap.SnapshotID))
	all, err := c.Snapshots(ctx)
	require.NoError(t, err)
	assert.Empty(t, all)
	assert.Empty(t, snapshotImages(t, ctx), "nothing of the snapshots is left")
}

// TestSnapshotDaemonKilledMidway: a daemon killed (SIGKILL) while it
// writes a snapshot leaves nothing usable; the next one lists the
// snapshot complete or not at all, and removes the half.
func TestSnapshotDaemonKilledMidway(t *testing.T) {
	state := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	first := startServe(t, state, "--keep-sessions")
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	require.NoError(t, err)
	c, err := client.Dial(ctx, first.url, token, client.Options{})
	require.NoError(t, err)
	s, err := c.CreateSession(ctx, client.CreateOptions{})
	require.NoError(t, err)
	termOut(t, ctx, s, "head -c 200000000 /dev/zero > /workspace/big && echo ok")

	tmp := sdocker.SnapshotTmpDir(sandbox.ScopeOf(map[string]string{labelRun: runID, labelTest: testScope(t)}))
	done := make(chan error, 1)
	go func() {
		_, err := s.Snapshot(ctx, client.SnapshotOptions{Name: "midway"})
		done <- err
	}()
	// Killed as soon as the snapshot's layer is being written.
	waitUntil(t, 2*time.Minute, "the snapshot's layer file", func() bool {
		ents, _ := os.ReadDir(tmp)
		for _, e := range ents {
			if fi, err := e.Info(); err == nil && fi.Size() > 0 {
				return true
			}
		}
		return false
	})
	require.NoError(t, first.cmd.Process.Kill())
	t.Logf("serve killed: %v", <-first.exited)
	first.stopped = true
	t.Logf("the snapshot's call: %v", <-done)
	c.Close()

	second := startServe(t, state)
	defer second.stop(t)
	c2, err := client.Dial(ctx, second.url, token, client.Options{})
	require.NoError(t, err)
	defer c2.Close()
	list, err := c2.Snapshots(ctx)
	require.NoError(t, err)
	for _, snap := range list {
		// Complete, then: it forks.
		f, err := c2.Fork(ctx, client.ForkOptions{Snapshot: snap.SnapshotID})
		require.NoError(t, err)
		require.NoError(t, f.Err())
		require.NoError(t, f.Sessions[0].Close(ctx))
		require.NoError(t, c2.DeleteSnapshot(ctx, snap.SnapshotID))
	}
	t.Logf("listed after the kill: %d snapshot(s)", len(list))
	assert.Empty(t, snapshotImages(t, ctx), "no half of a snapshot is left")
	ents, _ := os.ReadDir(tmp)
	assert.Empty(t, ents, "no layer file is left")
	adopted := c2.Session(s.ID, s.Token)
	assert.Equal(t, "200000000", termOut(t, ctx, adopted, "wc -c < /workspace/big"), "the session lives on")
}

// poolContainers are the session ids of t's pooled (unclaimed) sandboxes.
func poolContainers(t *testing.T, ctx context.Context) []string {
	t.Helper()
	ctrs, err := engine.ContainerList(ctx, container.ListOptions{All: true, Filters: filters.NewArgs(
		filters.Arg("label", labelRun+"="+runID), filters.Arg("label", labelTest+"="+testScope(t)))})
	require.NoError(t, err)
	var ids []string
	for _, c := range ctrs {
		for _, n := range c.Names {
			if id, ok := strings.CutPrefix(n, "/sandboxd-pool-"); ok {
				ids = append(ids, id)
			}
		}
	}
	return ids
}
