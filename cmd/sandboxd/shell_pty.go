package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/sandboxd/sandboxd/client"
)

// ptyShell attaches the user's terminal (std.in and std.out are terminals)
// to a PTY of its own in session s: raw mode, so every key (Ctrl-C, Ctrl-Z,
// Tab, arrows) goes to the sandbox; window size changes follow (SIGWINCH).
// It returns when the remote shell ends (with its exit code), on SIGTERM or
// SIGHUP, or when the connection is lost; the terminal is restored.
func ptyShell(ctx context.Context, s *client.Session, std stdio, sigs <-chan os.Signal) error {
	in, out := std.in.(*os.File), std.out.(*os.File)
	rows, cols := termSize(out)
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	p, err := s.OpenPTY(octx, client.PTYOptions{Rows: rows, Cols: cols})
	cancel()
	if err != nil {
		return fmt.Errorf("opening a terminal in the session: %w", err)
	}
	defer func() { _ = p.Close() }() // after the end it only reads the status

	saved, err := term.MakeRaw(int(in.Fd()))
	if err != nil {
		return fmt.Errorf("putting the terminal in raw mode: %w", err)
	}
	defer func() { _ = term.Restore(int(in.Fd()), saved) }() // nothing to tell if it fails: we are leaving

	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	defer signal.Stop(winch)

	// Keys go to the sandbox as they are typed; a read ends with stdin's
	// end (the goroutine is left blocked in Read otherwise: the process
	// is about to exit).
	inputDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(p, in)
		inputDone <- err
	}()
	outputDone := make(chan error, 1)
	go func() {
		_, err := io.Copy(out, p)
		outputDone <- err
	}()
	for {
		select {
		case err := <-outputDone:
			if err != nil {
				return fmt.Errorf("writing to the terminal: %w", err)
			}
			return ptyOutcome(p)
		case err := <-inputDone:
			if err != nil && !errors.Is(err, client.ErrPTYEnded) {
				return fmt.Errorf("sending input: %w", err)
			}
			inputDone = nil // stdin ended: the shell goes on until it exits
		case <-winch:
			if r, c := termSize(out); r != rows || c != cols {
				rows, cols = r, c
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				_ = p.Resize(rctx, rows, cols) // a lost resize shows as a wrong size, not an error worth leaving for
				cancel()
			}
		case sig := <-sigs:
			if sig == os.Interrupt {
				continue // not from the keyboard (raw mode): ignore, as a terminal emulator would
			}
			return nil
		}
	}
}

// ptyOutcome turns how the remote shell ended into this command's result.
func ptyOutcome(p *client.PTY) error {
	st, _ := p.Status()
	switch {
	case st.Error != "":
		return fmt.Errorf("the terminal ended: %s", st.Error)
	case st.ExitCode != 0:
		return exitCodeError(st.ExitCode)
	}
	return nil
}

// followTerminal prints the agent's terminal of session id, live, until
// ctx ends (Ctrl-C) or the session does.
func followTerminal(ctx context.Context, std stdio, server, id, token string) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := client.Dial(dctx, server, token, client.Options{})
	cancel()
	if err != nil {
		return err
	}
	defer func() { _ = c.Close() }() // leaving: nothing to report
	octx, cancel := context.WithTimeout(ctx, time.Minute)
	f, err := c.Session(id, token).OpenPTY(octx, client.PTYOptions{Follow: true})
	cancel()
	if err != nil {
		return fmt.Errorf("following session %s: %w", id, err)
	}
	defer func() { _ = f.Close() }() // leaving: the follower's end changes nothing
	say(std.err, "following the agent's terminal of session %s (read-only; Ctrl-C leaves)\n", id)
	done := make(chan error, 1)
	go func() {
		_, err := io.Copy(std.out, f)
		done <- err
	}()
	select {
	case <-ctx.Done():
		return nil
	case err := <-done:
		if err != nil {
			return err
		}
		if st, _ := f.Status(); st.Error != "" {
			return fmt.Errorf("the view ended: %s", st.Error)
		}
		return nil
	}
}

// termSize is the terminal's size, 24x80 if it cannot be read.
func termSize(f *os.File) (rows, cols int) {
	w, h, err := term.GetSize(int(f.Fd()))
	if err != nil || w <= 0 || h <= 0 {
		return 24, 80
	}
	return h, w
}
