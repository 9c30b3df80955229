package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A pool serves only its own profile unless `pool.shared` says otherwise.
func TestParsePoolShared(t *testing.T) {
	f, err := Parse("c.yaml", []byte("profiles:\n  own:\n    pool: {min: 1, max: 2}\n  lent:\n    pool: {min: 1, max: 1, shared: true}\n  fixed:\n    pool: 3\n"))
	require.NoError(t, err)
	assert.False(t, f.Profiles["own"].PoolShared)
	assert.True(t, f.Profiles["lent"].PoolShared)
	assert.False(t, f.Profiles["fixed"].PoolShared)

	_, err = Parse("c.yaml", []byte("profiles:\n  a:\n    pool: {min: 1, max: 1, shared: yes please}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "profiles.a.pool.shared: want true or false")
	_, err = Parse("c.yaml", []byte("profiles:\n  a:\n    pool: {min: 1, max: 1, sharing: true}\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "profiles.a.pool.sharing: unknown key (known here: idle, max, min, shared)")
}
