// Command sandboxd is one static binary with two roles: `sandboxd serve` on
// the host (API server, sessions, Docker) and `sandboxd agent` inside each
// sandbox (the tool executors), plus CLI subcommands.
//
// Each subcommand lives in its own file and registers itself from init with
// register(&command{...}); it parses its own flags with newFlagSet.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the command failed
	exitUsage = 2 // bad command line
)

// stdio is where a command reads and writes; tests pass their own.
type stdio struct {
	in       io.Reader
	out, err io.Writer
}

// command is one subcommand.
type command struct {
	name    string
	summary string // one line, for the command list
	// run does the work; args are the arguments after the command name.
	// It returns nil (exit 0), a usage error (exit 2, see usageErrorf),
	// flag.ErrHelp (exit 0: -h was asked) or another error (exit 1).
	run func(ctx context.Context, std stdio, args []string) error
}

var commands = map[string]*command{}

// register adds a subcommand; called from the init of each command's file.
func register(c *command) {
	if _, dup := commands[c.name]; dup {
		panic("sandboxd: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

func main() {
	os.Exit(run(os.Args[1:], stdio{in: os.Stdin, out: os.Stdout, err: os.Stderr}))
}

// run dispatches to a subcommand and turns its outcome into an exit code.
// SIGINT and SIGTERM cancel the command's context: commands shut down
// cleanly and return.
func run(args []string, std stdio) int {
	if len(args) == 0 {
		printUsage(std.err)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		printUsage(std.out)
		return exitOK
	case "-version", "--version":
		args = append([]string{"version"}, args[1:]...)
	}
	cmd, ok := commands[args[0]]
	if !ok {
		say(std.err, "sandboxd: unknown command %q; run 'sandboxd help' for the list\n", args[0])
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err := cmd.run(ctx, std, args[1:])
	var ue *usageError
	var ec exitCodeError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ec):
		return int(ec)
	case errors.As(err, &ue):
		say(std.err, "sandboxd %s: %v\nrun 'sandboxd %s -h' for help\n", cmd.name, ue.err, cmd.name)
		return exitUsage
	default:
		say(std.err, "sandboxd %s: %v\n", cmd.name, err)
		return exitError
	}
}

func printUsage(w io.Writer) {
	names := make([]string, 0, len(commands))
	width := 0
	for n := range commands {
		names = append(names, n)
		width = max(width, len(n))
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("usage: sandboxd <command> [flags]\n\ncommands:\n")
	for _, n := range names {
		fmt.Fprintf(&b, "  %-*s  %s\n", width, n, commands[n].summary)
	}
	b.WriteString("\nrun 'sandboxd <command> -h' for the flags of a command\n")
	say(w, "%s", b.String())
}

// say prints a message for the user. A failed write to the terminal is not
// checked: there is no one left to report it to, and the exit code still
// says how the command ended.
func say(w io.Writer, format string, args ...any) {
	_, _ = fmt.Fprintf(w, format, args...)
}

// exitCodeError ends the process with this exit code and no message: a
// command whose outcome is another program's exit code (sandboxd run).
type exitCodeError int

func (e exitCodeError) Error() string { return fmt.Sprintf("exit code %d", int(e)) }

// usageError is a bad command line (exit code 2).
type usageError struct {
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &usageError{err: fmt.Errorf(format, args...)}
}

// newFlagSet returns the flag set of a command, printing its help (synopsis,
// description, flags) to std.err on -h. A bad flag is one line and a hint
// to -h (see parseArgs), not the whole help.
func newFlagSet(name string, std stdio, synopsis, description string) *flag.FlagSet {
	fs := flag.NewFlagSet("sandboxd "+name, flag.ContinueOnError)
	fs.SetOutput(std.err)
	fs.Usage = func() {
		say(fs.Output(), "usage: sandboxd %s %s\n\n%s\n\nflags:\n", name, synopsis, strings.TrimSpace(description))
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args, which must all be flags; a parse error becomes a
// usage error, -h flag.ErrHelp (after printing the help).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return nil
}

// parseArgs parses args, leaving the arguments after the flags in
// fs.Args(). -h prints the help and returns flag.ErrHelp; a bad flag returns
// a usage error of one line (run prints it with the hint to -h), naming the
// unit when a duration was given as a bare number.
func parseArgs(fs *flag.FlagSet, args []string) error {
	out, usage := fs.Output(), fs.Usage
	fs.SetOutput(io.Discard) // the flag package prints its error, then the usage
	fs.Usage = func() {}
	err := fs.Parse(args)
	fs.SetOutput(out)
	fs.Usage = usage
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fs.Usage()
		return err
	default:
		return &usageError{err: durationHint(fs, err)}
	}
}

// badValueRE matches the flag package's error for a value a flag refused.
var badValueRE = regexp.MustCompile(`^invalid value "([^"]*)" for flag -([^:]+): `)

// durationHint adds "did you mean 5s?" to the error of a duration flag
// given a bare number (time.ParseDuration wants a unit).
func durationHint(fs *flag.FlagSet, err error) error {
	m := badValueRE.FindStringSubmatch(err.Error())
	if m == nil {
		return err
	}
	f := fs.Lookup(m[2])
	if f == nil {
		return err
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return err
	}
	if _, isDuration := g.Get().(time.Duration); !isDuration {
		return err
	}
	if _, nerr := strconv.ParseFloat(m[1], 64); nerr != nil {
		return fmt.Errorf("invalid value %q for flag -%s: want a duration such as 90s, 15m or 1h30m", m[1], m[2])
	}
	return fmt.Errorf("invalid value %q for flag -%s: a duration needs a unit: did you mean %ss?", m[1], m[2], m[1])
}
