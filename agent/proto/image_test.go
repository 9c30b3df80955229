package proto

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseEntrypoint(t *testing.T) {
	e := Entrypoint{Argv: []string{"/docker-entrypoint.sh", "python3", "-m", "http.server"}, Dir: "/srv"}
	got, err := ParseEntrypoint(e.Encode())
	require.NoError(t, err)
	assert.Equal(t, e, got)

	got, err = ParseEntrypoint(`{"argv":[]}`)
	require.NoError(t, err)
	assert.Empty(t, got.Argv, "an image without ENTRYPOINT and CMD")

	for in, want := range map[string]string{
		`[]`:                             "cannot unmarshal",
		`{"argv":"x"}`:                   "cannot unmarshal",
		`{"argv":["a\u0000b"]}`:          "NUL",
		`{"argv":["a"],"dir":"rel"}`:     "not an absolute path",
		strings.Repeat(" ", 65<<10) + "": "above the limit",
	} {
		_, err := ParseEntrypoint(in)
		require.ErrorContains(t, err, want, in[:min(len(in), 30)])
		require.ErrorContains(t, err, EnvEntrypoint)
	}
}
