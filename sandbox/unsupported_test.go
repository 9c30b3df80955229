package sandbox

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkingRuntime is a fake runtime that cannot do network bridge.
type checkingRuntime struct{ *fakeRuntime }

func (checkingRuntime) CheckOptions(o SessionOptions) error {
	if o.Network == NetworkBridge {
		return &UnsupportedError{Runtime: "fake", Feature: "network: bridge", Detail: "not here"}
	}
	return nil
}

// A runtime's OptionsChecker refuses a session before anything of it is
// made: the create fails with the *UnsupportedError, the runtime is never
// asked to start it; other sessions start.
func TestOptionsCheckerRefusesBeforeStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := checkingRuntime{newFakeRuntime(t)}
		m := newTestManager(t, rt, ManagerOptions{})
		_, err := m.Create(context.Background(), SessionOptions{Network: NetworkBridge})
		require.ErrorIs(t, err, ErrUnsupported)
		var ue *UnsupportedError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, "fake", ue.Runtime)
		assert.Contains(t, err.Error(), "network: bridge is not supported on the fake runtime: not here")
		assert.Zero(t, rt.starts.Load())
		assert.Empty(t, m.List())

		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		assert.Equal(t, StateReady, s.State())
		assert.Equal(t, int64(1), rt.starts.Load(), "the count counts starts")
	})
}

func TestUnsupportedErrorText(t *testing.T) {
	err := error(&UnsupportedError{Runtime: "kubernetes", Feature: "mcp_servers"})
	assert.Equal(t, "mcp_servers is not supported on the kubernetes runtime", err.Error())
	require.ErrorIs(t, err, ErrUnsupported)
	assert.NotErrorIs(t, err, ErrInvalidOptions)
}
