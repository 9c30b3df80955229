package bash

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// ErrClosed is returned by Call after Close.
var ErrClosed = errors.New("terminal: executor is closed")

// Executor runs terminal actions in one persistent shell. Calls are
// serialised; a new command that arrives while another call is in flight is
// refused at once (it would be refused anyway: one command runs at a time).
type Executor struct {
	opts     Options
	cfg      sessionConfig
	user     string
	host     string
	ownState bool // StateDir was made by NewExecutor and goes with Close

	sem chan struct{} // one call at a time
	// holder is the Done channel of the call holding sem: a new command
	// that finds it closed (the call was cancelled and is stopping its
	// command) waits for it instead of being refused.
	holder atomic.Pointer[<-chan struct{}]

	mu     sync.Mutex // guards sess, closed and startErr
	sess   *session
	closed bool
	// initCandidates are the init files of ShellInitImage, checked again
	// at every start (startShell).
	initCandidates []string
	// startErr is why the first shell with init files did not start: the
	// next call's error (then that call's successor tries again).
	startErr error

	watch watchers // Watch: followers of the terminal's output
}

var _ tools.Executor[Action] = (*Executor)(nil)

// NewExecutor validates opts, starts the shell and waits for its first
// prompt.
func NewExecutor(opts Options) (*Executor, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("terminal: %w", err)
	}
	shell, isBash, err := findShell(opts.Shell)
	if err != nil {
		return nil, err
	}
	dir := opts.Dir
	if dir == "" {
		if dir, err = os.Getwd(); err != nil {
			return nil, fmt.Errorf("terminal: working directory: %w", err)
		}
	}
	if dir, err = filepath.Abs(dir); err != nil {
		return nil, fmt.Errorf("terminal: working directory: %w", err)
	}
	e := &Executor{opts: opts, sem: make(chan struct{}, 1)}
	state := opts.StateDir
	if state == "" {
		if state, err = os.MkdirTemp("", "sandboxd-terminal-"); err != nil {
			return nil, fmt.Errorf("terminal: state directory: %w", err)
		}
		e.ownState = true
	} else if err := os.MkdirAll(state, 0o700); err != nil {
		return nil, fmt.Errorf("terminal: state directory: %w", err)
	}
	if state, err = filepath.Abs(state); err != nil {
		return nil, fmt.Errorf("terminal: state directory: %w", err)
	}
	e.opts.StateDir = state
	e.cfg = sessionConfig{
		shell:    shell,
		bash:     isBash,
		dir:      dir,
		env:      shellEnv(os.Environ(), opts.Env),
		stateDir: state,
		outDir:   state,
		limit:    opts.MaxOutputChars,
		start:    opts.StartTimeout,
		grace:    opts.KillGrace,
		log:      opts.Logger.With("component", "terminal"),
		tap:      e.watch.emit,
	}
	e.user, e.host = whoAmI()
	if opts.ShellInit == ShellInitImage {
		// The files are the session's to fix: a failure is told to the
		// model and the client by the next call, not made the agent's.
		lookup := opts.lookupEnv
		if lookup == nil {
			lookup = os.LookupEnv
		}
		e.initCandidates = ImageInitFiles(isBash, lookup)
		if e.sess, err = e.startShell(); err != nil {
			e.startErr = err
			e.cfg.log.Warn("terminal: the shell did not start with shell_init: image; the next call says why", "err", err)
		} else {
			e.cfg.log.Info("terminal: shell started with shell_init: image", "files", e.initCandidates)
		}
		return e, nil
	}
	e.sess, err = startSession(e.cfg)
	if err != nil && opts.Shell == "" && isBash {
		// A bash that cannot start (a broken or foreign binary) should not
		// leave the session without a terminal when a sh works.
		if sh, _, shErr := findShell("sh"); shErr == nil {
			e.cfg.log.Warn("terminal: bash did not start; using sh", "bash", shell, "err", err)
			e.cfg.shell, e.cfg.bash = sh, false
			e.sess, err = startSession(e.cfg)
		}
	}
	if err != nil {
		if e.ownState {
			_ = os.RemoveAll(state)
		}
		return nil, err
	}
	return e, nil
}

// findShell resolves Options.Shell: bash if found, else sh; or the named
// shell. A minimal image may have no PATH, so /bin and /usr/bin are tried.
func findShell(name string) (path string, isBash bool, err error) {
	var candidates []string
	switch {
	case name == "":
		candidates = []string{"bash", "/bin/bash", "/usr/bin/bash", "sh", "/bin/sh", "/usr/bin/sh"}
	case strings.ContainsRune(name, '/'):
		candidates = []string{name}
	default:
		candidates = []string{name, "/bin/" + name, "/usr/bin/" + name}
	}
	for _, c := range candidates {
		p, err := exec.LookPath(c)
		if err == nil {
			if p, err = filepath.Abs(p); err == nil {
				return p, strings.Contains(filepath.Base(p), "bash"), nil
			}
		}
	}
	if name == "" {
		return "", false, errors.New("terminal: no shell found (looked for bash and sh in PATH, /bin and /usr/bin)")
	}
	return "", false, fmt.Errorf("terminal: shell %q not found or not executable", name)
}

// shellEnv is the inherited environment minus the variables that would
// change how the shell prompts or what it reads at start, plus pagers off,
// TERM, and the configured extras (which win).
func shellEnv(inherited []string, extra map[string]string) []string {
	drop := map[string]bool{"PS0": true, "PS1": true, "PS2": true, "PROMPT_COMMAND": true, "ENV": true, "BASH_ENV": true}
	vars := map[string]string{}
	for _, kv := range inherited {
		k, v, ok := strings.Cut(kv, "=")
		// SANDBOXD_IMAGE_*: the runtime's facts of the image, for the agent.
		if ok && !drop[k] && !strings.HasPrefix(k, ImageVarPrefix) {
			vars[k] = v
		}
	}
	vars["TERM"] = "xterm-256color"
	vars["PAGER"] = "cat"
	vars["GIT_PAGER"] = "cat"
	for k, v := range extra {
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

func whoAmI() (name, host string) {
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	} else if name = os.Getenv("USER"); name == "" {
		name = strconv.Itoa(os.Getuid())
	}
	host, _ = os.Hostname()
	return name, host
}

// Close ends the shell's whole session (SIGTERM, grace, SIGKILL) and waits
// for its goroutines. It is idempotent.
func (e *Executor) Close() error {
	e.mu.Lock()
	if e.closed {
		e.mu.Unlock()
		return nil
	}
	e.closed = true
	s := e.sess
	e.sess = nil
	e.mu.Unlock()
	if s != nil {
		s.terminate() // an in-flight call sees the shell end and returns
	}
	// Wait for an in-flight call to finish before removing its files.
	e.sem <- struct{}{}
	<-e.sem
	if e.ownState {
		return os.RemoveAll(e.opts.StateDir)
	}
	return nil
}

// Call runs one action. Failures the model should read are observations
// with IsError; a Go error means the call could not happen (context ended
// before it started, executor closed).
func (e *Executor) Call(ctx context.Context, a Action) (*tools.Observation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if obs := refuseAction(a); obs != nil {
		return obs, nil
	}
	k, isKey := parseKey(a.Command, a.IsInput)
	empty := strings.TrimSpace(a.Command) == ""
	if obs, err := e.acquire(ctx, a, !a.Reset && !a.IsInput && !isKey && !empty); obs != nil || err != nil {
		return obs, err
	}
	holderDone := ctx.Done()
	e.holder.Store(&holderDone)
	defer func() {
		e.holder.Store(nil)
		<-e.sem
	}()

	e.mu.Lock()
	closed, s := e.closed, e.sess
	e.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	c := call{command: a.Command}
	s, obs := e.ensureShell(&c, s, a, empty)
	if obs != nil {
		return obs, nil
	}

	// Output is streamed from before the command starts until Call returns.
	s.attachSink(tools.StreamFrom(ctx))
	defer s.setSink(nil)
	if obs := e.send(&c, s, a, k, isKey, empty); obs != nil {
		return obs, nil
	}
	return e.wait(ctx, s, &c, a.Timeout), nil
}

// refuseAction is the observation refusing an action that can never run,
// or nil.
func refuseAction(a Action) *tools.Observation {
	if a.Reset && a.IsInput {
		return tools.Errorf("Cannot use reset=True with is_input=True")
	}
	if strings.ContainsRune(a.Command, 0) {
		return tools.Errorf("The command contains a NUL character, which a terminal cannot send. Remove it (use printf '\\0' in the command to produce one).")
	}
	if !a.IsInput {
		if kind := literalKind(a.Command); kind != "" {
			return tools.Errorf("%s", literalMessage(a.Command, kind))
		}
	}
	if _, isKey := parseKey(a.Command, a.IsInput); a.IsInput && !isKey {
		if n := longestLine(typedInput(a.Command)); n > MaxInputLine {
			return tools.Errorf("A line of the input is %d bytes; a terminal passes at most %d bytes per line to a program that reads lines, and would silently drop the rest. Write the data to a file (file_editor create) and have the program read it, or send shorter lines.", n, MaxInputLine)
		}
	}
	return nil
}

// acquire takes the terminal for this call (e.sem). A new command does not
// wait: a call in flight makes it busy (unless that call is being
// cancelled). A poll, input or key waits for a call in flight (which may
// be waiting on the same command) for no longer than it would wait for
// output itself. A non-nil observation or error means it was not taken.
func (e *Executor) acquire(ctx context.Context, a Action, newCommand bool) (*tools.Observation, error) {
	if newCommand {
		select {
		case e.sem <- struct{}{}:
			return nil, nil
		default:
			if !e.awaitCancelled(ctx) {
				return e.busy(a.Command), nil
			}
			return nil, nil
		}
	}
	bound := e.opts.SoftTimeout
	if a.Timeout != nil && *a.Timeout > 0 {
		bound = timeoutDuration(*a.Timeout)
	}
	t := time.NewTimer(bound)
	defer t.Stop()
	select {
	case e.sem <- struct{}{}:
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return tools.Errorf("Another terminal call is still in flight (it waits for the running command and will return its output); this call waited %s for it and did nothing. Try again once that call has returned.", seconds(bound)), nil
	}
}

// ensureShell resets the shell when asked, or starts a new one when the
// last ended, noting it in c; it returns the shell to use, or the
// observation that ends the call.
func (e *Executor) ensureShell(c *call, s *session, a Action, empty bool) (*session, *tools.Observation) {
	if a.Reset {
		if s != nil {
			s.terminate()
		}
		var err error
		if s, err = e.restart(); err != nil {
			return nil, tools.Errorf("Terminal reset failed: %v", err)
		}
		c.restarted = true
		c.notes = append(c.notes, "Terminal session has been reset. All previous environment variables and session state have been cleared.")
		if empty {
			return nil, c.observation(Output{Command: "[RESET]", ExitCode: 0, ShellRestarted: true, Metadata: e.meta(s.lastMarker(), 0)}, false)
		}
		c.command = "[RESET] " + a.Command
		return s, nil
	}
	if s != nil && !s.hasExited() {
		return s, nil
	}
	if s == nil {
		e.mu.Lock()
		err := e.startErr
		e.startErr = nil
		e.mu.Unlock()
		if err != nil {
			return nil, tools.Errorf("The terminal could not start: %v. The next command tries to start it again.", err)
		}
	}
	note := "The previous shell session ended, so a new one was started. Environment variables, functions, background jobs and the working directory were reset."
	if s != nil {
		note = fmt.Sprintf("The previous shell session ended (exit code %d), so a new one was started. Environment variables, functions, background jobs and the working directory were reset.", s.exitCode())
		s.terminate() // ends processes the old shell left and its goroutines
	}
	var err error
	if s, err = e.restart(); err != nil {
		return nil, tools.Errorf("Starting a new shell failed: %v", err)
	}
	c.restarted = true
	c.notes = append(c.notes, note)
	return s, nil
}

// send gives the shell what the action carries: nothing (a poll of the
// running command), input or a key to it, or a new command; a non-nil
// observation ends the call.
func (e *Executor) send(c *call, s *session, a Action, k key, isKey, empty bool) *tools.Observation {
	running, done, _ := s.state()
	switch {
	case empty && !isKey:
		if !running {
			return c.errorf("No previous running command to retrieve logs from.")
		}
		c.continued = true
	case a.IsInput || isKey:
		if !running {
			return c.errorf("No previous running command to interact with.")
		}
		c.continued = true
		if done != nil {
			// The command ended before the input: sending it would type
			// into the shell itself.
			c.inputNotSent = true
			return nil
		}
		data := k.bytes
		if isKey {
			c.ctrl = k.ctrl
		} else {
			data = typedInput(a.Command)
		}
		if err := s.write([]byte(data)); err != nil {
			return c.errorf("Could not send the input: %v", err)
		}
	default: // a new command
		if running && done == nil {
			return e.refuse(c, s, a.Command)
		}
		if running {
			c.previous = s.takeDone()
		}
		if err := s.run(a.Command); err != nil {
			return c.errorf("Could not start the command: %v", err)
		}
	}
	return nil
}

// startShell starts a shell with the executor's config and, for
// ShellInitImage, the init files as they are now: one the session user
// cannot read fails every start alike (never a shell without it, which
// would be the system's python after the first call's error).
func (e *Executor) startShell() (*session, error) {
	if e.opts.ShellInit != ShellInitImage {
		return startSession(e.cfg)
	}
	files, err := readableInitFiles(e.initCandidates)
	if err != nil {
		return nil, initError(e.initCandidates, err)
	}
	cfg := e.cfg
	cfg.initFiles = files
	return startSession(cfg)
}

// restart replaces the session (the old one is already terminated).
func (e *Executor) restart() (*session, error) {
	s, err := e.startShell()
	// EAGAIN: the pids limit is still full, of processes that are dying
	// (a fork bomb's, killed by terminate: the container's init reaps them)
	// or that escaped the shell's session. Try again for a few seconds
	// rather than leave the session without a shell.
	for wait := 50 * time.Millisecond; err != nil && errors.Is(err, syscall.EAGAIN) && wait <= 2*time.Second; wait *= 2 {
		time.Sleep(wait)
		s, err = e.startShell()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		if s != nil {
			s.terminate()
		}
		return nil, ErrClosed
	}
	e.sess = s // nil on error: the next call tries again
	return s, err
}

// interruptGrace bounds how long a cancelled call waits, after SIGINT, for
// its command to stop (a trap that cleans up, a program that flushes), so
// the cancel answers once the command has stopped; it ends as soon as the
// command does. A command that ignores SIGINT is left running past it and
// the call says so. (It was 250 ms, then 1 s: a 0.2 s cleanup trap
// outlived both on a loaded machine, load 7 beside a CPU hog; 5 s is 25
// times that trap, and what a command that ignores SIGINT costs a cancel.)
const interruptGrace = 5 * time.Second

// cancelledGrace bounds how long a new command waits for a cancelled call
// to finish stopping its command (finishCancelled waits interruptGrace).
const cancelledGrace = interruptGrace + time.Second

// busyGrace is how long a new command that finds a call in flight waits for
// that call to end or be cancelled before it is refused. Clients cancel
// asynchronously (the MCP Go SDK sends notifications/cancelled from a
// goroutine after the caller returned), so the cancel of a call may arrive
// just after the next command.
const busyGrace = 250 * time.Millisecond

// awaitCancelled takes sem for a new command that found it held: the call
// holding it ends within busyGrace, or is cancelled within busyGrace and
// then stops within cancelledGrace. A client that cancels and at once sends
// the next command gets it run, not refused. It reports whether sem was
// taken; if not, the command is refused as busy.
func (e *Executor) awaitCancelled(ctx context.Context) bool {
	var cancelled <-chan struct{} // nil (never ready) if the holder is unknown
	if h := e.holder.Load(); h != nil {
		cancelled = *h
	}
	t := time.NewTimer(busyGrace)
	defer t.Stop()
	select {
	case e.sem <- struct{}{}:
		return true
	case <-cancelled:
	case <-t.C:
		return false
	case <-ctx.Done():
		return false
	}
	t.Reset(cancelledGrace)
	select {
	case e.sem <- struct{}{}:
		return true
	case <-ctx.Done():
	case <-t.C:
	}
	return false
}

// busy refuses a new command while another call is in flight.
func (e *Executor) busy(command string) *tools.Observation {
	c := call{command: command}
	meta := Metadata{ExitCode: -1, PID: -1}
	meta.Suffix = notExecuted(command)
	return c.result(Output{Command: command, ExitCode: -1, Metadata: meta}, "", true)
}

func notExecuted(command string) string {
	return fmt.Sprintf("\n[Your command %q is NOT executed. The previous command is still running - You CANNOT send new commands until the previous command is completed. By setting `is_input` to `true`, you can interact with the current process: %s If the terminal does not respond even to C-c (for example after a command changed PROMPT_COMMAND or PS1, or replaced the shell with exec), set `reset` to `true` to start a fresh shell.]", strings.TrimSpace(command), timeoutTemplate)
}

// refuse answers a new command while the previous one still runs: nothing
// is executed; the output printed since the last call is shown.
func (e *Executor) refuse(c *call, s *session, command string) *tools.Observation {
	r := s.takeOutput().Finish()
	meta := Metadata{ExitCode: -1, PID: -1, Suffix: notExecuted(command)}
	out := strings.TrimRight(r.Text, " \t\r\n")
	if out != "" {
		meta.Prefix = continuedPrefix
	}
	return c.result(Output{Command: command, ExitCode: -1, Truncated: r.Truncated, FullOutputPath: r.Path, Metadata: meta}, out, true)
}

const continuedPrefix = "[Below is the output of the previous command.]\n"

// wait waits for the command to end, the soft timeout, the hard timeout or
// the wall-clock cap, the shell to exit, or ctx; then builds the result.
func (e *Executor) wait(ctx context.Context, s *session, c *call, timeout *float64) *tools.Observation {
	start := time.Now()
	soft := e.opts.SoftTimeout
	limit, kind := e.opts.MaxWait, TimeoutLimit
	if timeout != nil && *timeout > 0 {
		soft = 0 // like OpenHands: an explicit timeout disables the soft one
		limit, kind = timeoutDuration(*timeout), TimeoutHard
	}
	hardAt := start.Add(limit)
	if c.inputNotSent {
		return e.finishDone(c, s.takeDone())
	}

	timer := time.NewTimer(limit)
	defer timer.Stop()
	for {
		if d := s.takeDone(); d != nil {
			return e.finishDone(c, d)
		}
		s.mu.Lock()
		exited, lastOut := s.exited, s.lastOut
		s.mu.Unlock()
		if exited {
			return e.finishExited(c, s)
		}
		now := time.Now()
		if now.After(hardAt) || now.Equal(hardAt) {
			return e.finishTimeout(c, s, kind, limit)
		}
		next := hardAt
		if soft > 0 {
			if lastOut.Before(start) {
				lastOut = start
			}
			softAt := lastOut.Add(soft)
			if !now.Before(softAt) {
				return e.finishTimeout(c, s, TimeoutSoft, soft)
			}
			if softAt.Before(next) {
				next = softAt
			}
		}
		timer.Reset(next.Sub(now))
		select {
		case <-s.wake:
		case <-timer.C:
		case <-ctx.Done():
			return e.finishCancelled(c, s)
		}
	}
}

// MaxTimeout caps the `timeout` parameter: larger values (up to 1e308 pass
// the schema) would overflow a time.Duration and return at once.
const MaxTimeout = 24 * time.Hour

// MaxInputLine is the most a terminal in canonical mode passes on per line
// (N_TTY_BUF_SIZE less the newline); longer input lines are cut silently.
const MaxInputLine = 4095

// timeoutDuration converts a `timeout` in seconds, capped at MaxTimeout.
func timeoutDuration(sec float64) time.Duration {
	if sec >= MaxTimeout.Seconds() {
		return MaxTimeout
	}
	return time.Duration(sec * float64(time.Second))
}

// longestLine is the length of the longest line of typed input (lines end
// with the Enter typedInput adds).
func longestLine(typed string) int {
	n := 0
	for _, l := range strings.Split(typed, "\r") {
		n = max(n, len(l))
	}
	return n
}
