package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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
	fs := newFlagSet("agent-proxy", std, "--socket PATH", agentProxyHelp)
	socket := fs.String("socket", "", "the agent's unix socket (required)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *socket == "" {
		return usageErrorf("--socket PATH is required")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", *socket)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no agent socket at %s; is 'sandboxd agent --socket %s' running in this container?", *socket, *socket)
		}
		return fmt.Errorf("connecting to the agent at %s: %w", *socket, err)
	}
	uc := conn.(*net.UnixConn)
	stop := context.AfterFunc(ctx, func() { uc.Close() })
	defer stop()

	// host -> agent: at the end of stdin, half-close so the agent sees EOF
	// and ends the connection, which ends the copy below.
	go func() {
		io.Copy(uc, std.in)
		uc.CloseWrite()
	}()
	// agent -> host: the proxy's lifetime.
	_, err = io.Copy(std.out, uc)
	uc.Close()
	if err != nil && ctx.Err() == nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("relaying from the agent: %w", err)
	}
	return nil
}
