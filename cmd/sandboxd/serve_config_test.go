package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
		{[]string{"--allow-network", "sandboxd-abc"}, exitUsage, `--allow-network "sandboxd-abc" names one of sandboxd's own networks`},
		{[]string{"--allow-network", "corp,host"}, exitUsage, `--allow-network "host" is never allowed`},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"serve", "--state-dir", t.TempDir()}, c.args...), stdio{in: &bytes.Buffer{}, out: &out, err: &errb})
		assert.Equal(t, c.code, code, errb.String())
		assert.Contains(t, errb.String(), c.want)
	}
}
