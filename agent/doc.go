// Package agent is `sandboxd agent`, the process inside each sandbox that
// owns the session's tool executors: it serves them to the host over the
// protocol of package agent/proto (Server, conn, the methods' handlers),
// extracts uploads and writes downloads confined to the workspace, runs the
// session's PTYs, and, as the container's init, reaps orphans (Init, Run).
// It also holds the agent's side of the direct path (direct/dial) and the
// small relays `sandboxd agent-proxy` and `sandboxd relay` run in the
// sandbox (Proxy, Relay).
//
// The host's side of the protocol, the client the daemon calls the agent
// with, is package agent/client (agentclient).
package agent
