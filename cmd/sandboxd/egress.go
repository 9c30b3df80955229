package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

func init() {
	register(&command{
		name:    "egress",
		summary: "list a session's recent egress denials (hosts its allow_hosts does not name)",
		run:     runEgress,
	})
}

const egressHelp = `
egress lists the hosts a session's egress proxy refused because its
allow_hosts does not name them (its MCP sidecars' too), the most recent
last: when, how it was asked (http, connect, tls, limit), the host and
port, how often, and the reason the agent got. Only bridge sessions whose
allow_hosts name hosts have an egress proxy (docs/configuration.md,
"Egress by host name").

The session's token comes from SANDBOXD_SESSION_TOKEN (or --session-token).`

func runEgress(ctx context.Context, std stdio, args []string) error {
	var conn connFlags
	var token string
	var asJSON bool
	fs := newFlagSet("egress", std, "[flags] SESSION  (the session's token in SANDBOXD_SESSION_TOKEN)", egressHelp)
	conn.register(fs)
	fs.StringVar(&token, "session-token", os.Getenv("SANDBOXD_SESSION_TOKEN"), "the session's token; prefer the env SANDBOXD_SESSION_TOKEN (a command line is visible to every user in ps)")
	fs.BoolVar(&asJSON, "json", false, "print the denials as a JSON array (session.egress's result)")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		return usageErrorf("give one SESSION id (got %d arguments)", fs.NArg())
	case token == "":
		return usageErrorf("the session's token is needed: SANDBOXD_SESSION_TOKEN (or --session-token)")
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, conn.server, token, client.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	ds, err := c.Session(fs.Arg(0), token).EgressDenials(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(std.out)
		enc.SetIndent("", "  ")
		return enc.Encode(ds)
	}
	if len(ds) == 0 {
		say(std.out, "no egress denials\n")
		return nil
	}
	for _, d := range ds {
		fmt.Fprintf(std.out, "%s  %-7s  %s  x%d  %s\n", d.Time.Local().Format(time.DateTime), d.Via,
			net.JoinHostPort(d.Host, strconv.Itoa(d.Port)), d.Count, d.Reason)
	}
	return nil
}
