// Command mcptestserver is a small MCP server (the official Go SDK's
// server, over stdio) for sandboxd's sidecar tests, for what the SDK's
// example servers do not do: its tool list changes at run time (so the
// server sends notifications/tools/list_changed) and it records the
// cancellations it receives. images/build-sidecar-images.sh builds it into
// sandboxd-mcp-testserver:latest.
//
// Tools:
//
//	wait {seconds}   returns after that many seconds (at most 600), or
//	                 counts a cancellation when its request is cancelled
//	cancelled {}     how many calls of wait were cancelled, as text
//	add_tool {name}  adds a tool of that name that answers its own name;
//	                 the SDK announces the change to the client
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type waitArgs struct {
	Seconds float64 `json:"seconds" jsonschema:"how long to wait, at most 600"`
}

type addArgs struct {
	Name string `json:"name" jsonschema:"the new tool's name"`
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func main() {
	var cancelled atomic.Int64
	server := mcp.NewServer(&mcp.Implementation{Name: "sandboxd-mcptestserver", Version: "1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "wait", Description: "wait some seconds"},
		func(ctx context.Context, _ *mcp.CallToolRequest, a waitArgs) (*mcp.CallToolResult, any, error) {
			d := time.Duration(min(max(a.Seconds, 0), 600) * float64(time.Second))
			select {
			case <-time.After(d):
				return text("waited"), nil, nil
			case <-ctx.Done():
				n := cancelled.Add(1)
				fmt.Fprintf(os.Stderr, "wait: cancelled (%d so far)\n", n)
				return nil, nil, ctx.Err()
			}
		})
	mcp.AddTool(server, &mcp.Tool{Name: "cancelled", Description: "how many waits were cancelled"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return text(fmt.Sprint(cancelled.Load())), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "add_tool", Description: "add a tool that answers its name"},
		func(_ context.Context, _ *mcp.CallToolRequest, a addArgs) (*mcp.CallToolResult, any, error) {
			if a.Name == "" {
				return nil, nil, fmt.Errorf("name is empty")
			}
			name := a.Name
			mcp.AddTool(server, &mcp.Tool{Name: name, Description: "added at run time"},
				func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return text("I am " + name), nil, nil
				})
			return text("added " + name), nil, nil
		})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
