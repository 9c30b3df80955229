package bash

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/internal/output"
)

// finishCancelled interrupts the command (SIGINT to the terminal's
// foreground process group, like Ctrl+C) when the caller gave up, and
// returns promptly with what was printed.
func (e *Executor) finishCancelled(c *call, s *session) *tools.Observation {
	s.interrupt()
	grace := time.NewTimer(interruptGrace)
	defer grace.Stop()
	for {
		if d := s.takeDone(); d != nil {
			c.interrupted = true
			return e.finishDone(c, d)
		}
		select {
		case <-s.wake:
		case <-grace.C:
			r := s.takeOutput().Finish()
			meta := Metadata{ExitCode: -1, PID: -1, Suffix: "\n[The command was interrupted by user request. The process received SIGINT (Ctrl+C).]"}
			return c.build(Output{Command: c.command, ExitCode: -1}, meta, r, false)
		}
	}
}

func (e *Executor) finishDone(c *call, d *completion) *tools.Observation {
	r := d.acc.Finish()
	meta := e.meta(d.m, d.m.exit)
	switch {
	case c.inputNotSent:
		meta.Suffix = fmt.Sprintf("\n[The command completed with exit code %d before your input arrived, so the input was NOT sent.]", d.m.exit)
	case c.interrupted:
		meta.Suffix = fmt.Sprintf("\n[The command was interrupted by user request. The process received SIGINT (Ctrl+C) and the command completed with exit code %d.]", d.m.exit)
	case c.ctrl != 0:
		meta.Suffix = fmt.Sprintf("\n[The command completed with exit code %d. CTRL+%c was sent.]", d.m.exit, c.ctrl)
	default:
		meta.Suffix = fmt.Sprintf("\n[The command completed with exit code %d.]", d.m.exit)
	}
	return c.build(Output{Command: c.command, ExitCode: d.m.exit}, meta, r, false)
}

func (e *Executor) finishTimeout(c *call, s *session, kind string, after time.Duration) *tools.Observation {
	r := s.takeOutput().Finish()
	meta := Metadata{ExitCode: -1, PID: -1}
	switch kind {
	case TimeoutSoft:
		meta.Suffix = fmt.Sprintf("\n[The command has no new output after %s seconds. %s]", seconds(after), timeoutTemplate)
	case TimeoutHard:
		meta.Suffix = fmt.Sprintf("\n[The command timed out after %s seconds. %s]", seconds(after), timeoutTemplate)
	default:
		meta.Suffix = fmt.Sprintf("\n[The command is still running after %s seconds, the longest a call waits without a `timeout`. %s]", seconds(after), timeoutTemplate)
	}
	return c.build(Output{Command: c.command, ExitCode: -1, Timeout: true, TimeoutKind: kind}, meta, r, false)
}

// finishExited reports a shell that ended (top-level exit, killed): the
// next call starts a new one.
func (e *Executor) finishExited(c *call, s *session) *tools.Observation {
	// Let the reader drain the last output (it ends at EOF of the pty).
	select {
	case <-s.readerDone:
	case <-time.After(100 * time.Millisecond):
	}
	r := s.takeOutput().Finish()
	code := s.exitCode()
	meta := Metadata{ExitCode: code, PID: -1}
	meta.Suffix = fmt.Sprintf("\n[The shell exited with code %d. The next command starts a new shell: environment variables, functions, background jobs and the working directory will be reset.]", code)
	return c.build(Output{Command: c.command, ExitCode: code}, meta, r, false)
}

func (e *Executor) meta(m marker, exit int) Metadata {
	return Metadata{
		ExitCode:          exit,
		PID:               m.bgPID,
		Username:          e.user,
		Hostname:          e.host,
		WorkingDir:        m.cwd,
		PyInterpreterPath: lookPython(m.path, m.cwd),
	}
}

// lookPython is `command -v python` done here from the shell's PATH and
// working directory, so the prompt needs no fork.
func lookPython(path, cwd string) string {
	if path == "" {
		return ""
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, "python")
		abs := p
		if !filepath.IsAbs(abs) {
			abs = filepath.Join(cwd, p)
		}
		if st, err := os.Stat(abs); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// call is the state of one Call while its result is built.
type call struct {
	command      string
	notes        []string    // shell restarted or reset
	restarted    bool        // a new shell was started
	continued    bool        // a poll or input: output continues an earlier call
	previous     *completion // a command that ended since the last call
	ctrl         byte        // C-<letter> sent
	inputNotSent bool
	interrupted  bool
}

// build assembles text and structured output.
func (c *call) build(out Output, meta Metadata, r output.Result, isErr bool) *tools.Observation {
	output := strings.TrimRight(r.Text, " \t\r\n")
	if c.continued && output != "" {
		meta.Prefix = continuedPrefix
	}
	out.Metadata = meta
	out.Truncated, out.FullOutputPath = r.Truncated, r.Path
	return c.result(out, output, isErr)
}

func (c *call) result(out Output, output string, isErr bool) *tools.Observation {
	var b strings.Builder
	for _, n := range c.notes {
		b.WriteString(n)
		b.WriteString("\n\n")
	}
	if c.previous != nil {
		r := c.previous.acc.Finish()
		if prev := strings.TrimRight(r.Text, " \t\r\n"); prev != "" {
			b.WriteString(continuedPrefix)
			b.WriteString(prev)
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "[The previous command completed with exit code %d.]\n\n", c.previous.m.exit)
	}
	body := out.Metadata.Prefix + output + out.Metadata.Suffix
	if b.Len() == 0 && output == "" && out.Metadata.Prefix == "" {
		body = strings.TrimPrefix(body, "\n")
	}
	b.WriteString(body)
	if out.Metadata.WorkingDir != "" {
		fmt.Fprintf(&b, "\n[Current working directory: %s]", out.Metadata.WorkingDir)
	}
	if out.Metadata.PyInterpreterPath != "" {
		fmt.Fprintf(&b, "\n[Python interpreter: %s]", out.Metadata.PyInterpreterPath)
	}
	out.ShellRestarted = out.ShellRestarted || c.restarted
	return &tools.Observation{
		Content:    []tools.Content{{Type: "text", Text: b.String()}},
		Structured: out,
		IsError:    isErr,
	}
}

func (c *call) observation(out Output, isErr bool) *tools.Observation {
	return c.result(out, "", isErr)
}

// errorf is an error the model reads, after any restart notes.
func (c *call) errorf(format string, args ...any) *tools.Observation {
	meta := Metadata{ExitCode: -1, PID: -1, Suffix: fmt.Sprintf(format, args...)}
	return c.result(Output{Command: c.command, ExitCode: -1, Metadata: meta}, "", true)
}
