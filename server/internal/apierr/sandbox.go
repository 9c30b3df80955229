package apierr

import (
	"errors"
	"strings"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
)

// sandboxSentinels classifies the errors of the session manager and of the
// in-sandbox agent (which reach the server through the manager's sessions),
// after the rows of sentinels. The first row that matches wins.
var sandboxSentinels = []struct {
	err  error
	kind Kind
}{
	{sandbox.ErrInvalidOptions, InvalidParams},
	{sandbox.ErrNotFound, NotFound},
	{sandbox.ErrSnapshotNotFound, NotFound},
	{sandbox.ErrNotReady, Unavailable},
	{sandbox.ErrClosed, Unavailable},
	{sandbox.ErrFailed, Unavailable},
	{sandbox.ErrReconnecting, Unavailable},
	{sandbox.ErrManagerClosed, Unavailable},
	{sandbox.ErrBusy, Busy},                   // a create that could not start soon enough: retry after N s
	{sandbox.ErrImageNotFound, InvalidParams}, // before ErrStart, which wraps it
	{sandbox.ErrUnsupported, InvalidParams},   // the runtime cannot do what was asked (*sandbox.UnsupportedError); before ErrStart
	{sandbox.ErrClaimed, Conflict},
	{sandbox.ErrPaused, Conflict}, // a call on a paused session: resume it first
	{sandbox.ErrStart, Internal},

	{proto.ErrDisconnected, Unavailable},
	{proto.ErrShuttingDown, Unavailable},
	{proto.ErrBusy, Busy},
	{proto.ErrFrameTooLarge, InvalidParams},
	{proto.ErrOutsideWorkspace, InvalidParams},
	{proto.ErrBadArchive, InvalidParams},
	{proto.ErrUnknownTransfer, NotFound},
	{proto.ErrUnknownPTY, NotFound},
	{proto.ErrInvalidParams, InvalidParams},
}

// wireNames are the options a client names differently from the manager
// (wsproto.Limits sizes in MiB); every other option has the same name.
var wireNames = map[sandbox.Field]string{
	"limits.memory": "limits.memory_mb",
	"limits.tmpfs":  "limits.tmp_mb",
}

func wireName(f sandbox.Field) string {
	if n, ok := wireNames[f]; ok {
		return n
	}
	return string(f)
}

// FromSandbox is an error of the session manager, its sessions or the
// agent as the client reads it: From calls it where such an error leaves
// the process (containerd's errgrpc.ToGRPC, at the edge). The text stays
// the error's own, so a layer that wraps it keeps its words, except that
// invalid options name the options as the client sent them (and come
// without the manager's "session x: " before them) and the host's client
// names no protocol method. Nil for nil.
func FromSandbox(err error) error {
	if err == nil {
		return nil
	}
	var se *sandboxError
	if errors.As(err, &se) {
		return err // mapped already (a create's options, in sandboxmgr), maybe wrapped since
	}
	var oe *sandbox.OptionsError
	if errors.As(err, &oe) {
		return &sandboxError{kind: InvalidParams, msg: oe.Named(wireName).Error(), err: err}
	}
	kind := KindOf(err)
	msg := err.Error()
	var ae *proto.Error
	if errors.As(err, &ae) && ae.Message != "" {
		// The agent's own answer says what went wrong in the client's
		// terms; what the host wrapped around it names internal methods.
		msg = ae.Message
	} else {
		// What the host's client put around the agent's error names
		// protocol internals ("agent tools/call NAME: "): the client reads
		// the error itself in its place, whatever wraps it.
		var me *agentclient.MethodError
		if errors.As(err, &me) {
			msg = strings.Replace(msg, me.Error(), me.Err.Error(), 1)
		}
	}
	return &sandboxError{kind: kind, msg: msg, err: err}
}

// sandboxKind classifies an error of the session manager or the agent by
// its sentinels (Internal when none matches).
func sandboxKind(err error) Kind {
	var oe *sandbox.OptionsError
	if errors.As(err, &oe) {
		return InvalidParams
	}
	for _, row := range sandboxSentinels {
		if errors.Is(err, row.err) {
			return row.kind
		}
	}
	return Internal
}

// sandboxError is an error from the sandbox side with the kind FromSandbox
// gave it.
type sandboxError struct {
	kind Kind
	msg  string
	err  error
}

func (e *sandboxError) Error() string { return e.msg }
func (e *sandboxError) Unwrap() error { return e.err }
