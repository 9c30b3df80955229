package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A session joins an engine network only if the operator listed it by
// name: never sandboxd's own networks (another session's, a sidecar's),
// the engine's predefined ones, an ID or a prefix of one, even if listed.
func TestNetworkChoice(t *testing.T) {
	const listed = "corp-proxy"
	allowed := []string{listed, "3f2a1b9c0d4e"}
	for _, tc := range []struct {
		name    string
		network string
		want    string // "" accepted; else in the error
	}{
		{"none", NetworkNone, ""},
		{"bridge mode", NetworkBridge, ""},
		{"internal mode", NetworkInternal, ""},
		{"operator-listed", listed, ""},
		{"listed name that looks like an ID", "3f2a1b9c0d4e", ""},
		{"another session's network", "sandboxd-abc", "one of sandboxd's own networks"},
		{"another session's sidecar network", "sandboxd-mcp-x", "one of sandboxd's own networks"},
		{"a sidecar's egress network", "sandboxd-egress-abc-web", "one of sandboxd's own networks"},
		{"upper case own", "Sandboxd-abc", "one of sandboxd's own networks"},
		{"a network id", "0123456789ab", "not allowed on this server"},
		{"a full network id", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", "not allowed on this server"},
		{"an id prefix", "3f2a1b", "not allowed on this server"},
		{"host", "host", "never allowed"},
		{"default", "default", "never allowed"},
		{"unlisted", "other-net", "not allowed on this server"},
		{"container mode", "container:abc", "not a network name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := SessionOptions{Network: tc.network}.Resolve(SessionOptions{Image: "img"})
			if err == nil {
				err = r.CheckNetworkAllowed(allowed)
			}
			if tc.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidOptions)
			assert.Contains(t, err.Error(), "network: ")
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The refusal says what is allowed and how the operator allows more.
func TestNetworkChoiceError(t *testing.T) {
	err := SessionOptions{Network: "sandboxd-victim"}.CheckNetworkAllowed(nil)
	require.ErrorIs(t, err, ErrInvalidOptions)
	assert.Equal(t, `invalid options: network: "sandboxd-victim" is not allowed on this server: ask for "none", "bridge" or "internal" `+
		`(an engine network is joined only if the operator lists it: serve --allow-network NAME, or allow_networks in the config)`, err.Error())
	err = SessionOptions{Network: "lab"}.CheckNetworkAllowed([]string{"corp", "ci"})
	assert.Contains(t, err.Error(), `ask for "none", "bridge", "internal" or one of the networks the operator lists (corp, ci)`)
	assert.Contains(t, err.Error(), "--allow-network NAME")
}

// The operator's list itself refuses what no list may hold, and the
// defaults and pools are held to it.
func TestManagerOptionsNetworks(t *testing.T) {
	for _, n := range []string{"sandboxd-abc", "sandboxd-mcp-x", "bridge", "host", "default", "none", "internal", "a b", ""} {
		o := ManagerOptions{Networks: []string{n}}
		err := o.setDefaults()
		require.Error(t, err, "%q", n)
		assert.Contains(t, err.Error(), "networks[0]: ")
	}
	o := ManagerOptions{Networks: []string{"corp"}, Defaults: SessionOptions{Image: "img", Network: "corp"},
		Pools: []PoolOptions{{Options: SessionOptions{Network: "corp"}, Size: 1}}}
	require.NoError(t, o.setDefaults())
	o = ManagerOptions{Defaults: SessionOptions{Image: "img"}, Pools: []PoolOptions{{Options: SessionOptions{Network: "corp"}, Size: 1}}}
	err := o.setDefaults()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `pools[0].options: invalid options: network: "corp" is not allowed on this server`)
	o = ManagerOptions{Defaults: SessionOptions{Image: "img", Network: "corp"}}
	assert.ErrorContains(t, o.setDefaults(), `defaults: network: "corp" is not allowed`)
}
