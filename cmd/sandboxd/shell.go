package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

func init() {
	register(&command{
		name:    "shell",
		summary: "interactive terminal in a sandbox: a new session, or attach to one with its token",
		run:     runShell,
	})
}

const shellHelp = `
In a terminal, attaches your terminal to a shell of its own in the session:
a pseudo-terminal beside the agent's terminal tool (not inside it), running
the session user's login shell with TERM=xterm-256color. Everything works
as in a local terminal: full-screen programs (vi, top, less), Tab
completion, colours, Ctrl-C and Ctrl-Z for the program in the sandbox (not
for this command), window resizes. Leave with exit (or Ctrl-D at the
prompt); your terminal's settings are restored. sandboxd shell exits with
the remote shell's exit code.

Without --session, a new session is created (and closed on leaving, unless
--keep); its id and token are printed so that another shell, a follower, or
an agent can use it. With --session and SANDBOXD_SESSION_TOKEN (or
--session-token), the shell opens in that session using only its token.

--follow SESSION (with the session's token in SANDBOXD_SESSION_TOKEN) shows
the agent's terminal live, read-only: each command the agent's terminal
tool runs ("$ command") and what it prints, colours included, whether or
not the agent asked for streamed output. Ctrl-C leaves. The agent's
terminal is 256 columns wide: long lines wrap at your terminal's width, and
a full-screen program the agent runs shows garbled. A follower that falls
more than 1 MiB behind loses the oldest output and is told so.

With stdin not a terminal (a pipe, a file), the shell works line by line
through the agent's terminal tool instead: each line runs after the
previous command finished, and with --session the output the server still
holds (and then everything any client runs) is shown first.`

func runShell(ctx context.Context, std stdio, args []string) error {
	var conn connFlags
	var sessionID, sessionToken, profile, image, follow string
	var keep bool
	fs := newFlagSet("shell", std, "[--session ID | --follow ID] [flags]  (the session's token in SANDBOXD_SESSION_TOKEN)", shellHelp)
	conn.register(fs)
	fs.StringVar(&sessionID, "session", "", "open the shell in this session instead of creating one")
	fs.StringVar(&follow, "follow", "", "watch this session's agent terminal, read-only")
	fs.StringVar(&sessionToken, "session-token", os.Getenv("SANDBOXD_SESSION_TOKEN"), "the session's token; prefer the env SANDBOXD_SESSION_TOKEN (a command line is visible to every user in ps)")
	fs.StringVar(&profile, "profile", "", "session profile of the server (serve --config) of a new session (default: the server's default profile)")
	fs.StringVar(&image, "image", "", "image of a new session (default: the profile's, else the server's)")
	fs.BoolVar(&keep, "keep", false, "leave a session this shell created running on exit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case follow != "" && (sessionID != "" || profile != "" || image != "" || keep):
		return usageErrorf("--follow watches a session: it takes no --session, --profile, --image or --keep")
	case follow != "" && sessionToken == "":
		return usageErrorf("--follow needs the session's token: SANDBOXD_SESSION_TOKEN (or --session-token)")
	case sessionID != "" && sessionToken == "":
		return usageErrorf("--session needs the session's token: SANDBOXD_SESSION_TOKEN (or --session-token)")
	}
	if sessionID != "" && (profile != "" || image != "") {
		return usageErrorf("--profile and --image are for a new session, not with --session")
	}
	if follow != "" {
		return followTerminal(ctx, std, conn.server, follow, sessionToken)
	}
	tty := isTerminal(std.in) && isTerminal(std.out)
	// Signals are handled here (Ctrl-C goes to the sandbox), not by ctx.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	work := context.WithoutCancel(ctx)

	token := sessionToken // attaching: the session's own token is all it needs
	if sessionID == "" {
		var err error
		if token, err = conn.operatorToken(); err != nil {
			return err
		}
	}
	dctx, cancel := context.WithTimeout(work, 30*time.Second)
	c, err := client.Dial(dctx, conn.server, token, client.Options{Reconnect: !tty})
	cancel()
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // the session's outcome is reported; a close error changes nothing

	// In line mode everything the session streams is printed, whoever runs
	// it; the output an attach replays (what the server still holds) comes
	// first. A terminal shows its own PTY only.
	printOutput := func(o wsproto.StreamOutput) { say(std.out, "%s", o.Data) }
	var s *client.Session
	cctx, cancel := context.WithTimeout(work, 3*time.Minute)
	switch {
	case sessionID != "" && tty:
		s = c.Session(sessionID, sessionToken)
	case sessionID != "":
		s, err = c.AttachOutput(cctx, sessionID, sessionToken, 0, printOutput)
	default:
		s, err = c.CreateSession(cctx, client.CreateOptions{Profile: profile, Image: image})
		if err == nil {
			if !tty {
				s.OnOutput = printOutput // a new session has no output yet
			}
			// The token goes in the environment, not on a command line
			// (which every user of the machine can read in ps).
			server := ""
			if conn.server != defaultServerURL {
				server = " --server " + conn.server
			}
			say(std.err, "session %s\nattach from elsewhere: SANDBOXD_SESSION_TOKEN=%s sandboxd shell%s --session %s\n", s.ID, s.Token, server, s.ID)
			if !keep {
				defer func() {
					ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
					defer cancel()
					_ = s.Close(ctx)
				}()
			}
		}
	}
	cancel()
	if err != nil {
		return err
	}
	if tty {
		return ptyShell(work, s, std, sigs)
	}
	return shellLoop(work, s, std, isTerminal(std.in), sigs)
}

// shellLoop forwards lines and signals to the session's terminal until
// stdin ends, a SIGTERM, or the session ends.
func shellLoop(ctx context.Context, s *client.Session, std stdio, tty bool, sigs <-chan os.Signal) error {
	lines := make(chan string)
	go func() {
		defer close(lines)
		r := bufio.NewReader(std.in)
		for {
			line, err := r.ReadString('\n')
			if line = strings.TrimRight(line, "\r\n"); line != "" || err == nil {
				lines <- line
			}
			if err != nil {
				return
			}
		}
	}()
	prompt := func() {
		if tty {
			say(std.err, "sandboxd:%.8s$ ", s.ID)
		}
	}
	call := func(action map[string]any) (running bool, err error) {
		action["timeout"] = pollSeconds
		obs, err := s.Call(ctx, "terminal", action, nil)
		if err != nil {
			return false, err
		}
		if obs.IsError {
			say(std.err, "%s\n", strings.TrimSpace(obs.Text()))
			return false, nil
		}
		_, running = terminalState(obs)
		return running, nil
	}

	running, eof := false, false
	prompt()
	for {
		var action map[string]any
		if running {
			var input <-chan string
			if tty { // typed-ahead lines go to the running command
				input = lines
			}
			select {
			case sig := <-sigs:
				if sig != os.Interrupt { // SIGTERM, SIGHUP: leave
					return nil
				}
				action = map[string]any{"command": "C-c", "is_input": true}
			case line, ok := <-input:
				if !ok {
					eof, lines = true, nil
					continue
				}
				if line == "" {
					line = "ENTER" // a blank line ends a block in python; "" would only poll
				}
				action = map[string]any{"command": line, "is_input": true}
			case <-s.Done():
				return sessionEnded(s)
			default:
				action = map[string]any{"command": ""} // wait for more output
			}
		} else {
			if eof {
				return nil
			}
			select {
			case sig := <-sigs:
				if sig != os.Interrupt { // SIGTERM, SIGHUP: leave
					return nil
				}
				say(std.err, "^C\n")
				prompt()
				continue
			case line, ok := <-lines:
				if !ok {
					return nil
				}
				if strings.TrimSpace(line) == "" {
					prompt()
					continue
				}
				action = map[string]any{"command": line}
			case <-s.Done():
				return sessionEnded(s)
			}
		}

		var err error
		if running, err = call(action); err != nil {
			return err
		}
		if !running {
			prompt()
		}
	}
}

func sessionEnded(s *client.Session) error {
	return fmt.Errorf("the session ended: %s", s.Reason())
}

// isTerminal reports whether f is a terminal (not merely a character
// device such as /dev/null).
func isTerminal(f any) bool {
	file, ok := f.(*os.File)
	return ok && term.IsTerminal(int(file.Fd()))
}
