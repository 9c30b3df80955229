package docker

import (
	"testing"

	"github.com/docker/docker/api/types/network"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// A listed network is joined only if the engine's network of that name is
// named exactly so (its inspect also matches IDs and their prefixes), is
// not one of the engine's predefined networks and carries no label of
// sandboxd's.
func TestCheckJoinable(t *testing.T) {
	for _, tc := range []struct {
		name string
		ask  string
		n    network.Inspect
		want string // "" joinable
	}{
		{"operator's network", "corp", network.Inspect{Name: "corp", ID: "0123456789ab", Driver: "bridge"}, ""},
		{"operator's labels", "corp", network.Inspect{Name: "corp", Driver: "bridge", Labels: map[string]string{"team": "ci"}}, ""},
		{"an id prefix", "012345", network.Inspect{Name: "corp", ID: "0123456789ab", Driver: "bridge"}, "never by an ID"},
		{"the engine's bridge by id", "f4b3683bad4a", network.Inspect{Name: "bridge", ID: "f4b3683bad4a00", Driver: "bridge"}, "never by an ID"},
		{"host driver", "hostnet", network.Inspect{Name: "hostnet", Driver: "host"}, "predefined"},
		{"null driver", "nonet", network.Inspect{Name: "nonet", Driver: "null"}, "predefined"},
		{"a session's network", "mine", network.Inspect{Name: "mine", Driver: "bridge", Labels: map[string]string{sandbox.LabelSession: "x"}}, "sandboxd's own"},
		{"another scope's", "mine", network.Inspect{Name: "mine", Driver: "bridge", Labels: map[string]string{LabelScope: "x"}}, "sandboxd's own"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkJoinable(tc.ask, tc.n)
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
			assert.Contains(t, err.Error(), "network: ")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}
