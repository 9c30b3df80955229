package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// linkImage is the test image with links over folders, as a task image may
// hold them: /opt/rootl -> /, /opt/etcl -> /etc, and a real /opt/real.
// Built once for the suite.
var linkImage = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	return buildImage(ctx, "links", "FROM "+testImage+"\nUSER 0\n"+
		"RUN mkdir -p /opt/real && echo seed > /opt/real/f && ln -s / /opt/rootl && ln -s /etc /opt/etcl\nUSER 1000:1000\n")
})

// TestEditablePathThroughLink (T3): an editable path with a symbolic link
// in the image among its parents is refused, naming the link and its
// target, whoever the session user is; the checks were lexical, and a
// writable volume landed on the link's target (/usr/local, /etc/ssl). A
// path of real folders is still accepted and seeded.
func TestEditablePathThroughLink(t *testing.T) {
	t.Parallel()
	img, err := linkImage()
	require.NoError(t, err)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	for _, tc := range []struct {
		name, path, want string
		user             string
	}{
		{"root link, hardened", "/opt/rootl/usr/local", `/opt/rootl is a symbolic link in the image (to "/")`, ""},
		{"etc link, hardened", "/opt/etcl/ssl", `/opt/etcl is a symbolic link in the image (to "/etc")`, ""},
		{"root link, image user", "/opt/rootl/usr/local", `/opt/rootl is a symbolic link in the image (to "/")`, sandbox.UserImage},
		{"the link itself, image user", "/opt/etcl", `/opt/etcl is a symbolic link in the image (to "/etc")`, sandbox.UserImage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: img, User: tc.user, EditablePaths: []string{tc.path}})
			if err == nil {
				out := sh(t, s, "grep ' /usr/local \\| /etc/ssl \\| /etc ' /proc/self/mountinfo | cut -d' ' -f5,6")
				_ = s.Close(context.Background())
				t.Fatalf("editable path %s accepted; mounts in the sandbox: %q", tc.path, out)
			}
			require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
			assert.ErrorContains(t, err, "editable_paths: "+tc.want)
		})
	}
	t.Run("real folders", func(t *testing.T) {
		s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: img, EditablePaths: []string{"/opt/real"}})
		require.NoError(t, err)
		defer s.Close(context.Background())
		assert.Contains(t, sh(t, s, "cat /opt/real/f && echo more >> /opt/real/f && echo written"), "seed\nwritten")
	})
}
