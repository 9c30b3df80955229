package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/wsproto"
)

func init() {
	register(&command{
		name:    "shell",
		summary: "interactive terminal in a sandbox: a new session, or attach to one with its token",
		run:     runShell,
	})
}

const shellHelp = `
Attaches to the terminal of a session and sends it the lines you type: a
line is a new command, or, while a command still runs, input to it. Ctrl-C
interrupts the running command (C-c); Ctrl-D (end of input) leaves.

Without --session, a new session is created (and closed on leaving, unless
--keep); its id and token are printed so that another shell, or an agent,
can attach. With --session and SANDBOXD_SESSION_TOKEN (or --session-token),
the shell attaches to that session using only its token, shows the output
the server still holds, and then everything any client runs in it.

With stdin not a terminal (a pipe, a file), each line runs after the
previous command finished.`

func runShell(ctx context.Context, std stdio, args []string) error {
	var conn connFlags
	var sessionID, sessionToken, profile, image string
	var keep bool
	fs := newFlagSet("shell", std, "[--session ID (token in SANDBOXD_SESSION_TOKEN)] [flags]", shellHelp)
	conn.register(fs)
	fs.StringVar(&sessionID, "session", "", "attach to this session instead of creating one")
	fs.StringVar(&sessionToken, "session-token", os.Getenv("SANDBOXD_SESSION_TOKEN"), "the session's token; prefer the env SANDBOXD_SESSION_TOKEN (a command line is visible to every user in ps)")
	fs.StringVar(&profile, "profile", "", "session profile of the server (serve --config) of a new session (default: the server's default profile)")
	fs.StringVar(&image, "image", "", "image of a new session (default: the profile's, else the server's)")
	fs.BoolVar(&keep, "keep", false, "leave a session this shell created running on exit")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if sessionID != "" && sessionToken == "" {
		return usageErrorf("--session needs the session's token: SANDBOXD_SESSION_TOKEN (or --session-token)")
	}
	if sessionID != "" && (profile != "" || image != "") {
		return usageErrorf("--profile and --image are for a new session, not with --session")
	}
	// Signals are handled here (Ctrl-C goes to the sandbox), not by ctx.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
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
	c, err := client.Dial(dctx, conn.server, token, client.Options{Reconnect: true})
	cancel()
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // the session's outcome is reported; a close error changes nothing

	// Everything the session streams is printed, whoever runs it; the
	// output an attach replays (what the server still holds) comes first.
	printOutput := func(o wsproto.StreamOutput) { say(std.out, "%s", o.Data) }
	var s *client.Session
	cctx, cancel := context.WithTimeout(work, 3*time.Minute)
	if sessionID != "" {
		s, err = c.AttachOutput(cctx, sessionID, sessionToken, 0, printOutput)
	} else {
		s, err = c.CreateSession(cctx, client.CreateOptions{Profile: profile, Image: image})
		if err == nil {
			s.OnOutput = printOutput // a new session has no output yet
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
				if sig == syscall.SIGTERM {
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
				if sig == syscall.SIGTERM {
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

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
