package docker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
)

// TestBuildContainerImageEnv: shell_init and entrypoint: image tell the
// agent the image's USER and HOME, and its ENTRYPOINT + CMD and WORKDIR,
// in its environment; without them the environment has none of it.
func TestBuildContainerImageEnv(t *testing.T) {
	task := imageFacts{home: "/root", user: "", workdir: "/testbed",
		command: imageCommand([]string{"/docker-entrypoint.sh"}, []string{"python3", "-m", "http.server", "8000"})}
	envOf := func(o sandbox.SessionOptions, img imageFacts) []string {
		t.Helper()
		r, err := o.Resolve(sandbox.SessionOptions{Image: "task:1"})
		require.NoError(t, err)
		cs, err := testRuntime(false).buildContainer(sandbox.Spec{SessionID: "s", Options: r, Command: agentCmd(t, r)}, "none", plan(t, "s", r, img))
		require.NoError(t, err)
		var out []string
		for _, kv := range cs.config.Env {
			if strings.HasPrefix(kv, sandbox.ImageEnvPrefix) {
				out = append(out, kv)
			}
		}
		return out
	}
	assert.Empty(t, envOf(sandbox.SessionOptions{}, task))
	assert.Equal(t, []string{"SANDBOXD_IMAGE_HOME=/root", "SANDBOXD_IMAGE_USER="},
		envOf(sandbox.SessionOptions{ShellInit: sandbox.ShellInitImage}, task))
	assert.Equal(t, []string{"SANDBOXD_IMAGE_USER=app"},
		envOf(sandbox.SessionOptions{ShellInit: sandbox.ShellInitImage}, imageFacts{user: "app"}), "no HOME: the agent looks the user up")

	env := envOf(sandbox.SessionOptions{Entrypoint: sandbox.EntrypointImage}, task)
	require.Len(t, env, 1)
	v, ok := strings.CutPrefix(env[0], proto.EnvEntrypoint+"=")
	require.True(t, ok, env[0])
	ep, err := proto.ParseEntrypoint(v)
	require.NoError(t, err)
	assert.Equal(t, proto.Entrypoint{Argv: []string{"/docker-entrypoint.sh", "python3", "-m", "http.server", "8000"}, Dir: "/testbed"}, ep)

	env = envOf(sandbox.SessionOptions{Entrypoint: sandbox.EntrypointImage}, imageFacts{})
	assert.Equal(t, []string{proto.EnvEntrypoint + `={"argv":[]}`}, env, "an image that names nothing: the agent says so in the log")
	assert.Equal(t, []string{"a", "b"}, imageCommand(nil, []string{"a", "b"}))
}
