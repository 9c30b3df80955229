package wsproto

// PTYs: a program on a pseudo-terminal of its own in a session (beside the
// agent's terminal tool, not inside it), or a read-only live view of that
// terminal tool (Follow). A PTY belongs to the connection that opened it
// and ends with it. docs/websocket-protocol.md has the details and
// examples.
const (
	MethodPTYOpen   = "pty.open"
	MethodPTYInput  = "pty.input"
	MethodPTYResize = "pty.resize"
	MethodPTYClose  = "pty.close"

	// NotifyPTYOutput carries output of a PTY, numbered from 1 per PTY.
	NotifyPTYOutput = "pty.output"
	// NotifyPTYExit says a PTY ended; it follows its last pty.output.
	NotifyPTYExit = "pty.exit"
)

// MaxPTYInput bounds the data of one pty.input (a paste is sent in
// pieces).
const MaxPTYInput = 256 << 10

// PTYOpenParams are the params of pty.open. Rows and Cols (1 to 1000) are
// required unless Follow. Command is the argv to run (default: the session
// user's login shell, as a login shell); TERM is xterm-256color. Follow
// opens a read-only view of the agent's terminal tool instead: what it
// prints, raw (colours kept), each command shown as "$ command".
type PTYOpenParams struct {
	SessionRef
	Rows    int      `json:"rows,omitempty"`
	Cols    int      `json:"cols,omitempty"`
	Command []string `json:"command,omitempty"`
	Follow  bool     `json:"follow,omitempty"`
}

// PTYOpenResult is the result of pty.open: the PTY's id on this connection,
// the process id in the sandbox and the argv it runs (neither when
// following).
type PTYOpenResult struct {
	PTYID   string   `json:"pty_id"`
	PID     int      `json:"pid,omitempty"`
	Command []string `json:"command,omitempty"`
}

// PTYInputParams are the params of pty.input: bytes for the program, as
// typed (base64 on the wire). Inputs on one connection apply in the order
// the server receives them, so a client need not wait for one answer
// before sending the next.
type PTYInputParams struct {
	PTYID string `json:"pty_id"`
	Data  []byte `json:"data"`
}

// PTYResizeParams are the params of pty.resize; the program gets SIGWINCH.
// Resizes keep their order with inputs.
type PTYResizeParams struct {
	PTYID string `json:"pty_id"`
	Rows  int    `json:"rows"`
	Cols  int    `json:"cols"`
}

// PTYRef names a PTY: the params of pty.close.
type PTYRef struct {
	PTYID string `json:"pty_id"`
}

// PTYStatus is how a PTY ended: the result of pty.close and the body of
// pty.exit. ExitCode is the program's (128+n after signal n, named in
// Signal; 0 for a follower); Error says why a PTY ended without one (its
// session ended, the connection to the sandbox was lost).
type PTYStatus struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
}

// PTYOutput is the params of a pty.output notification: raw bytes of the
// terminal (escape sequences included; base64 on the wire), Seq numbering
// them 1, 2, 3... per PTY. The server sends the next only once the client's
// socket took the previous ones: a client that reads slowly slows the
// program down, as a slow terminal does, and nothing is dropped. (A
// follower never slows the agent's terminal: one that falls more than
// 1 MiB behind loses the oldest output and is told so in the output.)
type PTYOutput struct {
	PTYID string `json:"pty_id"`
	Seq   uint64 `json:"seq"`
	Data  []byte `json:"data"`
}

// PTYExit is the params of a pty.exit notification.
type PTYExit struct {
	PTYID string `json:"pty_id"`
	PTYStatus
}
