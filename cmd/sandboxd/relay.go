package main

import (
	"context"
	"errors"
	"os/signal"
	"syscall"

	"github.com/sandboxd/sandboxd/agent"
)

func init() {
	register(&command{
		name:    "relay",
		summary: "(inside a sandbox, for `sandboxd run`) copy stdin to stdout up to an end mark, exit with the status it carries",
		run:     runRelay,
	})
}

const relayHelp = `
Inside a sandbox, 'sandboxd run' gives its command a pipe for output, as
'docker run' does, rather than the session's terminal:

  { CMD 2>&1; printf '\n%s:%d\n' END "$?"; } | /.sandboxd/sandboxd relay END

relay copies its input to its output in large writes until the line END:N,
which it does not print, and exits with N. It stops reading there, so a
background job that CMD left holding the pipe does not keep it waiting.
Ctrl-C is left to CMD (relay ignores SIGINT and prints what CMD still
says); input that ends without the mark exits 1 saying so.`

func runRelay(_ context.Context, std stdio, args []string) error {
	signal.Ignore(syscall.SIGINT)
	fs := newFlagSet("relay", std, "END", relayHelp)
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf("want one argument, the end mark")
	}
	status, err := agent.Relay(std.in, std.out, fs.Arg(0))
	if errors.Is(err, agent.ErrNoEndMark) {
		return errors.New("no exit status: the command was interrupted or killed")
	}
	if err != nil {
		return err
	}
	if status != 0 {
		return exitCodeError(status)
	}
	return nil
}
