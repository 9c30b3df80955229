package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/config"
)

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func parse(t *testing.T, src string) *config.File {
	t.Helper()
	f, err := config.Parse("config.yaml", []byte(src))
	require.NoError(t, err)
	return f
}

// Each profile with a pool gets one of its options; --pool N is the
// default profile's pool (the config's default, else the flags' defaults).
func TestProfilePools(t *testing.T) {
	f := parse(t, "profiles:\n  default:\n    image: d\n    pool: 3\n  fuzz:\n    image: f\n    pool: 2\n  none:\n    image: n\n")
	assert.Equal(t, []sandbox.PoolOptions{{Options: sandbox.SessionOptions{Image: "d"}, Profile: "default", Size: 3}, {Options: sandbox.SessionOptions{Image: "f"}, Profile: "fuzz", Size: 2}},
		profilePools(f, Config{}, quiet()))
	assert.Equal(t, []sandbox.PoolOptions{{Options: sandbox.SessionOptions{Image: "f"}, Profile: "fuzz", Size: 2}, {Options: sandbox.SessionOptions{Image: "d"}, Profile: "default", Size: 5}},
		profilePools(f, Config{Pool: Pool{5, 5}}, quiet()), "--pool replaces the default profile's")
	assert.Equal(t, []sandbox.PoolOptions{{Size: 4}}, profilePools(parse(t, ""), Config{Pool: Pool{4, 4}}, quiet()), "no config: as before")
	assert.Empty(t, profilePools(parse(t, ""), Config{}, quiet()))

	// pool: {min, max, idle, shared} and --pool MIN:MAX follow demand.
	f = parse(t, "profiles:\n  default:\n    image: d\n    pool: {min: 1, max: 8, idle: 2m, shared: true}\n  fuzz:\n    image: f\n    pool: {min: 0, max: 3}\n")
	assert.Equal(t, []sandbox.PoolOptions{{Options: sandbox.SessionOptions{Image: "d"}, Profile: "default", Shared: true, Size: 1, Max: 8, Idle: 2 * time.Minute},
		{Options: sandbox.SessionOptions{Image: "f"}, Profile: "fuzz", Max: 3}}, profilePools(f, Config{}, quiet()))
	assert.Equal(t, []sandbox.PoolOptions{{Options: sandbox.SessionOptions{Image: "f"}, Profile: "fuzz", Max: 3},
		{Options: sandbox.SessionOptions{Image: "d"}, Profile: "default", Shared: true, Size: 2, Max: 20, Idle: 2 * time.Minute}},
		profilePools(f, Config{Pool: Pool{2, 20}}, quiet()), "--pool MIN:MAX replaces the default profile's bounds, not its idle or sharing")
}

// --pool takes N or MIN:MAX.
func TestPoolFlag(t *testing.T) {
	for in, want := range map[string]Pool{"0": {0, 0}, "4": {4, 4}, "2:20": {2, 20}, "0:5": {0, 5}, "3:3": {3, 3}} {
		var p Pool
		require.NoError(t, p.Set(in), in)
		assert.Equal(t, want, p, in)
	}
	for in, msg := range map[string]string{"x": "want N (a fixed pool) or MIN:MAX", "2:": "want N", "-1": "want sizes from 0", "1:1001": "to 1000", "5:2": "MAX is below MIN"} {
		var p Pool
		err := p.Set(in)
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), msg, in)
	}
	p := Pool{2, 20}
	assert.Equal(t, "2:20", p.String())
}

// Every profile is resolved over the flags' defaults at start, and the
// runtimes profiles name are checked with the engine.
func TestCheckProfiles(t *testing.T) {
	f := parse(t, "profiles:\n  a:\n    runtime: runsc\n  b:\n    limits: {memory: 1MiB}\n  c:\n    runtime: kata\n")
	noRunsc := func(_ context.Context, name string) error {
		if name == "runsc" {
			return errors.New("the engine has no runtime runsc (it has: runc)")
		}
		return nil
	}
	err := checkProfiles(context.Background(), f, sandbox.SessionOptions{Image: "img"}, noRunsc, nil)
	require.Error(t, err)
	assert.Equal(t, "config.yaml:5:14: profiles.b.limits.memory: 1 MiB is below the minimum of 64 MiB", err.Error(), "options first")

	f = parse(t, "profiles:\n  a:\n    runtime: runsc\n  c:\n    runtime: kata\n")
	err = checkProfiles(context.Background(), f, sandbox.SessionOptions{Image: "img"}, noRunsc, nil)
	require.EqualError(t, err, "config.yaml:3:5: profiles.a.runtime: the engine has no runtime runsc (it has: runc)")
	require.NoError(t, checkProfiles(context.Background(), parse(t, ""), sandbox.SessionOptions{Image: "img"}, noRunsc, nil))
}
