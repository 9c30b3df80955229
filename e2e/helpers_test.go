package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
	"github.com/sandboxd/sandboxd/tools"
)

const labelTest = "sandboxd.e2e.test"

var unsafeLabel = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// testLabels scope a test's resources: its run and its name, so a test's
// manager never adopts or reaps another test's sessions.
func testLabels(t *testing.T) map[string]string {
	return map[string]string{labelRun: runID, labelTest: unsafeLabel.ReplaceAllString(t.Name(), "_")}
}

func logger() *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("SANDBOXD_E2E_VERBOSE") != "" {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}

// newRuntime makes a Docker runtime scoped to the test, pruned and closed
// when the test ends.
func newRuntime(t *testing.T, change ...func(*sdocker.Options)) *sdocker.Runtime {
	t.Helper()
	opts := sdocker.Options{AgentBinary: agentBinary, Labels: testLabels(t), Logger: logger(), DiskDir: diskDir, DirectDir: directDir}
	for _, c := range change {
		c(&opts)
	}
	rt, err := sdocker.New(context.Background(), opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		// After the test's managers (their cleanups run first): the
		// runtime's shared agent volume (copy mode, writable roots).
		assert.NoError(t, rt.Prune(context.Background()))
		rt.Close()
	})
	return rt
}

// e2eRuntime is the OCI runtime of every e2e session that names none
// (SANDBOXD_E2E_RUNTIME, e.g. runsc: the suite against gVisor); empty is
// the engine's default.
var e2eRuntime = os.Getenv("SANDBOXD_E2E_RUNTIME")

// newManager makes a manager over rt with the test image as default (and
// SANDBOXD_E2E_RUNTIME's runtime) and a fast reaper; it is shut down
// (sessions removed) when the test ends.
func newManager(t *testing.T, rt sandbox.Runtime, opts sandbox.ManagerOptions) *sandbox.Manager {
	t.Helper()
	if opts.Defaults.Image == "" {
		opts.Defaults.Image = testImage
	}
	if opts.Defaults.Runtime == "" {
		opts.Defaults.Runtime = e2eRuntime
	}
	if opts.ReapInterval == 0 {
		opts.ReapInterval = 100 * time.Millisecond
	}
	if opts.Logger == nil {
		opts.Logger = logger()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := sandbox.NewManager(ctx, rt, opts)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		assert.NoError(t, m.Shutdown(ctx, false))
	})
	dumpOnFailure(t) // runs before the shutdown above
	return m
}

// ctxT bounds a test's calls: a guard on a hang, not a timing assert (a
// loaded machine is slow, issue 23).
func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// call runs a tool and fails the test on a transport error.
func call(t *testing.T, s *sandbox.Session, tool string, args any) string {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	obs, err := s.Call(ctxT(t), tool, raw, nil)
	require.NoError(t, err, "%s %s", tool, raw)
	require.False(t, obs.IsError, "%s %s: %s", tool, raw, obs.Text())
	return obs.Text()
}

// tryCall is call for a goroutine other than the test's: it returns what
// went wrong instead of stopping the test, since t.FailNow (require) must run
// on the test's own goroutine. A tool-level error is in obs.IsError.
func tryCall(ctx context.Context, s *sandbox.Session, tool string, args any) (*tools.Observation, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	obs, err := s.Call(ctx, tool, raw, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", tool, raw, err)
	}
	return obs, nil
}

// sh runs a terminal command and returns the observation text.
func sh(t *testing.T, s *sandbox.Session, command string) string {
	t.Helper()
	return call(t, s, "terminal", map[string]any{"command": command})
}

// containerOf inspects the container of a session from outside.
func containerOf(t *testing.T, id string) container.InspectResponse {
	t.Helper()
	ctrs, err := docker.ContainerList(ctxT(t), container.ListOptions{All: true,
		Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+id))})
	require.NoError(t, err)
	require.Len(t, ctrs, 1, "containers of session %s", id)
	info, err := docker.ContainerInspect(ctxT(t), ctrs[0].ID)
	require.NoError(t, err)
	return info
}

// sessionResources counts what the engine holds of a session.
func sessionResources(t *testing.T, id string) int {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+id))
	ctrs, err := docker.ContainerList(ctxT(t), container.ListOptions{All: true, Filters: f})
	require.NoError(t, err)
	vols, err := docker.VolumeList(ctxT(t), volume.ListOptions{Filters: f})
	require.NoError(t, err)
	nets, err := docker.NetworkList(ctxT(t), network.ListOptions{Filters: f})
	require.NoError(t, err)
	return len(ctrs) + len(vols.Volumes) + len(nets)
}

// needImage skips t when ref is not on the engine, unless
// SANDBOXD_E2E_REQUIRE_IMAGES is set (`make test` sets it after building
// every image): then a missing image fails the test instead of hiding it.
func needImage(t *testing.T, ref string) {
	t.Helper()
	if _, err := docker.ImageInspect(ctxT(t), ref); err != nil {
		if os.Getenv("SANDBOXD_E2E_REQUIRE_IMAGES") != "" {
			t.Fatalf("%s is not on the engine although SANDBOXD_E2E_REQUIRE_IMAGES is set: %v", ref, err)
		}
		t.Skipf("%s is not on the engine (build it with `make image`): %v", ref, err)
	}
}
