package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// transfer_tools turns a profile's MCP upload and download tools on; it is
// off unless written, and only true or false is taken.
func TestTransferTools(t *testing.T) {
	f, err := Parse("c.yaml", []byte("profiles:\n  harness:\n    transfer_tools: true\n  agent: {}\n"))
	require.NoError(t, err)
	assert.True(t, f.Profiles["harness"].TransferTools)
	assert.False(t, f.Profiles["agent"].TransferTools)

	_, err = Parse("c.yaml", []byte("profiles:\n  a:\n    transfer_tools: yes please\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "c.yaml:3:21: profiles.a.transfer_tools: want true or false")

	_, err = Parse("c.yaml", []byte("profiles:\n  a:\n    transfer_tool: true\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "transfer_tools", "an unknown key's error lists the known ones")
}
