package bash

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/internal/output"
)

// session is one shell process on a pty. A reader goroutine turns the pty
// output into cleaned text (accumulated for the current call, streamed to
// its sink) and markers (command ends); a waiter goroutine notices when the
// shell process ends. Both signal wake; there is no polling.
// TagVar is the environment variable that tags every process a terminal
// started (see session.tag); reset and close end them all.
const TagVar = "SANDBOXD_TERMINAL"

// outputPrefix names the files that keep the full output of a cut command
// (terminal_output_<random>.txt in the state directory), as OpenHands does.
const outputPrefix = "terminal_output_"

type session struct {
	cfg     sessionConfig
	log     *slog.Logger
	cmd     *exec.Cmd
	pid     int
	master  *os.File
	base    *unix.Termios
	codec   markerCodec
	cmdFile string
	// tag is an environment entry of the shell, inherited by everything
	// it starts: terminate also finds processes that left the shell's
	// session (setsid, daemons) by it. Not the marker nonce, which a
	// command must not learn.
	tag string

	mu      sync.Mutex
	scanner markerScanner
	clean   cleaner
	acc     *output.Accum
	seq     uint64      // seq of the last command sent
	running bool        // a command was sent and its end not yet handed to a call
	done    *completion // end of the command with seq == s.seq
	last    marker      // the newest marker, for the working directory
	lastOut time.Time   // when output last arrived
	sink    tools.StreamFunc
	// unstreamed is output of the running command that arrived while no
	// call was attached (between two polls); the next call streams it
	// first, so a client following the stream misses nothing. Bounded by
	// maxUnstreamed. While following (the last call streamed), a full
	// buffer pauses the reading of the pty, so the command waits for the
	// next poll as it would for a slow pipe and nothing is lost; without a
	// follower what is beyond is still in the call's result.
	unstreamed []byte
	following  bool
	stopping   bool       // terminate runs: the reader must not pause
	room       *sync.Cond // on mu: signalled when a paused reader may read again
	exited     bool
	code       int // exit status of the shell once exited

	// streamMu is held while a sink runs, so a call can wait out a sink
	// invocation before it returns (no chunk arrives after the result).
	streamMu sync.Mutex

	wake       chan struct{} // capacity 1: "something changed"
	exitedCh   chan struct{}
	readerDone chan struct{}
}

// completion is a finished command: its marker and its output.
type completion struct {
	m   marker
	acc *output.Accum
}

type sessionConfig struct {
	shell    string // path
	bash     bool   // bash flavour (else POSIX sh)
	dir      string
	env      []string
	stateDir string // private files (init script, command file)
	limit    int    // output chars per call
	outDir   string // where full outputs go
	start    time.Duration
	grace    time.Duration
	// initFiles are read before the plumbing is set (Options.ShellInit).
	initFiles []string
	log       *slog.Logger
	// tap, if set, gets the pty's output as it arrives (markers taken out)
	// and each command as it starts (Executor.Watch).
	tap func([]byte)
}

// startSession starts a shell and waits for its first prompt.
func startSession(cfg sessionConfig) (*session, error) {
	if err := os.MkdirAll(cfg.stateDir, 0o700); err != nil {
		return nil, fmt.Errorf("terminal state directory: %w", err)
	}
	nonce := newNonce()
	s := &session{
		cfg:        cfg,
		log:        cfg.log,
		codec:      newMarkerCodec(nonce),
		cmdFile:    filepath.Join(cfg.stateDir, ".command-"+nonce),
		tag:        TagVar + "=" + newNonce(),
		wake:       make(chan struct{}, 1),
		exitedCh:   make(chan struct{}),
		readerDone: make(chan struct{}),
		running:    true, // the init script is "command" 0
	}
	s.scanner.codec = s.codec
	s.room = sync.NewCond(&s.mu)
	s.acc = output.New(cfg.limit, cfg.outDir, outputPrefix)
	s.lastOut = time.Now()

	initFile := filepath.Join(cfg.stateDir, ".init-"+nonce+".sh")
	if err := os.WriteFile(initFile, []byte(s.initScript()), 0o600); err != nil {
		return nil, fmt.Errorf("terminal init script: %w", err)
	}
	defer func() { _ = os.Remove(initFile) }() // on the RunDir tmpfs: a leftover is evicted with it

	master, slave, err := openPTY()
	if err != nil {
		return nil, fmt.Errorf("terminal pty: %w", err)
	}
	s.master = master
	if s.base, err = configureTTY(master); err != nil {
		master.Close()
		slave.Close()
		return nil, fmt.Errorf("terminal pty: %w", err)
	}

	var args []string
	env := append(cfg.env[:len(cfg.env):len(cfg.env)], s.tag)
	if cfg.bash {
		args = []string{"--noprofile", "--rcfile", initFile, "--noediting", "-i"}
	} else {
		args = []string{"-i"}
		env = append(env[:len(env):len(env)], "ENV="+initFile)
	}
	s.cmd = exec.Command(cfg.shell, args...)
	if !cfg.bash {
		// dash and busybox name the shell in messages by argv[0]: "sh: 1:
		// x: not found" as in a terminal, not "/usr/bin/sh: 1: ...".
		// (busybox picks the applet by the base name too.)
		s.cmd.Args[0] = filepath.Base(cfg.shell)
	}
	s.cmd.Dir = cfg.dir
	s.cmd.Env = env
	s.cmd.Stdin, s.cmd.Stdout, s.cmd.Stderr = slave, slave, slave
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	err = s.cmd.Start()
	slave.Close() // the child has it; our copy would keep the pty open
	if err != nil {
		master.Close()
		return nil, fmt.Errorf("terminal: start %s: %w", cfg.shell, err)
	}
	s.pid = s.cmd.Process.Pid
	// Before the first command, so every process of the terminal has it.
	if err := preferForOOM(s.pid); err != nil {
		s.log.Debug("terminal: raising the shell's oom_score_adj", "err", err)
	}
	go s.readLoop()
	go s.waitLoop()

	if err := s.awaitInit(initFile); err != nil {
		s.terminate()
		return nil, err
	}
	return s, nil
}

// initScript configures the shell. bash reads it as its rc file, POSIX
// shells as $ENV. bash prints the marker from PROMPT_COMMAND, other shells
// from PS1 (see markerCodec).
func (s *session) initScript() string {
	return strings.Join([]string{
		"unset ENV PROMPT_COMMAND PS0 2>/dev/null",
		strings.TrimSuffix(initPrelude(s.cfg.initFiles, s.cfg.dir, s.cfg.bash), "\n"),
		"__sbx_seq=0",
		"PS2=''",
		`if [ -n "${BASH_VERSION:-}" ]; then`,
		"  set +H",
		"  set +o history",
		"  " + s.codec.bashPrompt(),
		// Braces keep `set -x` traces of this plumbing out of the output.
		// It calls no command a user may redefine as a function (`:` is
		// the fork bomb's name): the assignment last makes its status 0
		// although read reports the end of input.
		`  __sbx_run() { { __sbx_st=$?; __sbx_c=; IFS= read -r -d '' __sbx_c; __sbx_seq=$1; ` + xtraceOff + `; } 2>/dev/null; }`,
		`  PROMPT_COMMAND='{ __sbx_prompt "$?"; } 2>/dev/null'`,
		"  PS1=''",
		"else",
		"  __sbx_ps1='" + s.codec.ps1() + "'",
		"  PS1=$__sbx_ps1",
		// The command file is one line that quotes the command (see
		// shCommandLine): read takes it whole, eval of the assignment
		// restores its newlines. PS1 is set again in case a script (a
		// virtualenv's activate) changed it.
		`  __sbx_run() { { __sbx_st=$?; __sbx_nl='`,
		`'; __sbx_c=; IFS= read -r __sbx_c && eval "__sbx_c=$__sbx_c"; __sbx_seq=$1; PS1=$__sbx_ps1; PS2=; ` + xtraceOff + `; } 2>/dev/null; }`,
		// busybox ash reads its input with fgets when the terminal's echo
		// is off, and a SIGCHLD (a background job ending) while it waits
		// there makes fgets fail, which it takes for end of input: it
		// would exit. With ignoreeof it says `Use "exit" to leave shell.`
		// (which ingest drops), prompts again and lives on. (dash retries
		// the read; for it, and a C-d typed ahead, the option is harmless.)
		"  set -o ignoreeof 2>/dev/null",
		"fi",
		// __sbx_run saved the status of the previous command; __sbx_ret
		// gives it back just before eval, so `$?` in a command is that of
		// the one before, as at a terminal (see commandLine).
		`__sbx_ret() { return "${__sbx_st:-0}"; }`,
		initEpilogue(s.cfg.initFiles, s.cfg.bash),
	}, "\n")
}

// xtraceOff (in __sbx_run, and in bash's prompt function) keeps `set -x`
// traces of the plumbing out of the output: with xtrace on it turns it off
// and remembers that in __sbx_x, and the command to run gets a prefix that
// turns it back on, silently, and gives back the previous command's status
// for `$?` (not with `set -e`, where a non-zero status there would end the
// shell: `$?` is then 0). A command whose first line does not parse never
// runs the prefix; __sbx_x stays set, and the next command gets it. The
// commands themselves are traced one level deeper than at a terminal
// ("++ echo hi"): they run through eval.
const xtraceOff = `case $-$__sbx_x in *x*) set +x; __sbx_x=x; case $- in ` +
	`*e*) __sbx_c="{ __sbx_x=; set -x; } 2>/dev/null; $__sbx_c";; ` +
	`*) __sbx_c="{ __sbx_x=; set -x; __sbx_ret; } 2>/dev/null; $__sbx_c";; esac;; esac`

// awaitInit waits for the first marker. A shell that ignored the rc/ENV
// file gets the init script typed in after a short while; not bash with
// init files, which reads its --rcfile always and may take longer than
// that to read them (the typed line would run the init a second time).
func (s *session) awaitInit(initFile string) error {
	return initError(s.cfg.initFiles, s.awaitPrompt(initFile))
}

func (s *session) awaitPrompt(initFile string) error {
	start := time.Now()
	typed := s.cfg.bash && len(s.cfg.initFiles) > 0
	timer := time.NewTimer(min(2*time.Second, s.cfg.start))
	defer timer.Stop()
	for {
		s.mu.Lock()
		done, exited, code := s.done, s.exited, s.code
		if done != nil {
			s.running, s.done = false, nil
		}
		s.mu.Unlock()
		if done != nil {
			if r := done.acc.Finish(); strings.TrimSpace(r.Text) != "" {
				s.log.Debug("terminal: shell start output", "text", r.Text)
			}
			return nil
		}
		if exited {
			return fmt.Errorf("terminal: shell %s exited with code %d while starting", s.cfg.shell, code)
		}
		select {
		case <-s.wake:
		case <-timer.C:
			if time.Since(start) >= s.cfg.start {
				return fmt.Errorf("terminal: shell %s showed no prompt within %v", s.cfg.shell, s.cfg.start)
			}
			if !typed {
				typed = true
				s.log.Debug("terminal: shell ignored its init file; typing it", "shell", s.cfg.shell)
				if err := s.write([]byte(". " + shellQuote(initFile) + "\n")); err != nil {
					return err
				}
			}
			timer.Reset(s.cfg.start - time.Since(start))
		}
	}
}

func (s *session) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

func (s *session) readLoop() {
	defer close(s.readerDone)
	buf := make([]byte, 64<<10)
	for {
		s.waitRoom()
		n, err := s.master.Read(buf)
		if n > 0 {
			s.ingest(buf[:n])
		}
		if err != nil {
			break
		}
	}
	s.mu.Lock()
	// The shell is gone: what was held as a possible marker is output.
	if h := s.scanner.flush(); len(h) > 0 {
		s.acc.Add(s.clean.write(h))
	}
	s.mu.Unlock()
	s.signal()
}

// ingest processes a chunk of pty output.
func (s *session) ingest(p []byte) {
	if !s.cfg.bash {
		p = dropEOFNotice(p)
	}
	var stream []byte
	s.mu.Lock()
	s.lastOut = time.Now()
	out := func(b []byte) {
		if s.cfg.tap != nil {
			s.cfg.tap(b)
		}
		t := s.clean.write(b)
		s.acc.Add(t)
		switch {
		case s.done != nil:
		case s.sink != nil:
			stream = append(stream, t...)
		case s.running && s.following:
			s.unstreamed = append(s.unstreamed, t...) // waitRoom bounds it
		case s.running && len(s.unstreamed) < maxUnstreamed:
			s.unstreamed = append(s.unstreamed, t[:min(len(t), maxUnstreamed-len(s.unstreamed))]...)
		}
	}
	s.scanner.feed(p, out, func(m marker) {
		t := s.clean.finish()
		s.acc.Add(t)
		if s.sink != nil && s.done == nil {
			stream = append(stream, t...)
		}
		s.last = m
		if s.running && s.done == nil && m.seq == s.seq {
			s.done = &completion{m: m, acc: s.acc}
			s.acc = output.New(s.cfg.limit, s.cfg.outDir, outputPrefix)
		}
	})
	s.streamLocked(stream)
	s.signal()
}

// eofNotice is what busybox ash with ignoreeof prints on end of input: it
// takes a wait for input interrupted by SIGCHLD for one (see initScript).
const eofNotice = `Use "exit" to leave shell.`

// dropEOFNotice removes eofNotice and the newlines around it (the shell
// prints "\nUse ...\n"; the pty makes "\n" "\r\n").
func dropEOFNotice(p []byte) []byte {
	if !bytes.Contains(p, []byte(eofNotice)) {
		return p
	}
	for _, nl := range []string{"\r\n", "\n"} {
		p = bytes.ReplaceAll(p, []byte(nl+eofNotice+nl), nil)
	}
	return p
}

// maxUnstreamed bounds the output kept for the next call's stream.
const maxUnstreamed = 1 << 20

// streamLocked hands text to the sink; it is called with mu held and
// returns with it released.
func (s *session) streamLocked(text []byte) {
	sink := s.sink
	if sink == nil || len(text) == 0 {
		s.mu.Unlock()
		return
	}
	s.streamMu.Lock()
	s.mu.Unlock()
	defer s.streamMu.Unlock()
	sink(text)
}

// waitRoom pauses the reader while a follower's unstreamed output is full,
// until a call takes it (or the session ends).
func (s *session) waitRoom() {
	s.mu.Lock()
	for s.running && s.following && s.sink == nil && !s.stopping && len(s.unstreamed) >= maxUnstreamed {
		s.room.Wait()
	}
	s.mu.Unlock()
}

// attachSink starts a call: f (nil when the caller does not stream)
// receives the output until detachSink. A streaming caller is followed
// between its polls; a caller that does not stream ends the following.
func (s *session) attachSink(f tools.StreamFunc) {
	s.mu.Lock()
	s.following = f != nil
	s.mu.Unlock()
	s.setSink(f)
}

func (s *session) setSink(f tools.StreamFunc) {
	s.mu.Lock()
	s.sink = f
	s.room.Broadcast()
	if f != nil && len(s.unstreamed) > 0 {
		pending := s.unstreamed
		s.unstreamed = nil
		s.streamLocked(pending) // releases mu
		return
	}
	s.mu.Unlock()
	if f == nil {
		// Wait out a sink call in progress.
		s.streamMu.Lock()
		s.streamMu.Unlock() //nolint:staticcheck // empty critical section on purpose
	}
}

func (s *session) waitLoop() {
	err := s.cmd.Wait()
	code := 0
	if ps := s.cmd.ProcessState; ps != nil {
		code = ps.ExitCode()
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	} else if err != nil {
		code = -1
	}
	s.mu.Lock()
	s.exited, s.code = true, code
	s.mu.Unlock()
	close(s.exitedCh)
	s.signal()
}

// write sends bytes to the terminal. A program that does not read its
// input can fill the pty's buffer; the deadline keeps the call from hanging.
func (s *session) write(b []byte) error {
	if err := s.master.SetWriteDeadline(time.Now().Add(5 * time.Second)); err != nil {
		return err
	}
	_, err := s.master.Write(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return errors.New("the terminal's input buffer is full: the running program is not reading its input")
	}
	return err
}

// run starts a command: its text goes to a private file that one short
// typed line runs, so no line-length limit of the pty's line editor (4095
// bytes) applies, heredocs and multi-line scripts arrive whole, and the
// whole text is one command that ends with one prompt.
func (s *session) run(command string) error {
	if err := restoreTTY(s.master, s.base); err != nil {
		s.log.Debug("terminal: restore tty settings", "err", err)
	}
	data := []byte(command + "\n")
	if !s.cfg.bash {
		data = shCommandLine(command + "\n")
	}
	if err := os.WriteFile(s.cmdFile, data, 0o600); err != nil {
		// The directory may have been removed by a command; recreate it.
		if mkErr := os.MkdirAll(filepath.Dir(s.cmdFile), 0o700); mkErr != nil {
			return fmt.Errorf("write command file: %w", err)
		}
		if err := os.WriteFile(s.cmdFile, data, 0o600); err != nil {
			return fmt.Errorf("write command file: %w", err)
		}
	}
	s.mu.Lock()
	s.seq++
	seq := s.seq
	s.running, s.done, s.unstreamed = true, nil, nil
	if s.cfg.tap != nil {
		s.cfg.tap(commandEcho(command))
	}
	s.room.Broadcast()
	s.mu.Unlock()
	// eval keeps error messages as at an interactive prompt ("bash: x:
	// command not found", "sh: 1: eval: x: not found"): they do not name
	// the command file, as those of `. file` do. __sbx_run reads the file
	// with the read builtin (no fork). The line starts with a plain command
	// word: after an "unexpected EOF" syntax error inside eval, bash does
	// not treat the first word of its next input line as a reserved word.
	//
	// eval also keeps job notices in place in dash and busybox ash: `.`
	// prints those pending before it runs the file, so a job that ended
	// after the last prompt would open the command's output; at the
	// prompt, after the command, they end it, as at a terminal.
	return s.write(commandLine(seq, s.cmdFile, s.cfg.bash))
}

// commandLine is the line typed into the shell to run command number seq
// from cmdFile. The `if` restores the previous command's exit status for
// the command's `$?` (__sbx_run's own status is the guard: a failed
// redirect must not run the last command again); in an if's condition a
// non-zero status does not end a shell that has `set -e`, and the braces
// keep `set -x` traces of __sbx_ret out of the output. bash's line starts
// with __sbx_run, a plain command word (see run), which its prompt function
// has made sure runs untraced (xtraceOff); a POSIX sh, which has no prompt
// function, gets __sbx_run in braces that send its trace to /dev/null.
func commandLine(seq uint64, cmdFile string, bash bool) []byte {
	run := `eval "$__sbx_c"`
	call := "__sbx_run " + strconv.FormatUint(seq, 10) + " <" + shellQuote(cmdFile)
	if !bash {
		call = "{ " + call + "; } 2>/dev/null"
	}
	return []byte(call + " && if { __sbx_ret; } 2>/dev/null; then " + run + "; else " + run + "; fi\n")
}

// shCommandLine is the command file of a POSIX sh: one line, a shell word
// that __sbx_run assigns to __sbx_c with eval. A POSIX read has no -d to
// read a file whole, so the text's newlines are written as
// '"$__sbx_nl"' (dash has no $'\n').
func shCommandLine(text string) []byte {
	return []byte(strings.ReplaceAll(shellQuote(text), "\n", `'"$__sbx_nl"'`) + "\n")
}

// interrupt sends SIGINT to the terminal's foreground process group, as
// Ctrl+C does (but also when a program turned ISIG off).
func (s *session) interrupt() {
	pgrp, err := foregroundPgrp(s.master)
	if err != nil || pgrp <= 0 {
		_ = s.write([]byte{0x03})
		return
	}
	_ = unix.Kill(-pgrp, unix.SIGINT)
}

// takeOutput hands the output collected so far to a call that returns
// before the command ended; the unfinished last line goes with it.
func (s *session) takeOutput() *output.Accum {
	s.mu.Lock()
	t := s.clean.flushLine()
	s.acc.Add(t)
	acc := s.acc
	s.acc = output.New(s.cfg.limit, s.cfg.outDir, outputPrefix)
	s.streamLocked(append([]byte(nil), t...))
	return acc
}

// state reports the command state without changing it.
func (s *session) state() (running bool, done *completion, exited bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.done, s.exited
}

// takeDone hands the finished command to a call.
func (s *session) takeDone() *completion {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := s.done
	if d != nil {
		s.done, s.running = nil, false
		s.room.Broadcast()
	}
	return d
}

func (s *session) exitCode() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.code
}

// lastMarker is the newest prompt seen.
func (s *session) lastMarker() marker {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// terminate ends the shell and every process of its session: SIGTERM (and
// SIGHUP, which an interactive shell does not ignore) to all, a grace
// period, then SIGKILL; then it closes the pty and waits for both
// goroutines. Safe to call more than once.
func (s *session) terminate() {
	s.mu.Lock()
	s.stopping = true
	s.room.Broadcast()
	s.mu.Unlock()
	sid := s.pid
	// The shell is signalled through its os.Process only until it is
	// reaped: Process.Signal holds a pidfd, so a shell reaped between the
	// check and the signal is never mistaken for whoever got its number
	// next (kill(2) on the number was, for the moment between cmd.Wait
	// and close(exitedCh); a thread of the agent's would take the whole
	// agent with it). (Its session id cannot be reused while members of
	// the session live.)
	alive := func() bool {
		select {
		case <-s.exitedCh:
			return false
		default:
			return true
		}
	}
	w := newSweeper(sid, s.tag)
	// The shell itself, until it is reaped.
	leader := func(sig unix.Signal) bool {
		if alive() {
			_ = s.cmd.Process.Signal(sig) // os.ErrProcessDone: just reaped
			return true
		}
		return false
	}
	signal := func(sig unix.Signal) (found, running int) {
		found, running = w.Signal(sig)
		if leader(sig) {
			found++
		}
		return found, running
	}
	deadline := time.Now().Add(s.cfg.grace)
	if n, _ := signal(unix.SIGTERM); n > 0 {
		signal(unix.SIGHUP)  // an interactive shell ignores TERM, not HUP
		signal(unix.SIGCONT) // stopped jobs act on TERM only when continued
		select {
		case <-s.exitedCh:
		case <-time.After(time.Until(deadline)):
		}
		// Others of the session may still be shutting down: check back a
		// few times within the grace period (shutdown only, not the hot path).
		for wait := time.Millisecond; time.Now().Before(deadline) && len(sessionMembers(sid, s.tag)) > 0; wait = min(2*wait, 20*time.Millisecond) {
			time.Sleep(min(wait, time.Until(deadline)))
		}
	}
	// Freeze first, then kill (pty.Sweeper.FreezeAndKill): a stopped
	// process cannot fork, so a fork bomb stops growing while it is rounded
	// up, and the sweeper stops whole process groups at once.
	frozen, left := w.FreezeAndKill(killBound, leader)
	if !frozen || left > 0 {
		s.log.Warn("terminal: the shell's processes did not all end", "frozen", frozen, "left", left, "bound", killBound)
	}
	select {
	case <-s.exitedCh:
	case <-time.After(5 * time.Second):
		s.log.Warn("terminal: shell did not exit after SIGKILL", "pid", sid)
	}
	_ = s.master.Close()
	select {
	case <-s.readerDone:
	case <-time.After(5 * time.Second):
		s.log.Warn("terminal: pty reader did not stop", "pid", sid)
	}
	_ = os.Remove(s.cmdFile)
}

// killBound bounds each of terminate's freeze and kill phases: a process
// stuck in an uninterruptible sleep can neither stop nor die at once. A
// phase ends as soon as its work is done (well under a millisecond for a
// shell and a few jobs; a whole pids limit of a bomb, with the agent
// starved of CPU, took longer than the 1 s this once was).
const killBound = 10 * time.Second

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func (s *session) hasExited() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.exited
}
