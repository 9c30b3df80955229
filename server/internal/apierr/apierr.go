// Package apierr is the one place where errors meet API codes. Code in the
// server returns (or wraps) an *Error of a Kind, or any error of the layers
// below (tools, context, the session manager, the agent); From classifies
// it, and JSONRPC and HTTPStatus give what each transport sends (MCP uses the
// JSON-RPC codes, or an isError result for tool failures: ToolFailure).
//
// Errors of the session manager and the agent are mapped where they cross
// into the server, by FromSandbox (internal/sandboxmgr calls it).
package apierr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/wsproto"
)

// Kind classifies an error for the client.
type Kind int

// The kinds. Internal is the zero value: an error nobody classified.
const (
	Internal         Kind = iota
	InvalidRequest        // malformed message
	MethodNotFound        // unknown method
	InvalidParams         // params do not decode or fail validation; unknown tool
	Unauthenticated       // token missing or wrong
	PermissionDenied      // the token may not do this
	NotFound              // session (or not the caller's), file, transfer, call
	Conflict              // id reused with different params; file exists
	Busy                  // a limit was hit; retry later
	Unavailable           // shutting down; session not ready or gone
	Timeout               // a deadline passed
	Cancelled             // cancelled by the client or the server
	ParseError            // a message that is not JSON
)

var kindNames = [...]string{
	Internal: "internal", InvalidRequest: "invalid_request", MethodNotFound: "method_not_found",
	InvalidParams: "invalid_params", Unauthenticated: "unauthenticated", PermissionDenied: "permission_denied",
	NotFound: "not_found", Conflict: "conflict", Busy: "busy", Unavailable: "unavailable",
	Timeout: "timeout", Cancelled: "cancelled", ParseError: "parse_error",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// codes maps kinds to JSON-RPC codes and HTTP statuses.
var codes = map[Kind]struct {
	rpc  int
	http int
}{
	Internal:         {wsproto.CodeInternal, http.StatusInternalServerError},
	InvalidRequest:   {wsproto.CodeInvalidRequest, http.StatusBadRequest},
	MethodNotFound:   {wsproto.CodeMethodNotFound, http.StatusNotFound},
	InvalidParams:    {wsproto.CodeInvalidParams, http.StatusBadRequest},
	Unauthenticated:  {wsproto.CodeUnauthenticated, http.StatusUnauthorized},
	PermissionDenied: {wsproto.CodePermission, http.StatusForbidden},
	NotFound:         {wsproto.CodeNotFound, http.StatusNotFound},
	Conflict:         {wsproto.CodeConflict, http.StatusConflict},
	Busy:             {wsproto.CodeBusy, http.StatusTooManyRequests},
	Unavailable:      {wsproto.CodeUnavailable, http.StatusServiceUnavailable},
	Timeout:          {wsproto.CodeTimeout, http.StatusGatewayTimeout},
	Cancelled:        {wsproto.CodeCancelled, 499}, // nginx's "client closed request"
	ParseError:       {wsproto.CodeParseError, http.StatusBadRequest},
}

// sentinels classifies the errors any layer may return (see FromSandbox
// for the session manager's). The first row that matches (errors.Is) wins,
// so more specific rows come first.
var sentinels = []struct {
	err  error
	kind Kind
}{
	{context.DeadlineExceeded, Timeout},
	{context.Canceled, Cancelled},
	{tools.ErrUnknownTool, InvalidParams},
	{tools.ErrClosed, Unavailable},
	{fs.ErrNotExist, NotFound},
	{fs.ErrPermission, PermissionDenied},
	{fs.ErrExist, Conflict},
}

// Error is a classified error with a message written for the client.
type Error struct {
	Kind    Kind
	Message string
	Err     error // the cause, if any (not sent to clients)
}

func (e *Error) Error() string {
	if e.Err != nil && e.Message == "" {
		return e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// New returns an *Error of kind with a formatted message.
func New(kind Kind, format string, args ...any) *Error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error of kind whose message is msg: err.
func Wrap(kind Kind, err error, msg string) *Error {
	return &Error{Kind: kind, Message: msg + ": " + err.Error(), Err: err}
}

// KindOf classifies any error: the server's (*Error), the sentinels any
// layer may return, and those of the session manager and the agent
// (sandboxKind), mapped here where they leave the process.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	for _, row := range sentinels {
		if errors.Is(err, row.err) {
			return row.kind
		}
	}
	var se *sandboxError
	if errors.As(err, &se) {
		return se.kind
	}
	return sandboxKind(err)
}

// From returns err as an *Error (classifying it if needed); nil for nil.
func From(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	// An error of the session manager or the agent reads in the client's
	// terms (FromSandbox); anything else as it is.
	return &Error{Kind: KindOf(err), Message: FromSandbox(err).Error(), Err: err}
}

// JSONRPC returns the JSON-RPC error object for err. Internal errors keep
// their message: this server's clients are its operators' programs, and an
// actionable message beats "internal error". Its data is Data's.
func JSONRPC(err error) *wsproto.Error {
	e := From(err)
	return &wsproto.Error{Code: codes[e.Kind].rpc, Message: e.Error(), Data: data(e.Kind, err)}
}

// Data is what a client can act on besides the code: {"kind": KIND}, and
// for a busy create {"kind": "busy", "retry_after": SECONDS}
// (wsproto.ErrorData). The WebSocket API sends it as the error's data, MCP
// as the data of a protocol error and the _meta of a failed tool result.
func Data(err error) wsproto.ErrorData { return data(KindOf(err), err) }

func data(kind Kind, err error) wsproto.ErrorData {
	d := wsproto.ErrorData{Kind: kind.String()}
	if retry, ok := RetryAfter(err); ok {
		d.RetryAfter = int(retry / time.Second)
	}
	return d
}

// RetryAfter is when a client should retry a create that failed with err:
// a busy one (sandbox.ErrBusy) says; ok is false for any other error.
func RetryAfter(err error) (time.Duration, bool) { return sandbox.RetryAfter(err) }

// JSONRPCCode returns the JSON-RPC code of kind.
func JSONRPCCode(kind Kind) int { return codes[kind].rpc }

// HTTPStatus returns the HTTP status of err.
func HTTPStatus(err error) int { return codes[KindOf(err)].http }

// ToolFailure reports whether err, from a tool call, is something the model
// should read as a failed observation (MCP isError) rather than a protocol
// error: everything except the request itself being wrong.
func ToolFailure(err error) bool {
	switch KindOf(err) {
	case InvalidRequest, MethodNotFound, InvalidParams, Unauthenticated, PermissionDenied:
		return false
	}
	return true
}
