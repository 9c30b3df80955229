// Package proto is the protocol between the sandboxd daemon (the host) and
// `sandboxd agent`, the process inside each sandbox that owns the session's
// tool executors: frames, method names, params and results, error codes.
// It imports nothing of sandboxd. Package agent is the agent side (Server),
// package agent/client the host side (agentclient.Client).
//
// # Transport
//
// One long-lived byte stream per connection (the agent's stdin/stdout over a
// Docker attach or exec stream, or a unix socket inside the container). Each
// message is a frame: a 4-byte big-endian length, then that many bytes of
// JSON. If the length's top bit (1<<31) is set, the body is instead
// [4-byte big-endian JSON length][JSON][payload]: the frame's binary
// payload, used for file chunks and streamed output so bulk bytes are not
// base64 in JSON (10x faster; peers that cannot send it may put the bytes
// base64-encoded in a "data" field instead). A body is at most MaxFrameSize
// (32 MiB); a larger length makes the agent send an error frame and close
// the connection, as the stream is then out of sync (stray text on the
// stream looks like that). A body that is not JSON is answered with an
// id-less CodeParse error and skipped.
//
// # Frames
//
//	request       {"id": 7, "method": "tools/call", "params": {...}}   host -> agent
//	response      {"id": 7, "result": {...}}                           agent -> host
//	              {"id": 7, "error": {"code": -32001, "message": "..."}}
//	notification  {"method": "cancel", "params": {"id": 7}}            host -> agent
//	              {"method": "fs/abort", "params": {"transfer": "up-3"}}
//	              {"method": "stream", "params": {"id": 7, "seq": 1}} + payload    agent -> host
//	              {"method": "pty/output", "params": {"pty": 1, "seq": 1}} + payload   agent -> host
//	              {"method": "pty/exit", "params": {"pty": 1, "exit_code": 0}}        agent -> host
//	              {"method": "pty/ack", "params": {"pty": 1, "bytes": 4096}}          host -> agent
//
// Ids are chosen by the host, unique per connection, from 1. Requests run
// concurrently on the agent (a goroutine each, at most MaxConcurrentCalls
// at once), so responses come in any order; every request gets exactly one
// response. A "stream" notification carries output of a running tools/call
// that asked for it, numbered from 1 per call; all of a call's stream
// notifications precede its response. "cancel" cancels the context of a
// request in flight: it then answers, with CodeCancelled or with what the
// tool returned on stopping (the terminal's output up to the interrupt);
// the host's client has already stopped waiting for that answer.
//
// # Methods
//
//	ping              {}                                  -> {}
//	tools/list        {}                                  -> [Definition]
//	tools/call        {name, arguments, stream}           -> Observation
//	fs/upload/begin   {path}                              -> {transfer}
//	fs/upload/chunk   {transfer, seq} + payload           -> {}
//	fs/upload/end     {transfer}                          -> {files, dirs, links, bytes}
//	fs/download/begin {path}                              -> {transfer}
//	fs/download/read  {transfer}                          -> {eof} + payload
//	shutdown          {}                                  -> {} (then the agent closes)
//	skills/install    {}                                  -> {} (the skills' pending installers ran)
//	pty/open          {pty, rows, cols, command, watch}   -> {pid, command}
//	pty/input         {pty} + payload                     -> {}
//	pty/resize        {pty, rows, cols}                   -> {}
//	pty/close         {pty}                               -> {exit_code, signal}
//
// # PTYs
//
// A PTY is a program on a pseudo-terminal of its own, beside the terminal
// tool (default: the user's login shell, TERM=xterm-256color), or with
// watch a read-only view of a tool's output (tools.Watcher: the terminal
// tool's screen). The host picks its id; it belongs to the connection and
// ends with it. At most MaxPTYs are open in an agent. pty/input and
// pty/resize run on the read loop, so they apply in the order they came.
// Output comes as "pty/output" notifications {pty, seq} + payload, at most
// PTYWindow bytes ahead of the host's "pty/ack" {pty, bytes}: a host that
// does not keep up makes the agent stop reading the pty, and the program's
// writes block, as on a slow terminal (a watched tool is never slowed: its
// view drops the oldest output past 1 MiB and says so). On pty/close a
// running program is hung up (the master closes); when it exits by itself
// the output still in the pty follows. Either way every process of the
// PTY's session gets SIGHUP, then SIGKILL after a second, then one
// "pty/exit" {pty, exit_code, signal}.
//
// A tool failure the model should read (bad arguments, a missing file) is a
// successful response whose Observation has is_error; a protocol error means
// the call could not happen (unknown tool, agent shutting down, cancelled, a
// tool panic, which the agent recovers from).
//
// Transfers are tar streams in chunks of ChunkSize, each chunk a request
// acknowledged before the next (flow control without extra machinery). The
// agent extracts uploads itself, confined to the workspace: absolute or ".."
// entries, device files and symlinks leading outside are refused. A download
// is a tar whose top entry is the base name of the path, as with `docker cp`.
//
// Errors: one table (Codes in errors.go, plus the tool set's two rows that
// each side adds with Table.With) maps typed errors to codes; on the host an
// error response matches its sentinels with errors.Is, e.g.
// errors.Is(err, tools.ErrUnknownTool). A connection that ends fails every
// pending call with an error wrapping ErrDisconnected.
package proto
