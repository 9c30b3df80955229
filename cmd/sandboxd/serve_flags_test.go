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
		{[]string{"--pool", "-1"}, "--pool -1"},
		{[]string{"--disk-mb", "-1"}, "--disk-mb -1: want 0 (no limit) or a size in MiB"},
		{[]string{"--max-concurrent-starts", "0"}, "--max-concurrent-starts 0"},
		{[]string{"--max-message-bytes", "100"}, "--max-message-bytes 100: want at least 1048576"},
		{[]string{"--max-message-bytes", "-1"}, "--max-message-bytes -1"},
	} {
		var out, errb bytes.Buffer
		code := run(append([]string{"serve", "--state-dir", t.TempDir()}, c.args...), stdio{in: &bytes.Buffer{}, out: &out, err: &errb})
		assert.Equal(t, exitUsage, code, errb.String())
		assert.Contains(t, errb.String(), c.want)
	}
}
