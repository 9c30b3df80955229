package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/docker/docker/api"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/versions"
	"github.com/docker/docker/api/types/volume"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
)

// Copy mode (what a remote engine gets): the agent binary travels into a
// shared volume over the API instead of a bind mount of a host path.
func TestCopyAgentMode(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, func(o *sdocker.Options) { o.CopyAgent = true })
	t.Cleanup(func() { assert.NoError(t, rt.Prune(context.Background())) })
	m := newManager(t, rt, sandbox.ManagerOptions{})
	for range 2 { // the second start reuses the filled volume
		s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
		require.NoError(t, err)
		assert.Contains(t, sh(t, s, "ls -l /.sandboxd/sandboxd; touch /.sandboxd/x 2>&1"), "Read-only file system")
		for _, mt := range containerOf(t, s.ID()).Mounts {
			if mt.Destination == sandbox.AgentDir {
				assert.Equal(t, "volume", string(mt.Type))
				assert.False(t, mt.RW)
			}
		}
		require.NoError(t, s.Close(ctxT(t)))
	}
}

// A runtime starting with another binary removes the agent volumes of its
// predecessors that nothing uses (a daemon upgrade would pile them up), and
// keeps its own.
func TestStaleAgentVolumesPruned(t *testing.T) {
	t.Parallel()
	rt := newRuntime(t, func(o *sdocker.Options) { o.CopyAgent = true })
	m := newManager(t, rt, sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	require.NoError(t, s.Close(ctxT(t)))
	scope := sdocker.ScopeOf(testLabels(t))
	labels := map[string]string{sdocker.LabelScope: scope, sandbox.LabelManaged: "true", sdocker.LabelAgent: "0000older"}
	for k, v := range testLabels(t) {
		labels[k] = v
	}
	old, err := docker.VolumeCreate(ctxT(t), volume.CreateOptions{Name: "sandboxd-agent-" + scope + "-0000older", Labels: labels})
	require.NoError(t, err)

	newRuntime(t, func(o *sdocker.Options) { o.CopyAgent = true }) // the next daemon
	vols, err := docker.VolumeList(ctxT(t), volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", sdocker.LabelAgent))})
	require.NoError(t, err)
	var names []string
	for _, v := range vols.Volumes {
		if strings.HasPrefix(v.Name, "sandboxd-agent-"+scope+"-") {
			names = append(names, v.Name)
		}
	}
	require.Len(t, names, 1, "the predecessor's is gone, this binary's kept: %v", names)
	assert.NotEqual(t, old.Name, names[0])
}

func TestNetworkModes(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	for _, mode := range []string{sandbox.NetworkBridge, sandbox.NetworkInternal} {
		s, err := m.Create(ctxT(t), sandbox.SessionOptions{Network: mode})
		require.NoError(t, err, mode)
		nets, err := docker.NetworkList(ctxT(t), network.ListOptions{
			Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+s.ID()))})
		require.NoError(t, err)
		require.Len(t, nets, 1, "a private network per session")
		assert.Equal(t, mode == sandbox.NetworkInternal, nets[0].Internal, mode)
		assert.Equal(t, nets[0].Name, string(containerOf(t, s.ID()).HostConfig.NetworkMode))
		assert.Contains(t, sh(t, s, "cat /proc/net/dev"), "eth0", mode)
		require.NoError(t, s.Close(ctxT(t)))
		assert.Zero(t, sessionResources(t, s.ID()), "the network goes with the session")
	}
}

func TestDiskLimit(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Limits: sandbox.Limits{Disk: 32 << 20, Memory: 256 << 20}})
	require.NoError(t, err)
	out := sh(t, s, "df -k /workspace | tail -1; dd if=/dev/zero of=/workspace/big bs=1M count=64 2>&1; echo dd=$?; id -u; ls -ldn /workspace")
	t.Log(out)
	assert.Contains(t, out, "No space left on device")
	assert.NotContains(t, out, "dd=0")
	assert.Contains(t, out, " 1000 ", "the workspace belongs to the session user")
	out = sh(t, s, `df -k ~ | tail -1; stat -c 'home=%u:%g' ~; touch ~/x && echo home=ok`)
	assert.Contains(t, out, "tmpfs", "HOME is capped too")
	assert.Contains(t, out, "home=1000:1000")
	assert.Contains(t, out, "home=ok")
}

func TestMissingImageIsAClearError(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	_, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: "sandboxd-no-such-image:nope"})
	require.ErrorIs(t, err, sandbox.ErrStart)
	require.ErrorIs(t, err, sandbox.ErrImageNotFound)
	assert.Contains(t, err.Error(), `image "sandboxd-no-such-image:nope" is not on the engine`)
	assert.Empty(t, m.List())
}

// Options only the engine can check (a network it lacks, more CPUs than it
// has) are the client's error, said clearly, with nothing left behind.
func TestEngineRefusedOptionsAreInvalidOptions(t *testing.T) {
	t.Parallel()
	// A network the operator lists (the only kind a session may join
	// besides none, bridge and internal) that the engine lacks.
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{Networks: []string{"e2e-no-such-network"}})
	_, err := m.Create(ctxT(t), sandbox.SessionOptions{Network: "e2e-no-such-network"})
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	assert.Contains(t, err.Error(), `the engine has no network named "e2e-no-such-network"`)
	assert.NotContains(t, err.Error(), "image", "not mistaken for a missing image")

	_, err = m.Create(ctxT(t), sandbox.SessionOptions{Limits: sandbox.Limits{CPUs: 4096}})
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	t.Log(err)
	assert.Contains(t, err.Error(), "CPU")
	assert.Empty(t, m.List())
	f := filters.NewArgs(filters.Arg("label", labelTest+"="+unsafeLabel.ReplaceAllString(t.Name(), "_")))
	ctrs, err := docker.ContainerList(ctxT(t), container.ListOptions{All: true, Filters: f})
	require.NoError(t, err)
	vols, err := docker.VolumeList(ctxT(t), volume.ListOptions{Filters: f})
	require.NoError(t, err)
	assert.Empty(t, ctrs, "containers left by refused creates")
	assert.Empty(t, vols.Volumes, "volumes left by refused creates")
}

// Reclaim removes what a crashed daemon left without a live container.
func TestReclaimRemovesOrphans(t *testing.T) {
	t.Parallel()
	labels := testLabels(t)
	labels[sandbox.LabelManaged] = "true"
	labels[sdocker.LabelScope] = sdocker.ScopeOf(testLabels(t))
	labels[sandbox.LabelSession] = "orphan-" + runID
	_, err := docker.VolumeCreate(ctxT(t), volume.CreateOptions{Name: "sandboxd-orphan-" + runID + "-workspace", Labels: labels})
	require.NoError(t, err)
	require.Equal(t, 1, sessionResources(t, "orphan-"+runID))
	newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	assert.Zero(t, sessionResources(t, "orphan-"+runID))
}

// A helper container left by a daemon that crashed while fixing volume
// ownership (never started, session labels) goes with its volumes.
func TestReclaimRemovesLeftoverHelper(t *testing.T) {
	t.Parallel()
	id := "helper-" + runID
	labels := testLabels(t)
	labels[sandbox.LabelManaged] = "true"
	labels[sdocker.LabelScope] = sdocker.ScopeOf(testLabels(t))
	labels[sandbox.LabelSession] = id
	labels[sdocker.LabelHelper] = "chown"
	vol := "sandboxd-" + id + "-workspace"
	_, err := docker.VolumeCreate(ctxT(t), volume.CreateOptions{Name: vol, Labels: labels})
	require.NoError(t, err)
	_, err = docker.ContainerCreate(ctxT(t), &container.Config{Image: testImage, Entrypoint: []string{sandbox.AgentPath}, Labels: labels},
		&container.HostConfig{NetworkMode: "none", Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: sandbox.WorkspaceDir}}},
		nil, nil, "sandboxd-"+id+"-chown")
	require.NoError(t, err)
	require.Equal(t, 2, sessionResources(t, id))
	newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	assert.Zero(t, sessionResources(t, id))
}

// A server without --label (the default scope) does not list, so can never
// adopt or reap, the resources of a server with labels on the same engine:
// `sandboxd serve` started beside a test run once removed the run's sessions.
func TestDefaultScopeDoesNotSeeLabelledSessions(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	require.NotZero(t, sessionResources(t, s.ID()))

	plain, err := sdocker.New(ctxT(t), sdocker.Options{AgentBinary: agentBinary, Logger: logger()})
	require.NoError(t, err)
	defer plain.Close()
	all, err := plain.List(ctxT(t)) // read-only: leaves whatever else runs on this engine alone
	require.NoError(t, err)
	for _, r := range all {
		assert.NotEqual(t, s.ID(), r.SessionID, "%s %s is listed outside its scope", r.Kind, r.Name)
	}
}

// The start-up log names the API version negotiated with the engine, not
// the client's maximum.
func TestStartupLogNegotiatedAPIVersion(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	newRuntime(t, func(o *sdocker.Options) { o.Logger = slog.New(slog.NewJSONHandler(&buf, nil)) })
	sv, err := docker.ServerVersion(ctxT(t))
	require.NoError(t, err)
	var ready map[string]any
	for _, line := range strings.Split(buf.String(), "\n") {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["msg"] == "docker runtime ready" {
			ready = rec
		}
	}
	require.NotNil(t, ready, "no 'docker runtime ready' record in:\n%s", buf.String())
	assert.Equal(t, sv.APIVersion, ready["engine_api"])
	want := sv.APIVersion
	if c := api.DefaultVersion; versions.LessThan(c, want) {
		want = c
	}
	assert.Equal(t, want, ready["api"], "the negotiated version: the lower of the client's and the engine's")
}

// syncBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
