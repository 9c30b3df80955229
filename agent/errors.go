package agent

import (
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

// codes is the protocol's code table (proto.Codes) with the rows of the tool
// set's sentinels, which proto does not import; the host's client adds
// the same rows (agent/client/errors.go).
var codes = proto.Codes.With(
	proto.Row{Code: proto.CodeUnknownTool, Err: tools.ErrUnknownTool},
	proto.Row{Code: proto.CodeClosed, Err: tools.ErrClosed},
)
