// Package sandbox runs sessions: one hardened container per session whose main
// process is the in-sandbox agent (`sandboxd agent`), reached through one
// long-lived framed stream on which tool calls run concurrently.
//
// The Manager owns sessions. It creates them (from a warm pool when one holds
// a container started with the same options), closes them (explicitly, when
// they stay idle past their idle timeout, or on Shutdown), notices when their
// container dies, and after a daemon restart adopts the sessions that are
// still alive and removes everything else it finds under its labels.
//
// A Runtime is the container engine behind the Manager. The Docker runtime
// lives in sandbox/docker; tests use fakes. The Runtime knows containers,
// volumes and networks; the Manager knows sessions and the agent protocol.
// What runs in a sandbox is decided here, not by a runtime: the Manager
// builds the agent's command line and tool specs (AgentCommand) and hands
// them to Runtime.Start in the Spec, and Runtime.Connect runs ProxyCommand.
//
// Lifecycle of a session:
//
//	starting -> ready -> closing -> closed
//	   |          |
//	   +----------+----> failed -> closing -> closed
//
// A failed session (its container died, its agent stopped answering) keeps
// its error; calls fail fast with it. Its resources stay until Close, the idle
// reaper, or Shutdown removes them.
package sandbox
