package mcpapi

import (
	"context"
	"encoding/json"
	"io"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/transfer"
)

// The harness's tools, upload and download (tools/transfer), are served by
// an endpoint whose profile turns them on (Options.TransferTools, the
// config's `transfer_tools`), in both revisions. They run here, on the
// daemon's side, as one tar stream to or from the session's agent (the
// core's Session.Upload and Download), so the agent's confinement to the
// workspace and the editable paths holds; they are not tools of the
// sandbox, and the WebSocket API has its own chunked transfers instead.
//
// Limits: an upload's base64 must fit in one request body
// (Options.MaxBodyBytes, --max-message-bytes: at most 16 MiB decoded under
// the default 32 MiB); a download returns at most 8 MiB a call, whose
// base64 fits the 16 MiB an SDK client reads of one SSE event.

// initTransfer reads whether e serves the transfer tools, and their limits.
func (e *endpoint) initTransfer() {
	h := e.h
	e.transfer = h.opts.TransferTools != nil && h.opts.TransferTools(e.profile)
	e.transferLimits = transfer.LimitsForBody(h.opts.MaxBodyBytes)
}

// withTransfer is defs with the transfer tools appended when e serves
// them. A sandbox tool of the same name (a skill called upload) is left
// out of the list: the name is the harness's on this endpoint.
func (e *endpoint) withTransfer(defs []tools.Definition) []tools.Definition {
	defs = e.withSnapshotTools(defs) // the harness's tools of this endpoint, together
	if !e.transfer {
		return defs
	}
	out := slices.DeleteFunc(slices.Clone(defs), func(d tools.Definition) bool {
		if transfer.IsName(d.Name) {
			e.h.log.Warn("a sandbox tool has the name of a harness tool, which this endpoint serves in its place", "tool", d.Name, "endpoint", e.path)
			return true
		}
		return false
	})
	return append(out, transfer.Definitions(e.transferLimits)...)
}

// callTransfer runs upload or download against s. Like any tool, a
// failure it can explain (bad arguments, a path outside the roots) is an
// isError result; a failure of the sandbox too (apierr.ToolFailure).
func (e *endpoint) callTransfer(ctx context.Context, s *core.Session, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	h := e.h
	tool, _ := transfer.New(name, filer{s}, e.transferLimits)
	start := time.Now()
	obs, err := tool.Call(ctx, args)
	if err != nil {
		if !apierr.ToolFailure(err) {
			return nil, err
		}
		h.core.Metrics().Error(apierr.KindOf(err).String(), "mcp")
		return failure(err), nil
	}
	h.core.Metrics().ObserveCall(name, metrics.TransportMCP, time.Since(start))
	h.log.Debug("mcp transfer", "session", s.ID(), "tool", name, "is_error", obs.IsError, "took", time.Since(start))
	return toResult(obs), nil
}

// filer is a core session as transfer.Filer: its errors in the client's
// terms (apierr.From: a path outside the roots reads as such).
type filer struct{ s *core.Session }

func (f filer) Upload(ctx context.Context, dir string, tar io.Reader) error {
	return clientErr(f.s.Upload(ctx, dir, tar))
}

func (f filer) Download(ctx context.Context, path string, w io.Writer) error {
	return clientErr(f.s.Download(ctx, path, w))
}

func clientErr(err error) error {
	if err == nil {
		return nil
	}
	return apierr.From(err)
}
