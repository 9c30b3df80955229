package bytesize

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "10GiB": 10 << 30, "10G": 10 << 30, "10GB": 10 << 30, "512MiB": 512 << 20,
		"1.5GiB": 3 << 29, "2TiB": 2 << 40, "64 MiB": 64 << 20, " 1KiB ": 1 << 10} {
		got, err := Parse(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
	for _, bad := range []string{"", "10", "GiB", "x GiB", "-1GiB", "1e30TiB", "10Gi", "+1GiB", "NaNGiB", "InfGiB", "0x10MiB"} {
		_, err := Parse(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseStrict(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "1073741824": 1 << 30, "2GiB": 2 << 30, "512MiB": 512 << 20, "1.5GiB": 3 << 29, "4KiB": 4 << 10, "1TiB": 1 << 40} {
		got, err := ParseStrict(in)
		if assert.NoError(t, err, in) {
			assert.Equal(t, want, got, in)
		}
	}
	for _, bad := range []string{"", "2 GB", "2GB", "2G", "2 GiB", " 2GiB", "-1", "+1", "-1GiB", "1e3", "GiB", "2gib", "9223372036854775808", "99999999TiB"} {
		_, err := ParseStrict(bad)
		if assert.Error(t, err, bad) {
			assert.Equal(t, `"`+bad+`" is not a size (e.g. 2GiB)`, err.Error())
		}
	}
}

func TestFormat(t *testing.T) {
	for v, want := range map[int64]string{0: "0", 10 << 30: "10GiB", 1536 << 20: "1536MiB", 1000: "1000", 2 << 40: "2TiB"} {
		assert.Equal(t, want, Format(v))
	}
}
