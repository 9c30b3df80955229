package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/internal/config"
	"github.com/sandboxd/sandboxd/sandbox"
)

// A config file that does not parse refuses the start before anything
// touches Docker, naming file:line and the option.
func TestServeRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte("profiles:\n  fuzz:\n    limits:\n      memory: 2 GB\n"), 0o600))
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--config", path}, exitError, "sandboxd serve: " + path + `:4:15: profiles.fuzz.limits.memory: "2 GB" is not a size (e.g. 2GiB)` + "\n"},
		{[]string{"--config", filepath.Join(dir, "missing.yaml")}, exitError, "no such file or directory"},
		{[]string{"--skills-dir", "relative/skills"}, exitUsage, `--skills-dir "relative/skills" is not an absolute path`},
		{[]string{"--skills-dir", filepath.Join(dir, "none")}, exitUsage, "no such file or directory"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"serve", "--state-dir", t.TempDir()}, c.args...), stdio{in: &bytes.Buffer{}, out: &out, err: &errb})
		assert.Equal(t, c.code, code, errb.String())
		assert.Contains(t, errb.String(), c.want)
	}
}

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
	assert.Equal(t, []sandbox.PoolOptions{{Options: sandbox.SessionOptions{Image: "d"}, Size: 3}, {Options: sandbox.SessionOptions{Image: "f"}, Size: 2}},
		profilePools(f, serveConfig{}, quiet()))
	assert.Equal(t, []sandbox.PoolOptions{{Options: sandbox.SessionOptions{Image: "f"}, Size: 2}, {Options: sandbox.SessionOptions{Image: "d"}, Size: 5}},
		profilePools(f, serveConfig{pool: 5}, quiet()), "--pool replaces the default profile's")
	assert.Equal(t, []sandbox.PoolOptions{{Size: 4}}, profilePools(parse(t, ""), serveConfig{pool: 4}, quiet()), "no config: as before")
	assert.Empty(t, profilePools(parse(t, ""), serveConfig{}, quiet()))
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
	err := checkProfiles(context.Background(), f, sandbox.SessionOptions{Image: "img"}, noRunsc)
	require.Error(t, err)
	assert.Equal(t, "config.yaml:5:14: profiles.b.limits.memory: 1 MiB is below the minimum of 64 MiB", err.Error(), "options first")

	f = parse(t, "profiles:\n  a:\n    runtime: runsc\n  c:\n    runtime: kata\n")
	err = checkProfiles(context.Background(), f, sandbox.SessionOptions{Image: "img"}, noRunsc)
	require.EqualError(t, err, "config.yaml:3:5: profiles.a.runtime: the engine has no runtime runsc (it has: runc)")
	require.NoError(t, checkProfiles(context.Background(), parse(t, ""), sandbox.SessionOptions{Image: "img"}, noRunsc))
}
