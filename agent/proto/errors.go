package proto

import (
	"context"
	"errors"
	"io/fs"
)

// Sentinel errors. Errors returned by the host's client wrap them, so
// callers test with errors.Is whichever side of the wire the failure came
// from.
var (
	// ErrDisconnected: the connection to the agent ended (agent exited or
	// crashed, container killed, stream closed). Every pending call fails
	// with an error wrapping it.
	ErrDisconnected = errors.New("agent connection ended")
	// ErrFrameTooLarge: a frame above MaxFrameSize.
	ErrFrameTooLarge = errors.New("frame too large")
	// ErrShuttingDown: the agent is shutting down and takes no new work.
	ErrShuttingDown = errors.New("agent is shutting down")
	// ErrBusy: too many requests are in flight on the agent.
	ErrBusy = errors.New("agent is busy")
	// ErrOutsideWorkspace: a path (or an archive entry or symlink in it)
	// leads outside the workspace root.
	ErrOutsideWorkspace = errors.New("path is outside the workspace")
	// ErrBadArchive: an uploaded tar stream is malformed or holds an entry
	// the agent refuses (device file, absolute or ".." name).
	ErrBadArchive = errors.New("invalid archive")
	// ErrUnknownTransfer: an upload or download id the agent does not know
	// (finished, aborted, or from another connection).
	ErrUnknownTransfer = errors.New("unknown transfer")
	// ErrSkillInstall: a dependency installer of the session's skills
	// failed (skills/install); the message says which and why.
	ErrSkillInstall = errors.New("skill installer failed")
	// ErrUnknownPTY: a PTY id the agent does not know on this connection
	// (it ended, or was opened on another connection).
	ErrUnknownPTY = errors.New("unknown pty")
	// ErrParse, ErrInvalidRequest, ErrMethodNotFound, ErrInvalidParams and
	// ErrInternal are protocol failures; ErrInternal includes a tool panic.
	ErrParse          = errors.New("frame is not valid JSON")
	ErrInvalidRequest = errors.New("invalid request")
	ErrMethodNotFound = errors.New("method not found")
	ErrInvalidParams  = errors.New("invalid params")
	ErrInternal       = errors.New("internal error")
)

// Protocol error codes. The JSON-RPC 2.0 range is used for the generic
// failures so the numbers look familiar; -32000..-32099 are ours.
const (
	CodeParse            = -32700
	CodeInvalidRequest   = -32600
	CodeMethodNotFound   = -32601
	CodeInvalidParams    = -32602
	CodeInternal         = -32603
	CodeUnknownTool      = -32001
	CodeClosed           = -32002
	CodeCancelled        = -32003
	CodeDeadline         = -32004
	CodeBusy             = -32005
	CodeFrameTooLarge    = -32006
	CodeOutsideWorkspace = -32010
	CodeBadArchive       = -32011
	CodeNotFound         = -32012
	CodePermission       = -32013
	CodeExists           = -32014
	CodeUnknownTransfer  = -32015
	CodeSkillInstall     = -32016
	CodeUnknownPTY       = -32017
)

// Row pairs a protocol code with a sentinel error.
type Row struct {
	Code int
	Err  error
}

// Table is where typed errors meet protocol codes. The agent maps an error
// to the code of its first matching row (Wire); the host makes an *Error
// match (errors.Is) every sentinel of its code's rows (Matches).
type Table []Row

// Codes is the protocol's table. The rows of the tool set's sentinels
// (tools.ErrUnknownTool for CodeUnknownTool, tools.ErrClosed for
// CodeClosed) are not in it, as proto imports nothing of sandboxd: each
// side adds them with With.
var Codes = Table{
	{CodeParse, ErrParse},
	{CodeInvalidRequest, ErrInvalidRequest},
	{CodeMethodNotFound, ErrMethodNotFound},
	{CodeInvalidParams, ErrInvalidParams},
	{CodeClosed, ErrShuttingDown},
	{CodeCancelled, context.Canceled},
	{CodeDeadline, context.DeadlineExceeded},
	{CodeBusy, ErrBusy},
	{CodeFrameTooLarge, ErrFrameTooLarge},
	{CodeOutsideWorkspace, ErrOutsideWorkspace},
	{CodeBadArchive, ErrBadArchive},
	{CodeNotFound, fs.ErrNotExist},
	{CodePermission, fs.ErrPermission},
	{CodeExists, fs.ErrExist},
	{CodeUnknownTransfer, ErrUnknownTransfer},
	{CodeSkillInstall, ErrSkillInstall},
	{CodeUnknownPTY, ErrUnknownPTY},
	{CodeInternal, ErrInternal},
}

// With returns t with rows added after its leading generic rows (the
// JSON-RPC codes CodeParse to CodeInvalidRequest, -32700 to -32600) and
// before the rest, where the tool set's rows have always ranked:
// an error that wraps ErrInvalidParams keeps that code whatever else it
// wraps.
func (t Table) With(rows ...Row) Table {
	i := 0
	for i < len(t) && t[i].Code >= CodeParse && t[i].Code <= CodeInvalidRequest {
		i++
	}
	out := make(Table, 0, len(t)+len(rows))
	out = append(out, t[:i]...)
	out = append(out, rows...)
	return append(out, t[i:]...)
}

// Matches reports whether target is a sentinel of code in t.
func (t Table) Matches(code int, target error) bool {
	for _, row := range t {
		if row.Code == code && row.Err == target { //nolint:errorlint // the body of Is methods: target is a sentinel, compared as errors.Is does
			return true
		}
	}
	return false
}

// Wire turns any error into the *Error sent on the wire: an *Error as it
// is, any other error with the code of its first matching row (CodeInternal
// for none) and its text.
func (t Table) Wire(err error) *Error {
	var we *Error
	if errors.As(err, &we) {
		return we
	}
	code := CodeInternal
	for _, row := range t {
		if errors.Is(err, row.Err) {
			code = row.Code
			break
		}
	}
	return &Error{Code: code, Message: err.Error()}
}

// Error is a protocol error as carried in a response: the agent's message,
// written for a person, and a code from the table above.
type Error struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func (e *Error) Error() string { return e.Message }

// Is reports whether target is a sentinel of e's code in Codes. The host's
// client also matches the tool set's sentinels (errors.Is(err,
// tools.ErrUnknownTool) holds for an unknown tool).
func (e *Error) Is(target error) bool { return Codes.Matches(e.Code, target) }
