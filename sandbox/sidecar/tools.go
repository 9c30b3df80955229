package sidecar

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/tools"
)

// How a session names its servers' tools.
const (
	// MaxToolName is the longest exposed tool name: model APIs refuse
	// names beyond ^[A-Za-z0-9_-]{1,64}$.
	MaxToolName = 64
	// ToolSep joins a server's name and its tool's.
	ToolSep = "__"
)

var toolNameBadRe = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// ExposedToolName is the session's name for tool of MCP server server:
// server__tool with every character outside [A-Za-z0-9_-] replaced by '_',
// and when that is longer than MaxToolName, cut and ended with '_' and an
// 8-character hash of the whole uncut name, so that it stays unique.
func ExposedToolName(server, tool string) string {
	full := server + ToolSep + tool
	name := toolNameBadRe.ReplaceAllString(full, "_")
	if len(name) <= MaxToolName && name == full {
		return name
	}
	sum := sha256.Sum256([]byte(full))
	suffix := "_" + hex.EncodeToString(sum[:4])
	if len(name) > MaxToolName-len(suffix) {
		name = name[:MaxToolName-len(suffix)]
	}
	return name + suffix
}

// fromMCPTool is a server's tool as the session shows it: the exposed
// name, the server's schemas, annotations (MCP's defaults when unset:
// destructive and open-world) and description.
func fromMCPTool(server string, t *mcp.Tool) (tools.Definition, error) {
	d := tools.Definition{Name: ExposedToolName(server, t.Name), Description: t.Description}
	var err error
	if d.InputSchema, err = toSchema(t.InputSchema); err != nil {
		return d, fmt.Errorf("tool %q: input schema: %w", t.Name, err)
	}
	if d.InputSchema == nil {
		d.InputSchema = &jsonschema.Schema{Type: "object"}
	}
	if t.OutputSchema != nil {
		if d.OutputSchema, err = toSchema(t.OutputSchema); err != nil {
			return d, fmt.Errorf("tool %q: output schema: %w", t.Name, err)
		}
	}
	d.Annotations = tools.Annotations{Title: t.Title, DestructiveHint: true, OpenWorldHint: true}
	if a := t.Annotations; a != nil {
		if a.Title != "" {
			d.Annotations.Title = a.Title
		}
		d.Annotations.ReadOnlyHint = a.ReadOnlyHint
		d.Annotations.IdempotentHint = a.IdempotentHint
		if a.DestructiveHint != nil {
			d.Annotations.DestructiveHint = *a.DestructiveHint
		}
		if a.OpenWorldHint != nil {
			d.Annotations.OpenWorldHint = *a.OpenWorldHint
		}
	}
	return d, nil
}

func toSchema(v any) (*jsonschema.Schema, error) {
	if v == nil {
		return nil, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// fromMCPResult is a server's tool result as an observation: text, images
// and audio as they are, structured content and isError unchanged; other
// blocks (resource links, embedded resources) as their JSON text.
func fromMCPResult(res *mcp.CallToolResult) *tools.Observation {
	obs := &tools.Observation{IsError: res.IsError, Structured: res.StructuredContent, Content: make([]tools.Content, 0, len(res.Content))}
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			obs.Content = append(obs.Content, tools.Content{Type: "text", Text: c.Text})
		case *mcp.ImageContent:
			obs.Content = append(obs.Content, tools.Content{Type: "image", Data: c.Data, MIMEType: c.MIMEType})
		case *mcp.AudioContent:
			obs.Content = append(obs.Content, tools.Content{Type: "audio", Data: c.Data, MIMEType: c.MIMEType})
		default:
			b, err := json.Marshal(c)
			if err != nil {
				b = []byte(fmt.Sprintf("(a %T block that could not be encoded: %v)", c, err))
			}
			obs.Content = append(obs.Content, tools.Content{Type: "text", Text: string(b)})
		}
	}
	return obs
}
