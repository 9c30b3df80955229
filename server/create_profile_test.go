package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// A create names its profile to the manager (a pool serves only its own
// profile, decision 0041): the one asked for, else "default" when the
// server defines it, else none.
func TestCreateNamesItsProfile(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		profiles map[string]sandbox.SessionOptions
		ask      string
		want     string
	}{
		{map[string]sandbox.SessionOptions{"default": {}, "fuzz": {}}, "", "default"},
		{map[string]sandbox.SessionOptions{"default": {}, "fuzz": {}}, "fuzz", "fuzz"},
		{map[string]sandbox.SessionOptions{"fuzz": {}}, "", ""},
	} {
		ts := servertest.Start(t, withProfiles(tc.profiles))
		c, err := client.Dial(ctx, ts.URL, ts.Token, client.Options{})
		require.NoError(t, err)
		s, err := c.CreateSession(ctx, client.CreateOptions{Profile: tc.ask})
		require.NoError(t, err)
		assert.Equal(t, tc.want, fakeOf(t, ts, s.ID).CreateOptions().Profile, "asked for %q", tc.ask)
		require.NoError(t, c.Close())
	}
}
