package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Bad numbers are refused before anything starts (no token file, no Docker).
func TestServeRefusesBadNumbers(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--pool", "-1"}, `invalid value "-1" for flag -pool: "-1": want sizes from 0 (no warm pool) to 1000`},
		{[]string{"--pool", "5:2"}, `"5:2": MAX is below MIN`},
		{[]string{"--disk-mb", "-1"}, "--disk-mb -1: want 0 (no limit) or a size in MiB"},
		{[]string{"--max-concurrent-starts", "0"}, "--max-concurrent-starts 0"},
		{[]string{"--disk-quota", "10"}, "want a size with a unit"},
		{[]string{"--disk-quota", "-1GiB"}, "want a size with a unit"},
		{[]string{"--disk-quota", "1MiB"}, "--disk-quota 1MiB: want 0 (none) or 16 MiB to 16384 GiB"},
		{[]string{"--disk-backend", "zfs"}, `--disk-backend "zfs": want auto, loop, tmpfs or none`},
		{[]string{"--disk-backend", "loop", "--disk-mb", "64"}, "--disk-mb sizes tmpfs volumes"},
		{[]string{"--disk-backend", "loop", "--disk-quota", "0"}, "give a size, or --disk-backend none"},
		{[]string{"--disk-backend", "tmpfs"}, "--disk-backend tmpfs needs --disk-mb N"},
		{[]string{"--disk-backend", "none", "--disk-mb", "64"}, "drop one of them"},
		{[]string{"--max-message-bytes", "100"}, "--max-message-bytes 100: want at least 1048576"},
		{[]string{"--max-message-bytes", "-1"}, "--max-message-bytes -1"},
		{[]string{"--runtime", "/usr/bin/runsc"}, `--runtime "/usr/bin/runsc": invalid options: runtime: "/usr/bin/runsc" is not a runtime name`},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"serve", "--state-dir", t.TempDir()}, c.args...), stdio{in: &bytes.Buffer{}, out: &out, err: &errb})
		assert.Equal(t, exitUsage, code, errb.String())
		assert.Contains(t, errb.String(), c.want)
	}
}
