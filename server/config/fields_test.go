package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// TestImageEnvironmentKeys: shell_init and entrypoint are profile keys
// (one line each in sessionFields); a value Validate does not know is
// reported at its line, naming the key.
func TestImageEnvironmentKeys(t *testing.T) {
	f, err := Parse("config.yaml", []byte("profiles:\n  swe:\n    image: task:1\n    shell_init: image\n    entrypoint: image\n  plain:\n    shell_init: none\n"))
	require.NoError(t, err)
	swe, err := f.Lookup("swe")
	require.NoError(t, err)
	assert.Equal(t, sandbox.ShellInitImage, swe.Options.ShellInit)
	assert.Equal(t, sandbox.EntrypointImage, swe.Options.Entrypoint)
	require.NoError(t, f.Check(sandbox.SessionOptions{Image: "img"}))

	f, err = Parse("config.yaml", []byte("profiles:\n  a:\n    shell_init: bashrc\n    entrypoint: yes\n"))
	require.NoError(t, err)
	err = f.Check(sandbox.SessionOptions{Image: "img"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `config.yaml:3:5: profiles.a.shell_init: "bashrc" is not "none" or "image"`)
	assert.Contains(t, err.Error(), `config.yaml:4:5: profiles.a.entrypoint: "yes" is not "none" or "image"`)

	_, err = Parse("config.yaml", []byte("profiles:\n  a:\n    shell_init: [image]\n"))
	assert.ErrorContains(t, err, "profiles.a.shell_init: want a single value, not a list")
}
