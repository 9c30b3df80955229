package bash

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func encodeMarker(c markerCodec, seq, exit, bg, cwd, path string) string {
	return string(c.begin) + seq + us + exit + us + bg + us + cwd + us + path + string(c.end)
}

func TestMarkerScanner(t *testing.T) {
	codec := newMarkerCodec("0123456789abcdef")
	other := newMarkerCodec("fedcba9876543210")
	m1 := encodeMarker(codec, "3", "0", "", "/work", "/bin:/usr/bin")
	m2 := encodeMarker(codec, "4", "130", "77", "/tmp/a b", "")
	cases := []struct {
		name    string
		in      string
		out     string
		markers []marker
	}{
		{"none", "hello\n", "hello\n", nil},
		{"one", "hi\n" + m1 + "after", "hi\nafter", []marker{{seq: 3, exit: 0, bgPID: -1, cwd: "/work", path: "/bin:/usr/bin"}}},
		{"two", "a" + m1 + "b" + m2, "ab", []marker{
			{seq: 3, exit: 0, bgPID: -1, cwd: "/work", path: "/bin:/usr/bin"},
			{seq: 4, exit: 130, bgPID: 77, cwd: "/tmp/a b", path: ""},
		}},
		{"other nonce is output", "x" + encodeMarker(other, "1", "0", "", "/", "") + "y", "x" + encodeMarker(other, "1", "0", "", "/", "") + "y", nil},
		{"raw PS1 echoed is output", "x" + encodeMarker(codec, "${__sbx_seq:-}", "$?", "${!:-}", "${PWD:-}", "${PATH:-}") + "y",
			"x" + encodeMarker(codec, "${__sbx_seq:-}", "$?", "${!:-}", "${PWD:-}", "${PATH:-}") + "y", nil},
		{"begin without end at end is held", "a" + string(codec.begin) + "1", "a", nil},
		{"partial begin is held", "abc\x1esbx:0123", "abc", nil},
		{"lone RS is output", "a\x1eb", "a\x1eb", nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for _, chunk := range []int{len(c.in) + 1, 1, 7} {
				s := markerScanner{codec: codec}
				var out strings.Builder
				var got []marker
				for i := 0; i < len(c.in); i += chunk {
					s.feed([]byte(c.in[i:min(i+chunk, len(c.in))]), func(b []byte) { out.Write(b) }, func(m marker) {
						got = append(got, m)
					})
				}
				assert.Equal(t, c.out, out.String(), "chunk %d", chunk)
				assert.Equal(t, c.markers, got, "chunk %d", chunk)
			}
		})
	}
}

func TestMarkerScannerGivesUpOnHugeBegin(t *testing.T) {
	codec := newMarkerCodec("0123456789abcdef")
	s := markerScanner{codec: codec}
	var out []byte
	in := string(codec.begin) + strings.Repeat("z", maxMarkerLen)
	s.feed([]byte(in), func(b []byte) { out = append(out, b...) }, func(marker) { t.Fatal("no marker expected") })
	require.Equal(t, in, string(out)+string(s.flush()))
}

func TestPartialPrefix(t *testing.T) {
	pat := []byte("\x1esbx:ab")
	assert.Equal(t, 0, partialPrefix([]byte("hello"), pat))
	assert.Equal(t, 1, partialPrefix([]byte("hello\x1e"), pat))
	assert.Equal(t, 4, partialPrefix([]byte("he\x1esbx"), pat))
	assert.Equal(t, 0, partialPrefix([]byte("\x1esbq"), pat))
	assert.Equal(t, 2, partialPrefix([]byte("\x1e\x1es"), pat))
}
