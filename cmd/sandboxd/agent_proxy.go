package main

import (
	"context"

	"github.com/sandboxd/sandboxd/agent"
)

func init() {
	register(&command{
		name:    "agent-proxy",
		summary: "bridge stdin/stdout to a running agent's unix socket (for `docker exec -i`)",
		run:     runAgentProxy,
	})
}

const agentProxyHelp = `
Connects stdin/stdout to the unix socket of a running 'sandboxd agent
--socket PATH', so the host reaches an agent through a 'docker exec -i'
stream, e.g. after a daemon restart. Exits when either side closes.`

func runAgentProxy(ctx context.Context, std stdio, args []string) error {
	// Its stdio is the host's stream: keep it from the session's tools
	// (decision 0021).
	if err := agent.Undumpable(); err != nil {
		return err
	}
	fs := newFlagSet("agent-proxy", std, "--socket PATH", agentProxyHelp)
	socket := fs.String("socket", "", "the agent's unix socket (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *socket == "" {
		return usageErrorf("--socket PATH is required")
	}
	return agent.Proxy(ctx, *socket, std.in, std.out)
}
