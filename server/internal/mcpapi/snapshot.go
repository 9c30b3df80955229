package mcpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/wsproto"
)

// The harness's snapshot tools (decision 0052), served by an endpoint whose
// profile turns them on (Options.SnapshotTools, the config's
// `snapshot_tools`), in both revisions: snapshot, restore and
// snapshot_list act on the MCP session's own sandbox; fork starts new
// sessions from one of its snapshots, reached through the WebSocket API by
// the ids and tokens it returns. They are for a harness that drives
// best-of-N or per-turn undo, not for the model (an agent forking itself
// is out of scope).

// Names of the snapshot tools.
const (
	SnapshotToolName     = "snapshot"
	RestoreToolName      = "restore"
	SnapshotListToolName = "snapshot_list"
	ForkToolName         = "fork"
)

// SnapshotAction is the snapshot tool's input.
type SnapshotAction struct {
	Name string `json:"name,omitempty" jsonschema:"a unique name for the snapshot (letters, digits, '_', '.', '-'), usable in place of its id"`
}

// RestoreAction is the restore tool's input.
type RestoreAction struct {
	Snapshot string `json:"snapshot" jsonschema:"the id or name of one of this sandbox's snapshots"`
}

// ForkAction is the fork tool's input.
type ForkAction struct {
	Snapshot string `json:"snapshot" jsonschema:"the id or name of one of this sandbox's snapshots"`
	Count    int    `json:"count,omitempty" jsonschema:"how many sessions, 1 to 32 (default 1)"`
}

// ListAction is snapshot_list's input (none).
type ListAction struct{}

func snapshotDefinitions() []tools.Definition {
	return []tools.Definition{
		{
			Name: SnapshotToolName,
			Description: "Take a snapshot of this sandbox's files: its root changes, the workspace, the home folder and the editable paths. " +
				"Running processes are not part of it. Returns its id; restore or fork it later.",
			InputSchema: tools.SchemaFor[SnapshotAction](),
			Annotations: tools.Annotations{Title: "Snapshot the sandbox", ReadOnlyHint: false, DestructiveHint: false, IdempotentHint: false, OpenWorldHint: false},
		},
		{
			Name: RestoreToolName,
			Description: "Roll this sandbox back to one of its snapshots, in place: exactly the snapshot's files come back, files made since are gone. " +
				"Its processes start afresh (a new terminal shell, no background jobs).",
			InputSchema: tools.SchemaFor[RestoreAction](),
			Annotations: tools.Annotations{Title: "Restore a snapshot", ReadOnlyHint: false, DestructiveHint: true, IdempotentHint: true, OpenWorldHint: false},
		},
		{
			Name:        SnapshotListToolName,
			Description: "List this sandbox's snapshots: id, name, when taken, when they expire.",
			InputSchema: tools.SchemaFor[ListAction](),
			Annotations: tools.Annotations{Title: "List snapshots", ReadOnlyHint: true, DestructiveHint: false, IdempotentHint: true, OpenWorldHint: false},
		},
		{
			Name: ForkToolName,
			Description: "Start new sessions from one of this sandbox's snapshots (1 to 32), each with its own id and token for sandboxd's " +
				"WebSocket API; each fork succeeds or fails on its own. This sandbox is untouched.",
			InputSchema: tools.SchemaFor[ForkAction](),
			Annotations: tools.Annotations{Title: "Fork a snapshot", ReadOnlyHint: false, DestructiveHint: false, IdempotentHint: false, OpenWorldHint: false},
		},
	}
}

func isSnapshotTool(name string) bool {
	return slices.Contains([]string{SnapshotToolName, RestoreToolName, SnapshotListToolName, ForkToolName}, name)
}

// initSnapshotTools reads whether e serves the snapshot tools.
func (e *endpoint) initSnapshotTools() {
	e.snapshotTools = e.h.opts.SnapshotTools != nil && e.h.opts.SnapshotTools(e.profile)
}

// withSnapshotTools is defs with the snapshot tools appended when e
// serves them (a sandbox tool of the same name is left out).
func (e *endpoint) withSnapshotTools(defs []tools.Definition) []tools.Definition {
	if !e.snapshotTools {
		return defs
	}
	out := slices.DeleteFunc(slices.Clone(defs), func(d tools.Definition) bool { return isSnapshotTool(d.Name) })
	return append(out, snapshotDefinitions()...)
}

// decodeArgs reads a tool's arguments strictly.
func decodeArgs(args json.RawMessage, into any) error {
	if len(bytes.TrimSpace(args)) == 0 || string(bytes.TrimSpace(args)) == "null" {
		args = json.RawMessage("{}")
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		return apierr.New(apierr.InvalidParams, "invalid arguments: %v", err)
	}
	return nil
}

// callSnapshotTool runs one snapshot tool for s.
func (e *endpoint) callSnapshotTool(ctx context.Context, s *core.Session, name string, args json.RawMessage) (*mcp.CallToolResult, error) {
	c := e.h.core
	// s's own snapshots only, as its session token would see them.
	p := core.Principal{SessionID: s.ID()}
	var (
		text string
		out  any
		err  error
	)
	switch name {
	case SnapshotToolName:
		var a SnapshotAction
		if err = decodeArgs(args, &a); err == nil {
			var snap sandbox.Snapshot
			if snap, err = c.Snapshot(ctx, s, a.Name, 0); err == nil {
				out = snapshotInfo(snap)
				text = fmt.Sprintf("Snapshot %s taken. %s.", snap.ID, wsproto.SnapshotNote)
			}
		}
	case RestoreToolName:
		var a RestoreAction
		if err = decodeArgs(args, &a); err == nil {
			var snap sandbox.Snapshot
			if snap, err = c.Restore(ctx, p, s, a.Snapshot); err == nil {
				out = map[string]any{"snapshot_id": snap.ID, "restored": true}
				text = fmt.Sprintf("Restored to snapshot %s: %s.", snap.ID, wsproto.RestoreNote)
			}
		}
	case SnapshotListToolName:
		var a ListAction
		if err = decodeArgs(args, &a); err == nil {
			var all []sandbox.Snapshot
			if all, err = c.Snapshots(ctx, p); err == nil {
				list := make([]wsproto.SnapshotInfo, len(all))
				for i, sn := range all {
					list[i] = snapshotInfo(sn)
				}
				out = map[string]any{"snapshots": list}
				b, _ := json.Marshal(list)
				text = string(b)
			}
		}
	case ForkToolName:
		var a ForkAction
		if err = decodeArgs(args, &a); err == nil {
			// The snapshot must be this sandbox's; the forks are made
			// with the operator's right, as the endpoint's sandbox was.
			var snap sandbox.Snapshot
			if all, lerr := c.Snapshots(ctx, p); lerr != nil {
				err = lerr
			} else if i := slices.IndexFunc(all, func(sn sandbox.Snapshot) bool { return sn.ID == a.Snapshot || (sn.Name != "" && sn.Name == a.Snapshot) }); i < 0 {
				err = apierr.New(apierr.NotFound, "snapshot %q: not one of this sandbox's", a.Snapshot)
			} else {
				snap = all[i]
			}
			if err == nil {
				var forks []core.ForkOne
				if _, forks, err = c.Fork(ctx, c.Operator(), core.APIWebSocket, core.ForkRequest{Snapshot: snap.ID, Count: a.Count}); err == nil {
					entries := make([]wsproto.ForkEntry, len(forks))
					for i, f := range forks {
						if f.Err != nil {
							entries[i].Error = apierr.JSONRPC(apierr.From(f.Err))
							continue
						}
						entries[i].SessionID, entries[i].SessionToken = f.Result.Session.ID(), f.Result.Token
					}
					out = map[string]any{"snapshot_id": snap.ID, "forks": entries}
					b, _ := json.Marshal(entries)
					text = string(b)
				}
			}
		}
	}
	if err != nil {
		return failure(err), nil
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: out}, nil
}

// snapshotInfo is a snapshot as the tools return it.
func snapshotInfo(s sandbox.Snapshot) wsproto.SnapshotInfo {
	info := wsproto.SnapshotInfo{SnapshotID: s.ID, Name: s.Name, SessionID: s.SessionID, Image: s.Image, Created: s.Created, SizeBytes: s.Size}
	if !s.Expires.IsZero() {
		e := s.Expires.Round(time.Second)
		info.Expires = &e
	}
	return info
}
