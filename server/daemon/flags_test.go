package daemon

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSizeFlag(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "10GiB": 10 << 30, "10G": 10 << 30, "512MiB": 512 << 20, "1.5GiB": 3 << 29, "2TiB": 2 << 40, "64 MiB": 64 << 20} {
		var s Size
		if assert.NoError(t, s.Set(in), in) {
			assert.Equal(t, want, int64(s), in)
		}
	}
	for _, bad := range []string{"", "10", "GiB", "x GiB", "-1GiB", "1e30TiB", "10Gi"} {
		var s Size
		require.Error(t, s.Set(bad), bad)
	}
	for v, want := range map[int64]string{0: "0", 10 << 30: "10GiB", 1536 << 20: "1536MiB", 1000: "1000"} {
		s := Size(v)
		assert.Equal(t, want, s.String())
	}
}
