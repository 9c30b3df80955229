// Package agentclient is the host's side of the agent protocol (package
// agent/proto): the client the daemon calls `sandboxd agent` in a sandbox
// with. Client multiplexes tool calls, file transfers and PTYs over one
// connection; AcceptDirect and Client.DialDirect set up the direct path.
// It runs in the daemon and imports nothing of package agent, which is the
// process inside the sandbox.
//
// The directory is agent/client; the package is named agentclient so that
// it does not clash with the top-level client package (the Go client of
// sandboxd's API) where both are imported: import it as
//
//	agentclient "github.com/sandboxd/sandboxd/agent/client"
package agentclient
