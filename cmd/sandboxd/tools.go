package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/applypatch"
	"github.com/sandboxd/sandboxd/tools/builtin"
	"github.com/sandboxd/sandboxd/tools/mcpexport"
	"github.com/sandboxd/sandboxd/tools/shell"
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
tools/list over the WebSocket and MCP APIs.

--set picks the tool set (a session's tool_set): openhands (the default:
terminal, file_editor, grep, glob), openai (shell, apply_patch, grep,
glob) or both. With --format openai and a set holding shell and
apply_patch, the output is an object: "functions", the set as
function-calling tools, and "responses", the tools list the Responses API
takes, in which shell and apply_patch are OpenAI's hosted tools
({"type": "shell"}, {"type": "apply_patch"}) whose calls an Agents SDK
executor forwards to sandboxd (docs/openai-tools.md).`

func runTools(_ context.Context, std stdio, args []string) error {
	fs := newFlagSet("tools", std, "[--format sandboxd|mcp|openai] [--set openhands|openai|both]", toolsHelp)
	format := fs.String("format", "sandboxd", "sandboxd, mcp or openai")
	set := fs.String("set", builtin.SetOpenHands, "tool set: openhands, openai or both")
	workspace := fs.String("workspace", "/workspace", "workspace path the descriptions mention")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	defs, err := builtin.SetDefinitions(*set, *workspace)
	if err != nil {
		return usageErrorf("unknown --set %q: want openhands, openai or both", *set)
	}
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
		if *set != builtin.SetOpenHands {
			out = openAITools{Functions: o, Responses: responsesTools(defs)}
		}
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

// openAITools is --format openai of a set with OpenAI's own tools.
type openAITools struct {
	// Functions are the set's tools for function calling (Chat
	// Completions; MCP clients and function tools of the Agents SDK).
	Functions []tools.OpenAIFunction `json:"functions"`
	// Responses is the Responses API's tools list: shell and apply_patch
	// as the hosted tools, the others as its (flat) function tools.
	Responses []any `json:"responses"`
}

// responsesFunction is a function tool in the Responses API's flat form.
type responsesFunction struct {
	Type        string `json:"type"`
	Name        string `json:"name"`
	Description string `json:"description"`
	Parameters  any    `json:"parameters"`
}

func responsesTools(defs []tools.Definition) []any {
	out := make([]any, 0, len(defs))
	for _, d := range defs {
		switch d.Name {
		case shell.Name, applypatch.Name:
			out = append(out, map[string]string{"type": d.Name})
		default:
			f := d.OpenAI().Function
			out = append(out, responsesFunction{Type: "function", Name: f.Name, Description: f.Description, Parameters: f.Parameters})
		}
	}
	return out
}
