package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/daemon"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/bash"
)

func init() {
	register(&command{
		name:    "run",
		summary: "run one command in a fresh sandbox through a sandboxd server, exit with its exit code",
		run:     runRun,
	})
}

const runHelp = `
Creates a session on a running sandboxd server, runs CMD in its terminal,
prints the output as it comes, closes the session and exits with the
command's exit code.

Ctrl-C (or --timeout) sends Ctrl-C to CMD; if CMD has not ended 3 s later,
or at a second Ctrl-C, run gives up: the sandbox is removed with everything
in it, and run exits 130 (124 after --timeout). A closed stdout ("run ... |
head") ends it the same way, with 141.

CMD runs in bash: "sandboxd run -- ls -la" and "sandboxd run -- 'ls | wc -l'"
both work; arguments are quoted as given.

As with docker run, CMD's standard input is empty (/dev/null) unless -i is
given: then sandboxd reads its own standard input to the end and hands it
to CMD ("git diff | sandboxd run -i -- 'cd repo && git apply'").

CMD's output goes to a pipe, as with docker run (stdout and stderr merged,
as text): programs buffer it as they do into a pipe, and it flows at a
pipe's speed. With -t CMD writes to the session's terminal instead:
line-buffered and in colour, as with docker run -t, but a program that
prints a line at a time pays the terminal's cost per line (seq 1 5000000:
about 9x slower).

A server too busy to start the sandbox soon enough answers "busy, retry
after N s" (all its start slots taken: serve --max-concurrent-starts,
--max-start-wait); run says so on stderr and retries after N s, for up to
--busy-wait. A sandbox the server went on starting for the busy create is
what the retry gets.

The server and token come from --server and --token-file, or SANDBOXD_URL
and SANDBOXD_TOKEN, or else the local server's token file.`

// defaultServerURL is the WebSocket API of a local `sandboxd serve`.
const defaultServerURL = "ws://127.0.0.1:7070/v1/ws"

// connFlags are how the CLI commands reach a server.
type connFlags struct {
	server, tokenFile, stateDir string
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.server, "server", envOr("SANDBOXD_URL", defaultServerURL), "WebSocket URL of the server (env SANDBOXD_URL)")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding the operator token (default: SANDBOXD_TOKEN, else <state-dir>/token)")
	fs.StringVar(&c.stateDir, "state-dir", os.Getenv("SANDBOXD_STATE_DIR"), "state directory of the local server, for its token file")
}

// operatorToken finds the operator token: --token-file, SANDBOXD_TOKEN, the
// local server's token file.
func (c *connFlags) operatorToken() (string, error) {
	if c.tokenFile != "" {
		return auth.ReadTokenFile(c.tokenFile)
	}
	if t := os.Getenv("SANDBOXD_TOKEN"); t != "" {
		return t, nil
	}
	dir := c.stateDir
	if dir == "" {
		var err error
		if dir, err = auth.DefaultStateDir(); err != nil {
			return "", err
		}
	}
	t, err := auth.ReadTokenFile(filepath.Join(dir, auth.TokenFileName))
	if errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("no token: set SANDBOXD_TOKEN, give --token-file, or start `sandboxd serve` here (it writes %s)", filepath.Join(dir, auth.TokenFileName))
	}
	return t, err
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// callSeconds is the terminal timeout of run's call: the command's whole
// life (the terminal's longest), its output streamed as it comes. A
// command still running after it is waited on with the same.
var callSeconds = bash.MaxTimeout.Seconds()

// pollSeconds is the terminal timeout of each call of the line-mode shell
// (shell.go): it regains control this often to forward typed input or
// Ctrl-C.
const pollSeconds = 1.0

func runRun(ctx context.Context, std stdio, args []string) error {
	var conn connFlags
	var profile, image, network, cwd string
	var timeout time.Duration
	busyWait := defaultBusyWait
	var withStdin, tty bool
	var allowHosts daemon.List
	env := daemon.KeyValues{}
	fs := newFlagSet("run", std, "[flags] -- CMD [ARG...]", runHelp)
	conn.register(fs)
	fs.StringVar(&profile, "profile", "", "session profile of the server (serve --config) to start the sandbox from; the flags below override its fields (default: the server's default profile)")
	fs.StringVar(&image, "image", "", "image of the sandbox (default: the profile's, else the server's)")
	fs.StringVar(&network, "network", "", "network of the sandbox: none (default), bridge, internal, or an engine network the server allows (serve --allow-network NAME)")
	fs.Var(&allowHosts, "allow-hosts", "with --network bridge: the only host names (HTTP and TLS, through the server's egress proxy), *.suffix wildcards, IP addresses or CIDR prefixes the sandbox may reach, repeatable or comma-separated")
	fs.StringVar(&cwd, "cwd", "", "working directory (default: the image's WORKDIR unless it is /, else /workspace; one under /workspace is created if missing)")
	fs.Var(env, "env", "KEY=VALUE for the command's environment, repeatable")
	fs.DurationVar(&timeout, "timeout", 0, "give up (Ctrl-C the command, exit 124) after this long; 0: never")
	fs.BoolVar(&withStdin, "i", false, "give CMD this command's standard input (read to its end first); without it CMD's input is empty")
	fs.DurationVar(&busyWait, "busy-wait", busyWait, "while the server answers the create \"busy, retry after N s\", retry after N s, for up to this long in all; 0: fail at once")
	fs.BoolVar(&tty, "t", false, "CMD's output goes to the session's terminal (line-buffered, colours) rather than a pipe")
	if err := parseArgs(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return usageErrorf("no command: sandboxd run [flags] -- CMD [ARG...]")
	}
	// A subshell: `exit N` ends it, not the session's shell (which would
	// print "exit" and restart); newlines keep a trailing comment inside.
	command := "(\n" + shellJoin(fs.Args()) + "\n)"
	token, err := conn.operatorToken()
	if err != nil {
		return err
	}
	var input *os.File
	if withStdin {
		if input, err = spoolStdin(ctx, std.in); err != nil {
			return err
		}
		defer func() { _ = input.Close() }() // an unlinked temp file, only read
	}
	if busyWait < 0 {
		return usageErrorf("--busy-wait %v: want 0 (no retry) or more", busyWait)
	}
	opts := client.CreateOptions{Profile: profile, Image: image, Network: network, AllowHosts: allowHosts, Cwd: cwd, Env: env}
	code, err := runOnce(ctx, conn.server, token, opts, busyWait, command, input, tty, timeout, std.out, std.err)
	if err != nil {
		return err
	}
	if code == exitTimedOut && timeout > 0 {
		say(std.err, "sandboxd run: timed out after %v\n", timeout)
	}
	if code != 0 {
		return exitCodeError(code) // the command's code is the process's
	}
	return nil
}

// Exit codes of run besides the command's own, as a shell would have them.
const (
	exitTimedOut    = 124             // --timeout passed (as timeout(1))
	exitInterrupted = 128 + 2         // given up after a second Ctrl-C
	exitBrokenPipe  = 128 + 13        // stdout closed (run ... | head)
	giveUpAfter     = 3 * time.Second // after Ctrl-C or the timeout, for the command to end
)

// runOnce dials, creates a session (retrying while the server is busy, for
// up to busyWait, saying so on progress), runs command and closes the
// session. The command's standard input is input (a spooled file), or
// /dev/null.
func runOnce(ctx context.Context, server, token string, opts client.CreateOptions, busyWait time.Duration, command string,
	input *os.File, tty bool, timeout time.Duration, out, progress io.Writer) (int, error) {
	// Each SIGINT/SIGTERM counts (the first also cancels ctx): the first
	// sends Ctrl-C, the second gives up. A closed stdout (SIGPIPE) is a
	// write error instead of killing the process with the session left
	// behind.
	signals := make(chan os.Signal, 4)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	// Signals interrupt the command; the session is still closed.
	work := context.WithoutCancel(ctx)
	dctx, cancel := context.WithTimeout(work, 30*time.Second)
	c, err := client.Dial(dctx, server, token, client.Options{})
	cancel()
	if err != nil {
		return 0, err
	}
	defer func() { _ = c.Close() }() // the outcome is the command's; a close error changes nothing
	s, err := createRetrying(ctx, busyWait, progress, func() (*client.Session, error) {
		cctx, cancel := context.WithTimeout(work, createWait)
		defer cancel()
		return c.CreateSession(cctx, opts)
	})
	if err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) { // Ctrl-C while waiting to retry
			return exitInterrupted, nil
		}
		return 0, fmt.Errorf("creating a session: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = s.Close(ctx)
	}()
	if ctx.Err() != nil { // Ctrl-C while the sandbox started: do not run the command
		return exitInterrupted, nil
	}
	command, err = withInput(work, s, command, input)
	if err != nil {
		return 0, err
	}
	if !tty {
		command = pipeOutput(command)
	}
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	return runCommand(work, ctx.Done(), signals, deadline, s, command, out)
}

// pipeOutput gives command's output a pipe rather than the terminal: a
// relay (the agent binary's `relay`, decision 0038) copies it to the
// terminal in large writes and exits with command's status, carried after
// an end mark that command cannot guess.
func pipeOutput(command string) string {
	var nonce [16]byte
	_, _ = rand.Read(nonce[:]) // never fails (crypto/rand)
	end := "sandboxd-end-" + hex.EncodeToString(nonce[:])
	return "{ " + command + " 2>&1; printf '\\n%s:%d\\n' " + end + ` "$?"; } | ` + sandbox.AgentPath + " relay " + end
}

// runCommand runs command in the session's terminal until it ends, in one
// call whose output streams to out (no polling: the call lasts as long as
// the command). The first interrupt (ctx, or a signal) and the deadline
// cancel the call, which sends the command Ctrl-C; if it has not ended
// giveUpAfter later, or at a second signal, run gives up (the caller closes
// the session, which ends every process). A write error on out gives up at
// once. Output the client could not read back from the server (it read more
// slowly than the command printed, beyond the server's replay ring) is an
// error saying what was lost: the exit is never 0 with output missing.
func runCommand(ctx context.Context, interrupt <-chan struct{}, signals <-chan os.Signal, deadline <-chan time.Time,
	s *client.Session, command string, out io.Writer) (int, error) {
	var (
		stopped     int // exitInterrupted or exitTimedOut once Ctrl-C was sent
		signalsSeen int
		giveUp      <-chan time.Time
		giveUpAt    time.Time
		writeErr    atomic.Bool
		cancel      context.CancelFunc = func() {}
	)
	type result struct {
		obs *tools.Observation
		err error
	}
	done := make(chan result, 1)
	start := func(action map[string]any) {
		var cctx context.Context
		cctx, cancel = context.WithCancel(ctx)
		stopCall := cancel
		go func() {
			obs, err := s.Call(cctx, "terminal", action, func(b []byte) {
				if writeErr.Load() {
					return
				}
				if _, err := out.Write(b); err != nil {
					writeErr.Store(true)
					stopCall()
				}
			})
			done <- result{obs, err}
		}()
	}
	defer func() { cancel() }()
	stop := func(why int) {
		if stopped == 0 || why == exitTimedOut {
			stopped = why
		}
		if giveUp == nil {
			giveUpAt = time.Now().Add(giveUpAfter)
			giveUp = time.After(giveUpAfter)
		}
		cancel() // the terminal sends the command Ctrl-C
	}
	start(map[string]any{"command": command, "timeout": callSeconds})
	for {
		select {
		case r := <-done:
			if writeErr.Load() {
				return exitBrokenPipe, nil
			}
			var lost *client.OutputLost
			if errors.As(r.err, &lost) {
				return 0, fmt.Errorf("the command's output is incomplete: %w", lost)
			}
			if stopped != 0 {
				// Cancelled (or the wait after it ended): wait for the
				// command to end, until giving up.
				if r.err == nil {
					if r.obs.IsError && strings.Contains(r.obs.Text(), "No previous running command") {
						return stopped, nil // it ended with the cancelled call
					}
					if _, running := terminalState(r.obs); !running && !r.obs.IsError {
						return stopped, nil
					}
				}
				start(map[string]any{"command": "", "timeout": max(0.1, time.Until(giveUpAt).Seconds())})
				continue
			}
			if r.err != nil {
				return 0, r.err
			}
			if r.obs.IsError {
				return 0, errors.New(strings.TrimSpace(r.obs.Text()))
			}
			code, running := terminalState(r.obs)
			if !running {
				return code, nil
			}
			start(map[string]any{"command": "", "timeout": callSeconds}) // running for a day: wait on
		case <-interrupt: // the first signal, or a caller's cancel
			interrupt = nil
			stop(exitInterrupted)
		case <-signals:
			if signalsSeen++; signalsSeen > 1 {
				return stopped, nil // set by the first
			}
			stop(exitInterrupted)
		case <-deadline:
			deadline = nil
			stop(exitTimedOut)
		case <-giveUp:
			return stopped, nil
		}
	}
}

// terminalState reads the exit code of a terminal observation; running is
// true while the command has not finished (exit code -1).
func terminalState(obs *tools.Observation) (code int, running bool) {
	m, _ := obs.Structured.(map[string]any)
	if v, ok := m["exit_code"].(float64); ok {
		code = int(v)
	}
	return code, code == -1
}

// shellJoin quotes args for bash, leaving a single argument as is (so that
// `sandboxd run -- 'ls | wc -l'` runs a pipeline).
func shellJoin(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	q := make([]string, len(args))
	for i, a := range args {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("-_./=:,+@%", r)
		}) < 0 {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
