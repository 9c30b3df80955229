package sandbox

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMCPServersValidate(t *testing.T) {
	o := SessionOptions{MCPServers: []MCPServer{
		{Name: "memory", Image: "sandboxd-mcp-memory"},
		{Name: "web", Image: "x", Transport: "http", Port: 8080},
		{Name: "old", Image: "x", Transport: "sse", Port: 80, Start: "lazy"},
	}}
	r, err := o.Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, MCPServer{Name: "memory", Image: "sandboxd-mcp-memory", Transport: TransportStdio, Start: StartEager,
		Limits: SidecarLimits{Memory: DefaultMemory, CPUs: DefaultCPUs, Pids: DefaultPids}}, r.MCPServers[0],
		"a sidecar's limits default to the sandbox's")
	assert.Equal(t, "/mcp", r.MCPServers[1].Path)
	assert.Equal(t, "/sse", r.MCPServers[2].Path)
	assert.Empty(t, o.MCPServers[0].Transport, "Resolve does not write through to the caller's slice")
	egress := SessionOptions{MCPServers: []MCPServer{
		{Name: "web", Image: "x", Network: NetworkBridge, AllowHosts: []string{"example.com", "192.0.2.0/24"}},
		{Name: "off", Image: "x", Network: NetworkNone},
	}}
	r, err = egress.Resolve(SessionOptions{})
	require.NoError(t, err, "a sidecar may ask for egress, narrowed or not")
	assert.Equal(t, []string{"example.com", "192.0.2.0/24"}, r.MCPServers[0].AllowHosts)
	own := SessionOptions{Limits: Limits{Memory: 512 << 20, Pids: 100}, MCPServers: []MCPServer{
		{Name: "m", Image: "x", Limits: SidecarLimits{Memory: 128 << 20, CPUs: 0.5}},
	}}
	r, err = own.Resolve(SessionOptions{})
	require.NoError(t, err)
	assert.Equal(t, SidecarLimits{Memory: 128 << 20, CPUs: 0.5, Pids: 100}, r.MCPServers[0].Limits,
		"declared limits are kept, the rest are the sandbox's")

	bad := SessionOptions{MCPServers: []MCPServer{
		{Name: "Mem_ory", Image: ""},
		{Name: "a", Image: "x", Transport: "http"},
		{Name: "a", Image: "x", Transport: "ws", Start: "soon", Env: map[string]string{"1X": "y"}},
		{Name: "b", Image: "x", Port: 80, Workspace: "yes"},
		{Name: "c", Image: "x", User: "root", Limits: SidecarLimits{Memory: 16 << 20, CPUs: 0.001, Pids: 2}},
		{Name: "d", Image: "x", Network: NetworkInternal},
		{Name: "e", Image: "x", AllowHosts: []string{"example.com"}},
		{Name: "f", Image: "x", Network: NetworkBridge, AllowHosts: []string{"a b", "example.com", "EXAMPLE.com"}},
	}}
	_, err = bad.Resolve(SessionOptions{})
	require.ErrorIs(t, err, ErrInvalidOptions)
	for _, want := range []string{
		`mcp_servers[0].name: "Mem_ory" is not a server name`,
		`mcp_servers[0].image: is empty`,
		`mcp_servers[1].port: 0: want the port the server listens on`,
		`mcp_servers[2].name: "a" is declared twice`,
		`mcp_servers[2].transport: "ws" is not "stdio", "http" or "sse"`,
		`mcp_servers[2].start: "soon" is not "eager" or "lazy"`,
		`mcp_servers[2].env: "1X" is not an environment variable name`,
		`mcp_servers[3].port: port and path are for the http and sse transports, not stdio`,
		`mcp_servers[3].workspace: "yes" is not "ro" (read-only) or "rw" (read-write)`,
		`mcp_servers[4].user: "root": want "image" (the image's user, root included) or nothing (1000:1000)`,
		`mcp_servers[4].limits.memory: 16 MiB is below the minimum of 64 MiB`,
		`mcp_servers[4].limits.cpus: 0.001 is below the minimum of 0.01`,
		`mcp_servers[4].limits.pids: 2 is below the minimum of 32`,
		`mcp_servers[5].network: "internal": want "bridge" (egress) or nothing (none)`,
		`mcp_servers[6].allow_hosts: needs network "bridge" (network "" is not a private bridge`,
		`mcp_servers[7].allow_hosts: [0]: `,
		`mcp_servers[7].allow_hosts: "EXAMPLE.com" is listed twice`,
	} {
		assert.Contains(t, err.Error(), want)
	}
}

func TestSidecarSecrets(t *testing.T) {
	srv := MCPServer{Name: "m", Env: map[string]string{"A": "1"}, Secrets: []MCPSecret{{Name: "TOKEN", Env: "B"}, {Name: "C"}}}
	env, err := sidecarEnv(srv, func(n string) (string, bool) { return "v-" + n, n != "missing" })
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"A": "1", "B": "v-TOKEN", "C": "v-C"}, env)
	assert.Equal(t, map[string]string{"A": "1"}, srv.Env, "the declaration is not written to")

	srv.Secrets = []MCPSecret{{Name: "missing"}}
	_, err = sidecarEnv(srv, func(n string) (string, bool) { return "", false })
	require.ErrorContains(t, err, `no secret "missing"`)
	_, err = sidecarEnv(srv, nil)
	require.ErrorContains(t, err, "declares secrets, and this daemon has none")

	bad := SessionOptions{MCPServers: []MCPServer{{Name: "m", Image: "x", Env: map[string]string{"A": "1"},
		Secrets: []MCPSecret{{Name: "1x"}, {Name: "ok", Env: "A"}}}}}
	_, err = bad.Resolve(SessionOptions{})
	require.ErrorContains(t, err, `mcp_servers[0].secrets[0].name: "1x" is not a secret name`)
	require.ErrorContains(t, err, `mcp_servers[0].secrets[1].env: A is set in env too`)
}
