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

// serviceImage starts a service at entry, as images that need one do: an
// ENTRYPOINT script that says what it runs and execs its CMD, python3's
// http.server on 127.0.0.1:8000 serving the WORKDIR /srv/www. On the
// default image (USER 1000), with no network; built once for the suite.
var serviceImage = sync.OnceValues(func() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	return buildImage(ctx, "service", "FROM "+defaultImage+"\nUSER root\n"+
		`RUN mkdir -p /srv/www && echo hello-from-the-entrypoint > /srv/www/index.html && `+
		`printf '#!/bin/sh\necho "entry: $*"\nexec "$@"\n' > /usr/local/bin/entry.sh && chmod 0755 /usr/local/bin/entry.sh`+"\n"+
		"WORKDIR /srv/www\nUSER 1000:1000\n"+
		`ENTRYPOINT ["/usr/local/bin/entry.sh"]`+"\n"+
		`CMD ["python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"]`+"\n")
})

// fetch waits, within the one call, for the service to answer on loopback.
const fetch = `for i in $(seq 200); do curl -sf http://127.0.0.1:8000/index.html && break; sleep 0.1; done`

// entrypoint: image starts the image's ENTRYPOINT + CMD before the first
// call, as the session user, in the image's WORKDIR, under the session's
// limits and hardening; the first call reaches its service on loopback;
// its output is in the log the agent can read; a killed service is
// restarted (and says so); it ends with the session, leaving nothing.
func TestEntrypointImageService(t *testing.T) {
	t.Parallel()
	needImage(t, defaultImage)
	img, err := serviceImage()
	require.NoError(t, err)
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Image: img, Entrypoint: sandbox.EntrypointImage})
	require.NoError(t, err)

	out := sh(t, s, fetch)
	assert.Contains(t, out, "hello-from-the-entrypoint\n", "the first call reaches the service on loopback")

	out = sh(t, s, `pid=$(pgrep -f 'http.server 8000'); echo "pid=$pid"; stat -c 'uid=%u' /proc/$pid; readlink /proc/$pid/cwd; `+
		`grep -c SANDBOXD_IMAGE_ /proc/$pid/environ; cat `+sandbox.EntrypointLog)
	t.Log(out)
	assert.Contains(t, out, "uid=1000\n/srv/www\n0\n", "the session user, the image's WORKDIR, none of the runtime's variables")
	assert.Contains(t, out, `started the entrypoint ["/usr/local/bin/entry.sh" "python3" "-m" "http.server" "8000" "--bind" "127.0.0.1"] in /srv/www`)
	assert.Contains(t, out, "entry: python3 -m http.server 8000 --bind 127.0.0.1\n", "its output is in the log")

	// Killed: it exits with a signal's code and is started again.
	out = shLong(t, s, `pkill -f 'http.server 8000'; for i in $(seq 300); do grep -q 'restart 1 of 3' `+sandbox.EntrypointLog+` && break; sleep 0.1; done; `+fetch+`; grep -o 'exited with code [0-9]*.*restart 1 of 3' `+sandbox.EntrypointLog)
	t.Log(out)
	assert.Contains(t, out, "hello-from-the-entrypoint\n", "restarted")
	assert.Contains(t, out, "exited with code 143")

	info := containerOf(t, s.ID())
	assert.Equal(t, "1000:1000", info.Config.User)
	assert.Equal(t, []string{sandbox.AgentPath}, []string(info.Config.Entrypoint), "the agent is the container's entrypoint")
	require.NoError(t, s.Close(ctxT(t)))
	assert.Zero(t, sessionResources(t, s.ID()), "nothing of the session stays")
}

// An entrypoint that ends by itself (the test image's CMD, bash, with no
// input) has finished: logged, not restarted; the session works as any.
func TestEntrypointImageThatEnds(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{})
	s, err := m.Create(ctxT(t), sandbox.SessionOptions{Entrypoint: sandbox.EntrypointImage})
	require.NoError(t, err)
	out := sh(t, s, "for i in $(seq 200); do grep -q finished "+sandbox.EntrypointLog+" && break; sleep 0.1; done; cat "+sandbox.EntrypointLog)
	t.Log(out)
	assert.Contains(t, out, `started the entrypoint ["/bin/bash"]`)
	assert.Contains(t, out, "exited with code 0")
	assert.Contains(t, out, "finished, not restarted")
	assert.NotContains(t, out, "restart 1")
}
