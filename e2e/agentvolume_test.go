package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
)

// agentVolumes are the agent volumes of the runtime scope of labels.
func agentVolumes(t *testing.T, labels map[string]string) []string {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", sdocker.LabelAgent), filters.Arg("label", sdocker.LabelScope+"="+sdocker.ScopeOf(labels)))
	vols, err := docker.VolumeList(ctxT(t), volume.ListOptions{Filters: f})
	require.NoError(t, err)
	var names []string
	for _, v := range vols.Volumes {
		names = append(names, v.Name)
	}
	return names
}

// TestAgentVolumeGoneAtShutdown (X1): the shared agent volume a writable
// root's session made is removed when the daemon shuts down (the manager,
// then the runtime's Close) without keeping sessions; with
// --keep-sessions it stays while the kept session mounts it, and the next
// daemon adopts the session with it.
func TestAgentVolumeGoneAtShutdown(t *testing.T) {
	t.Parallel()
	labels := testLabels(t)
	newRT := func() *sdocker.Runtime {
		rt, err := sdocker.New(context.Background(), sdocker.Options{AgentBinary: agentBinary, Labels: labels, Logger: logger(), DiskDir: diskDir, DirectDir: directDir})
		require.NoError(t, err)
		return rt
	}
	opts := sandbox.ManagerOptions{Defaults: sandbox.SessionOptions{Image: testImage, Runtime: e2eRuntime}, Logger: logger()}
	writable := sandbox.SessionOptions{WritableRootfs: true}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t.Cleanup(func() { // whatever a failed run left
		rt := newRT()
		assert.NoError(t, rt.Prune(context.Background()))
		_ = rt.Close()
	})

	t.Run("without keep", func(t *testing.T) {
		rt := newRT()
		m, err := sandbox.NewManager(ctx, rt, opts)
		require.NoError(t, err)
		s, err := m.Create(ctx, writable)
		require.NoError(t, err)
		sh(t, s, "true")
		require.Len(t, agentVolumes(t, labels), 1, "the session's agent is in the shared volume")
		require.NoError(t, m.Shutdown(ctx, false))
		require.NoError(t, rt.Close())
		assert.Empty(t, agentVolumes(t, labels), "a clean shutdown leaves no agent volume")
	})

	t.Run("with keep", func(t *testing.T) {
		rt := newRT()
		m, err := sandbox.NewManager(ctx, rt, opts)
		require.NoError(t, err)
		s, err := m.Create(ctx, writable)
		require.NoError(t, err)
		require.NoError(t, m.Shutdown(ctx, true))
		require.NoError(t, rt.Close())
		assert.Len(t, agentVolumes(t, labels), 1, "the kept session's agent volume stays")

		rt = newRT()
		m, err = sandbox.NewManager(ctx, rt, opts)
		require.NoError(t, err)
		s, err = m.Get(s.ID())
		require.NoError(t, err, "adopted")
		assert.Contains(t, sh(t, s, "echo adopted"), "adopted")
		require.NoError(t, m.Shutdown(ctx, false))
		require.NoError(t, rt.Close())
		assert.Empty(t, agentVolumes(t, labels))
	})
}
