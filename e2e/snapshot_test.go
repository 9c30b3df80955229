package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// treeCmd lists the session's workspace and HOME, every entry with its
// type, mode, owner and content hash: two equal listings are the same tree.
const treeCmd = `cd / && find /workspace "$HOME" \( -path "$HOME/.cache" -prune \) -o -print | sort | while read -r p; do ` +
	`if [ -f "$p" ]; then echo "$p $(stat -c '%A %u:%g' "$p") $(md5sum < "$p" | cut -c1-32)"; else echo "$p $(stat -c '%A %u:%g' "$p")"; fi; done`

// prepare writes files into the workspace and HOME, installs a program
// into HOME (~/.local/bin, no network), deletes a file the image has in
// HOME, and starts a background job.
func prepare(t *testing.T, s *sandbox.Session) {
	t.Helper()
	sh(t, s, `mkdir -p /workspace/src ~/.local/bin && echo base > /workspace/src/a.txt && echo home > ~/notes.txt && `+
		`printf '#!/bin/sh\necho hello-from-package\n' > ~/.local/bin/hello && chmod +x ~/.local/bin/hello && `+
		`head -c 100000 /dev/urandom > /workspace/blob && ln -s src/a.txt /workspace/link && touch ~/.deleteme && rm ~/.deleteme`)
	// A job that outlives its command: its own session, SIGHUP ignored.
	sh(t, s, `printf '#!/bin/sh\nwhile :; do sleep 1; done\n' > ~/snapjob && chmod +x ~/snapjob && `+
		`(setsid sh -c 'trap "" HUP; exec ~/snapjob' >/dev/null 2>&1 &); sleep 0.5`)
	require.Contains(t, sh(t, s, `ps -o args | grep -c '[s]napjob' || true`), "1")
}

// shOut is sh's output without the terminal's trailer.
func shOut(t *testing.T, s *sandbox.Session, command string) string {
	t.Helper()
	out, _, _ := strings.Cut(sh(t, s, command), "\n[The command completed")
	return strings.TrimSpace(out)
}

// checkFork checks that a fork has the parent's files and program and
// none of its processes.
func checkFork(ctx context.Context, s *sandbox.Session) error {
	out, err := tryCall(ctx, s, "terminal", map[string]any{"command": `cat /workspace/src/a.txt ~/notes.txt; ~/.local/bin/hello; readlink /workspace/link; wc -c < /workspace/blob; echo jobs=$(ps -o args | grep -c '[s]napjob')`})
	if err != nil {
		return err
	}
	want := []string{"base", "home", "hello-from-package", "src/a.txt", "100000"}
	text := out.Text()
	for _, w := range want {
		if !strings.Contains(text, w) {
			return fmt.Errorf("fork %s lacks %q: %s", s.ID(), w, text)
		}
	}
	if !strings.Contains(text, "jobs=0") {
		return fmt.Errorf("fork %s runs the parent's job: %s", s.ID(), text)
	}
	return nil
}

// forkN starts n sessions from snap at once.
func forkN(t *testing.T, m *sandbox.Manager, snap sandbox.Snapshot, n int) []*sandbox.Session {
	t.Helper()
	out := make([]*sandbox.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			out[i], errs[i] = m.Create(ctxT(t), sandbox.ForkOptions(snap, sandbox.SessionOptions{}))
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "fork %d", i)
	}
	return out
}

// TestSnapshotForkRestore is issue 27's acceptance at the manager: files in
// the workspace and HOME and a program installed into HOME survive a
// snapshot and show in 8 forks, which are isolated from each other and
// run none of the parent's processes; the parent runs on; after the
// parent is gone, 8 more forks come from the named snapshot; a restore
// brings back exactly the snapshot's tree; nothing is left after delete.
func TestSnapshotForkRestore(t *testing.T) {
	rt := newRuntime(t)
	m := newManager(t, rt, sandbox.ManagerOptions{MaxConcurrentStarts: 8})
	ctx := ctxT(t)
	parent, err := m.Create(ctx, sandbox.SessionOptions{})
	require.NoError(t, err)
	prepare(t, parent)
	tree := shOut(t, parent, treeCmd)
	require.Contains(t, tree, "/workspace/src/a.txt")
	require.NotContains(t, tree, ".deleteme")

	snap, err := m.Snapshot(ctx, parent.ID(), sandbox.SnapshotRequest{Name: "base-" + runID})
	require.NoError(t, err)
	assert.Equal(t, parent.ID(), snap.SessionID)
	assert.False(t, snap.Expires.IsZero(), "a default retention")
	_, err = m.Snapshot(ctx, parent.ID(), sandbox.SnapshotRequest{Name: "base-" + runID})
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions, "names are unique")

	forks := forkN(t, m, snap, 8)
	var wg sync.WaitGroup
	errs := make([]error, len(forks))
	for i, f := range forks {
		wg.Go(func() {
			if errs[i] = checkFork(ctx, f); errs[i] != nil {
				return
			}
			_, errs[i] = tryCall(ctx, f, "terminal", map[string]any{"command": fmt.Sprintf("echo %d > /workspace/mine && echo %d > ~/mine", i, i)})
		})
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for i, f := range forks {
		assert.Equal(t, fmt.Sprint(i), shOut(t, f, "cat /workspace/mine ~/mine | sort -u"), "fork %d sees only its own writes", i)
	}
	assert.Equal(t, tree, shOut(t, forks[0], "rm /workspace/mine ~/mine && "+treeCmd), "a fork's tree is the parent's at the snapshot")
	assert.Contains(t, sh(t, parent, `ps -o args | grep -c '[s]napjob' || true`), "1", "the parent still runs its job")

	// Restore a fork after it created and deleted files.
	f := forks[1]
	sh(t, f, "rm -rf /workspace/src && echo new > /workspace/new.txt && mkdir -p ~/.local/lib && echo x > ~/.local/lib/y")
	restored, err := m.Restore(ctx, f.ID(), snap.Name)
	require.NoError(t, err)
	assert.Equal(t, snap.ID, restored.ID)
	again, err := m.Get(f.ID())
	require.NoError(t, err)
	assert.Same(t, f, again, "the same session")
	assert.Equal(t, tree, shOut(t, f, treeCmd), "exactly the snapshot's tree after a restore")

	for _, s := range append(forks, parent) {
		require.NoError(t, s.Close(ctx))
	}
	// The parent is gone: the named snapshot still forks.
	named, err := m.FindSnapshot(ctx, "base-"+runID)
	require.NoError(t, err)
	forks = forkN(t, m, named, 8)
	for _, f := range forks {
		require.NoError(t, checkFork(ctx, f))
		require.NoError(t, f.Close(ctx))
	}

	require.NoError(t, m.DeleteSnapshot(ctx, snap.ID))
	all, err := m.Snapshots(ctx)
	require.NoError(t, err)
	assert.Empty(t, all)
	imgs, err := docker.ImageList(ctx, image.ListOptions{All: true, Filters: filters.NewArgs(filters.Arg("label", labelRun+"="+runID))})
	require.NoError(t, err)
	assert.Empty(t, imgs, "no image of the snapshot is left")
}

// TestSnapshotKeepsDeletions: files of the image's own HOME and workspace
// that the session deleted stay deleted in forks and after a restore (the
// snapshot's folders are opaque over the image's).
func TestSnapshotKeepsDeletions(t *testing.T) {
	ctx := ctxT(t)
	img := "sandboxd-e2e-snapshot:" + runID
	build := exec.CommandContext(ctx, "docker", "build", "-q", "-t", img, "--label", labelRun+"="+runID, "-")
	build.Stdin = strings.NewReader("FROM " + testImage + "\nUSER root\n" +
		"RUN echo image > /home/agent/.from-image && echo image > /workspace/from-image && chown 1000:1000 /home/agent/.from-image /workspace/from-image\nUSER 1000:1000\n")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	t.Cleanup(func() { _, _ = docker.ImageRemove(context.Background(), img, image.RemoveOptions{Force: true}) })

	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	// The image's user: HOME and workspace by the engine's copy-up;
	// another user: by sandboxd (an overlay of the layers where the host
	// allows, else a copy).
	for _, user := range []string{"", "1001:1001"} {
		t.Run("user="+user, func(t *testing.T) { checkDeletions(t, m, img, user) })
	}
}

func checkDeletions(t *testing.T, m *sandbox.Manager, img, user string) {
	ctx := ctxT(t)
	s, err := m.Create(ctx, sandbox.SessionOptions{Image: img, User: user})
	require.NoError(t, err)
	require.Equal(t, "image\nimage", shOut(t, s, "cat ~/.from-image /workspace/from-image"))
	sh(t, s, "rm ~/.from-image /workspace/from-image && echo mine > ~/mine")
	tree := shOut(t, s, treeCmd)
	snap, err := m.Snapshot(ctx, s.ID(), sandbox.SnapshotRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.DeleteSnapshot(context.Background(), snap.ID) })

	f := forkN(t, m, snap, 1)[0]
	assert.Equal(t, tree, shOut(t, f, treeCmd), "the image's deleted files are not back in a fork")
	sh(t, f, "echo again > ~/.from-image")
	_, err = m.Restore(ctx, f.ID(), snap.ID)
	require.NoError(t, err)
	assert.Equal(t, tree, shOut(t, f, treeCmd), "nor after a restore")
	require.NoError(t, f.Close(ctx))
	require.NoError(t, s.Close(ctx))
	require.NoError(t, m.DeleteSnapshot(ctx, snap.ID))
}

// A Python package pip installed into the home folder (`pip install --user`,
// from a source folder in the workspace: no network; Debian marks its Python
// externally managed, hence --break-system-packages) is in every fork of a
// snapshot and imports there: what a harness prepares once and forks.
func TestSnapshotKeepsAPipPackageInHome(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	ctx := ctxT(t)
	parent, err := m.Create(ctx, sandbox.SessionOptions{Image: "sandboxd-default:latest"})
	require.NoError(t, err)
	out := sh(t, parent, `mkdir -p /workspace/pkg/snappkg && cd /workspace/pkg && `+
		`printf 'VALUE = "from-home-site-packages"\n' > snappkg/__init__.py && `+
		`printf 'from setuptools import setup\nsetup(name="snappkg", version="1.0", packages=["snappkg"])\n' > setup.py && `+
		`python3 -m pip install -q --user --break-system-packages --no-index --no-build-isolation --disable-pip-version-check . && `+
		`cd / && rm -rf /workspace/pkg && python3 -c 'import snappkg, sys; print(snappkg.__file__)'`)
	require.Contains(t, out, "/.local/lib/python3", "installed into the home folder")

	snap, err := m.Snapshot(ctx, parent.ID(), sandbox.SnapshotRequest{})
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.DeleteSnapshot(context.Background(), snap.ID)) })
	for i, f := range forkN(t, m, snap, 2) {
		got := shOut(t, f, `python3 -c 'import snappkg; print(snappkg.VALUE)'; ls /workspace/pkg 2>&1 | head -1`)
		assert.Contains(t, got, "from-home-site-packages", "fork %d imports the package", i)
		assert.Contains(t, got, "No such file", "fork %d has the workspace as it was (the source folder removed)", i)
		require.NoError(t, f.Close(ctx))
	}
}
