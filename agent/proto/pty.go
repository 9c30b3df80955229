package proto

import (
	"fmt"
	"strings"
)

// Methods and notifications of interactive PTYs (see doc.go). A PTY belongs
// to the connection that opened it: it ends with that connection.
const (
	MethodPTYOpen   = "pty/open"   // {pty, rows, cols, command, watch} -> {pid, command}
	MethodPTYInput  = "pty/input"  // {pty} + payload -> {}
	MethodPTYResize = "pty/resize" // {pty, rows, cols} -> {}
	MethodPTYClose  = "pty/close"  // {pty} -> PTYExit

	MethodPTYOutput = "pty/output" // agent -> host: {pty, seq} + payload
	MethodPTYExit   = "pty/exit"   // agent -> host: {pty, exit_code, signal, error}
	MethodPTYAck    = "pty/ack"    // host -> agent: {pty, bytes}
)

// Bounds of PTYs.
const (
	// DefaultMaxPTYs bounds the PTYs open at once in one agent (one
	// session), over all its connections.
	DefaultMaxPTYs = 8
	// PTYWindow is how many bytes of a PTY's output the agent sends before
	// the host acknowledges them (pty/ack). Past it the agent stops reading
	// the pty, the kernel's buffer fills and the program's writes block: a
	// slow reader slows the program down, as a slow terminal does, and no
	// side buffers more than the window.
	PTYWindow = 256 << 10
	// MaxPTYSize bounds rows and columns.
	MaxPTYSize = 1000
	// maxPTYArgs bounds a command's argv.
	maxPTYArgs = 256
)

// PTYOptions is what a PTY is opened with. Exactly one of Command (empty:
// the user's login shell) and Watch is used.
type PTYOptions struct {
	Rows int `json:"rows"`
	Cols int `json:"cols"`
	// Command is the argv to run; empty runs the session user's login
	// shell (from /etc/passwd; bash or sh when it names none) as a login
	// shell.
	Command []string `json:"command,omitempty"`
	// Watch follows the named tool's output read-only instead of running
	// a command (tools.Watcher: "terminal" is the agent's terminal).
	Watch string `json:"watch,omitempty"`
}

// Validate checks the options with messages for the client.
func (o PTYOptions) Validate() error {
	var errs []string
	if o.Watch == "" && (o.Rows < 1 || o.Rows > MaxPTYSize || o.Cols < 1 || o.Cols > MaxPTYSize) {
		errs = append(errs, fmt.Sprintf("rows and cols must be 1 to %d, got %dx%d", MaxPTYSize, o.Rows, o.Cols))
	}
	if o.Watch != "" && len(o.Command) > 0 {
		errs = append(errs, "a PTY either runs a command or watches a tool, not both")
	}
	if len(o.Command) > maxPTYArgs {
		errs = append(errs, fmt.Sprintf("command has %d arguments, the limit is %d", len(o.Command), maxPTYArgs))
	}
	if len(o.Command) > 0 && o.Command[0] == "" {
		errs = append(errs, "command[0] (the program) is empty")
	}
	for i, a := range o.Command {
		if strings.IndexByte(a, 0) >= 0 {
			errs = append(errs, fmt.Sprintf("command[%d] holds a NUL byte", i))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidParams, strings.Join(errs, "; "))
	}
	return nil
}

// PTYExit is how a PTY ended: its process's exit code (128+n after signal
// n, named in Signal), or Error when the PTY ended without one (the
// connection to the agent was lost). A watching PTY ends with code 0.
type PTYExit struct {
	ExitCode int    `json:"exit_code"`
	Signal   string `json:"signal,omitempty"`
	Error    string `json:"error,omitempty"`
}

// Params and results of the PTY methods.
type (
	// PTYOpenParams are the params of pty/open.
	PTYOpenParams struct {
		PTY uint64 `json:"pty"`
		PTYOptions
	}
	// PTYOpened is the result of pty/open: the process id in the sandbox
	// (0 when watching) and the argv it runs.
	PTYOpened struct {
		PID     int      `json:"pid,omitempty"`
		Command []string `json:"command,omitempty"`
	}
	// PTYRef names a PTY: the params of pty/close.
	PTYRef struct {
		PTY uint64 `json:"pty"`
	}
	// PTYInputParams are the params of pty/input.
	PTYInputParams struct {
		PTY  uint64 `json:"pty"`
		Data []byte `json:"data,omitempty"`
	}
	// PTYResizeParams are the params of pty/resize.
	PTYResizeParams struct {
		PTY  uint64 `json:"pty"`
		Rows int    `json:"rows"`
		Cols int    `json:"cols"`
	}
	// PTYOutputParams are the params of a pty/output notification.
	PTYOutputParams struct {
		PTY  uint64 `json:"pty"`
		Seq  uint64 `json:"seq"`
		Data []byte `json:"data,omitempty"`
	}
	// PTYExitParams are the params of a pty/exit notification.
	PTYExitParams struct {
		PTY uint64 `json:"pty"`
		PTYExit
	}
	// PTYAckParams are the params of a pty/ack notification.
	PTYAckParams struct {
		PTY   uint64 `json:"pty"`
		Bytes int    `json:"bytes"`
	}
)
