package main

import (
	"context"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

func init() {
	register(&command{
		name:    "pause",
		summary: "freeze a session's sandbox: no CPU, memory kept, never idle (until resume)",
		run:     func(ctx context.Context, std stdio, args []string) error { return runPause(ctx, std, args, true) },
	})
	register(&command{
		name:    "resume",
		summary: "thaw a paused session's sandbox",
		run:     func(ctx context.Context, std stdio, args []string) error { return runPause(ctx, std, args, false) },
	})
}

const pauseHelp = `
pause freezes a session's sandbox with the engine's pause (the cgroup
freezer): every process stops where it is and keeps its memory, nothing
uses CPU, and the session is not idle, so its idle timeout does not close
it. Park sessions with it during long model calls. Calls to a paused
session are refused (kind "conflict") until resume; a session with a call
running is not paused (kind "busy"). MCP sidecars are not paused.

resume thaws it: its processes run on where they stopped and its idle
timeout counts from then. Pausing a paused session, or resuming a running
one, is no error. Not on the Kubernetes runtime.

The session's token comes from SANDBOXD_SESSION_TOKEN (or --session-token).`

func runPause(ctx context.Context, std stdio, args []string, pause bool) error {
	name := "resume"
	if pause {
		name = "pause"
	}
	var conn connFlags
	var token string
	fs := newFlagSet(name, std, "[flags] SESSION  (the session's token in SANDBOXD_SESSION_TOKEN)", pauseHelp)
	conn.register(fs)
	fs.StringVar(&token, "session-token", os.Getenv("SANDBOXD_SESSION_TOKEN"), "the session's token; prefer the env SANDBOXD_SESSION_TOKEN (a command line is visible to every user in ps)")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	switch {
	case fs.NArg() != 1:
		return usageErrorf("give one SESSION id (got %d arguments)", fs.NArg())
	case token == "":
		return usageErrorf("the session's token is needed: SANDBOXD_SESSION_TOKEN (or --session-token)")
	}
	id := fs.Arg(0)
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	c, err := client.Dial(ctx, conn.server, token, client.Options{})
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }()
	s := c.Session(id, token) // no attach: its tools are not asked for
	if pause {
		err = s.Pause(ctx)
	} else {
		err = s.Resume(ctx)
	}
	if err != nil {
		return err
	}
	say(std.out, "session %s %sd\n", id, name)
	return nil
}
