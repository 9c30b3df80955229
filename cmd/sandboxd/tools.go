package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/builtin"
	"github.com/sandboxd/sandboxd/tools/mcpexport"
)

func init() {
	register(&command{
		name:    "tools",
		summary: "print the built-in tool definitions (sandboxd, MCP or OpenAI format)",
		run:     runTools,
	})
}

const toolsHelp = `
Prints the definitions of the built-in tools as JSON: sandboxd's own form
(name, description, input and output schemas, annotations), MCP tool
definitions, or OpenAI function-calling tools. Frameworks can paste the
output into their tool lists; the same definitions are served by
tools/list over the WebSocket and MCP APIs.`

func runTools(_ context.Context, std stdio, args []string) error {
	fs := newFlagSet("tools", std, "[--format sandboxd|mcp|openai]", toolsHelp)
	format := fs.String("format", "sandboxd", "sandboxd, mcp or openai")
	workspace := fs.String("workspace", "/workspace", "workspace path the descriptions mention")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	defs := builtin.Definitions(*workspace)
	var out any
	switch *format {
	case "sandboxd":
		out = defs
	case "mcp":
		m := make([]any, len(defs))
		for i, d := range defs {
			m[i] = mcpexport.Tool(d)
		}
		out = m
	case "openai":
		o := make([]tools.OpenAIFunction, len(defs))
		for i, d := range defs {
			o[i] = d.OpenAI()
		}
		out = o
	default:
		return usageErrorf("unknown --format %q: want sandboxd, mcp or openai", *format)
	}
	enc := json.NewEncoder(std.out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return fmt.Errorf("writing definitions: %w", err)
	}
	return nil
}
