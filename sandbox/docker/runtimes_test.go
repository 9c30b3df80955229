package docker

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

func TestEngineRuntimesCheck(t *testing.T) {
	var e engineRuntimes
	require.NoError(t, e.check("", "bridge"), "the engine's default needs no probe")
	err := e.check("runsc", "none")
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions, "unknown runtimes fail closed")
	require.ErrorContains(t, err, "cannot tell whether the engine has \"runsc\"")

	e.set(map[string]engineRuntime{"runc": {path: "runc"}, "io.containerd.runc.v2": {path: "runc"}}, "runc", nil)
	require.NoError(t, e.check("runc", "bridge"))
	err = e.check("runsc", "none")
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	require.ErrorContains(t, err, `runtime: the engine has no runtime "runsc" (it has "io.containerd.runc.v2", "runc"; default "runc")`)

	e.set(nil, "", assert.AnError)
	require.NoError(t, e.check("runc", "none"), "a failed probe keeps what was learnt")
	assert.Equal(t, []string{"io.containerd.runc.v2", "runc"}, e.list())

	// make runsc registers gVisor without its network: only network none.
	gv := engineRuntime{path: "/usr/bin/runsc", args: []string{"--network=none", "--oci-seccomp"}}
	e.set(map[string]engineRuntime{"runc": {path: "runc"}, "runsc": gv}, "runc", nil)
	require.NoError(t, e.check("runsc", "none"))
	require.NoError(t, e.check("runsc", ""))
	err = e.check("runsc", "bridge")
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	require.ErrorContains(t, err, `network: "bridge" cannot be had under the runtime "runsc": the engine runs it with --network=none`)
	require.NoError(t, e.check("runc", "bridge"))

	// gVisor without --oci-seccomp would drop sandboxd's seccomp profile.
	e.set(map[string]engineRuntime{"runc": {path: "runc"}, "gvisor": {path: "/usr/local/bin/runsc"}}, "runc", nil)
	err = e.check("gvisor", "none")
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	require.ErrorContains(t, err, `runtime: the engine runs "gvisor" (gVisor) without --oci-seccomp`)
}

// fakeEngine answers /info with the runtimes in *names, counting the calls.
func fakeEngine(t *testing.T, names *atomic.Pointer[[]string], infos *atomic.Int32) *Runtime {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		infos.Add(1)
		rts := map[string]any{}
		for _, n := range *names.Load() {
			rts[n] = map[string]any{"path": n, "runtimeArgs": []string{"--network=none", "--oci-seccomp"}}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"Runtimes": rts, "DefaultRuntime": "runc"})
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+srv.Listener.Addr().String()), client.WithVersion("1.41"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return &Runtime{cli: cli, opts: Options{CallTimeout: DefaultCallTimeout}}
}

// A runtime registered after New (make runsc reloads the engine) is found
// by looking again; one still missing fails, naming what the engine has.
func TestCheckRuntimeProbesAgain(t *testing.T) {
	var names atomic.Pointer[[]string]
	var infos atomic.Int32
	names.Store(&[]string{"runc"})
	r := fakeEngine(t, &names, &infos)
	ctx := context.Background()
	r.probeRuntimes(ctx)
	assert.Equal(t, []string{"runc"}, r.Runtimes())

	require.NoError(t, r.CheckRuntime(ctx, ""))
	require.NoError(t, r.CheckRuntime(ctx, "runc"))
	assert.Equal(t, int32(1), infos.Load(), "a known runtime costs no engine call")

	err := r.CheckRuntime(ctx, "runsc")
	require.ErrorIs(t, err, sandbox.ErrInvalidOptions)
	require.ErrorContains(t, err, `no runtime "runsc" (it has "runc"; default "runc")`)
	assert.Equal(t, int32(2), infos.Load(), "a missing runtime is looked up again")

	names.Store(&[]string{"runc", "runsc"})
	require.NoError(t, r.CheckRuntime(ctx, "runsc"))
	require.ErrorContains(t, r.checkRuntime(ctx, "runsc", "internal"), "runs it with --network=none", "the runtime's args are learnt too")
	assert.Equal(t, []string{"runc", "runsc"}, r.Runtimes())
}

func TestBuildContainerRuntime(t *testing.T) {
	for _, name := range []string{"", "runsc"} {
		o := resolved(t, sandbox.SessionOptions{Runtime: name})
		spec := sandbox.Spec{SessionID: "sid", Options: o, Labels: sandbox.SessionLabels("sid", o, "", testTime), Command: agentCmd(t, o)}
		cs, err := testRuntime(false).buildContainer(spec, "none", layout{})
		require.NoError(t, err)
		assert.Equal(t, name, cs.host.Runtime)
	}
}
