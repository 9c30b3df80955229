// Package mcpexport exports sandboxd's tool definitions as MCP tools. It
// is apart from package tools so that what imports tools (the Go client,
// the agent) does not link the MCP SDK; the MCP server, the WebSocket
// API's tools.list in MCP form and `sandboxd tools` use it.
package mcpexport

import (
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/tools"
)

// Tool is d as an MCP tool definition: its input schema as a model is
// shown it (tools.ModelSchema), every annotation stated.
func Tool(d tools.Definition) *mcp.Tool {
	destructive, openWorld := d.Annotations.DestructiveHint, d.Annotations.OpenWorldHint
	t := &mcp.Tool{
		Name:        d.Name,
		Description: d.Description,
		InputSchema: tools.ModelSchema(d.InputSchema),
		Annotations: &mcp.ToolAnnotations{
			Title:           d.Annotations.Title,
			ReadOnlyHint:    d.Annotations.ReadOnlyHint,
			DestructiveHint: &destructive,
			IdempotentHint:  d.Annotations.IdempotentHint,
			OpenWorldHint:   &openWorld,
		},
	}
	if d.OutputSchema != nil {
		t.OutputSchema = d.OutputSchema
	}
	return t
}
