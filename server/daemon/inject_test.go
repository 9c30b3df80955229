package daemon

import (
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/sandbox/egress/inject"
	"github.com/sandboxd/sandboxd/server/config"
)

const injectConfig = `profiles:
  gh:
    network: bridge
    allow_hosts: [api.github.com]
    env: {KEEP: "1"}
    inject:
      - host: api.github.com
        header: Authorization
        value: "Bearer ${GITHUB_TOKEN}"
  plain: {}
`

func TestSetupInjection(t *testing.T) {
	file, err := config.Parse("c.yaml", []byte(injectConfig))
	require.NoError(t, err)
	state := t.TempDir()
	secrets := func(n string) (string, bool) {
		if n == "GITHUB_TOKEN" {
			return "ghp_realvalue123", true
		}
		return "", false
	}
	j, err := setupInjection(file, state, secrets, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotNil(t, j)
	ph := file.Profiles["gh"].Options.Env["GITHUB_TOKEN"]
	assert.Regexp(t, `^sandboxd-placeholder-GITHUB_TOKEN-[0-9a-f]{24}$`, ph)
	assert.Equal(t, "1", file.Profiles["gh"].Options.Env["KEEP"])
	assert.Empty(t, file.Profiles["plain"].Options.Env)
	st, err := os.Stat(filepath.Join(state, injectDir, inject.KeyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	assert.Equal(t, []string{"api.github.com"}, j.auth.Hosts())
	assert.NotContains(t, file.Profiles["gh"].Options.Key(), "ghp_realvalue123")

	in, err := j.injector(file.Profiles["gh"].Options)
	require.NoError(t, err)
	assert.True(t, in.Intercepts("api.github.com"))
	none, err := j.injector(sandbox.SessionOptions{})
	require.NoError(t, err)
	assert.Nil(t, none)
	tr := j.trust(state)
	assert.Equal(t, j.auth.CertPEM(), tr.CertPEM)

	// No profile injects: nothing is made.
	plain, err := config.Parse("c.yaml", []byte("profiles:\n  a: {}\n"))
	require.NoError(t, err)
	j, err = setupInjection(plain, t.TempDir(), secrets, nil, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	assert.Nil(t, j)
	assert.Nil(t, j.trust(state))
}

func TestSetupInjectionErrors(t *testing.T) {
	src := `profiles:
  gh:
    network: bridge
    allow_hosts: [api.github.com]
    env: {GITHUB_TOKEN: mine}
    inject:
      - host: api.github.com
        header: Authorization
        value: "Bearer ${GITHUB_TOKEN}"
      - host: api.github.com
        header: X-Other
        value: "${MISSING}"
      - host: api.github.com
        header: X-Bad
        value: "${BAD}"
`
	file, err := config.Parse("c.yaml", []byte(src))
	require.NoError(t, err)
	secrets := func(n string) (string, bool) {
		switch n {
		case "GITHUB_TOKEN":
			return "v", true
		case "BAD":
			return "line\nbreak-value", true
		}
		return "", false
	}
	_, err = setupInjection(file, t.TempDir(), secrets, nil, slog.New(slog.DiscardHandler))
	require.Error(t, err)
	msg := err.Error()
	for _, want := range []string{
		`c.yaml:12:9: profiles.gh.inject[1].value: the daemon has no secret MISSING (serve --secrets-file, or SANDBOXD_SECRET_MISSING in its environment)`,
		`c.yaml:15:9: profiles.gh.inject[2].value: secret BAD holds characters a header value cannot`,
		`c.yaml:5:5: profiles.gh.env: GITHUB_TOKEN is the environment variable of a secret inject sends`,
	} {
		assert.Contains(t, msg, want)
	}
	assert.NotContains(t, msg, "break-value")
}
