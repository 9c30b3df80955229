package shell

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/bash"
)

// LocalName is the name of the argv tool, after the Responses API's
// local_shell tool.
const LocalName = "local_shell"

// killGrace is how long Run waits for the output pipes after the process
// group was killed (a child that escaped the group may hold them).
const killGrace = 500 * time.Millisecond

// LocalAction is local_shell_call.action: an argv run without a shell.
type LocalAction struct {
	Command          []string          `json:"command" jsonschema:"The program and its arguments, run directly: no shell, no word splitting, no expansion."`
	TimeoutMS        *int64            `json:"timeout_ms,omitempty" jsonschema:"Optional. Milliseconds the process may run before it and its children are killed. 0 or absent: the terminal's own limit."`
	WorkingDirectory *string           `json:"working_directory,omitempty" jsonschema:"Optional. Directory to run in (relative: to the shell's start directory)."`
	Env              map[string]string `json:"env,omitempty" jsonschema:"Optional. Variables added to the environment."`
	User             *string           `json:"user,omitempty" jsonschema:"Optional. Must be the sandbox's own user (name or uid): no other can be switched to."`
}

// LocalDefinition is local_shell as a model sees it.
func LocalDefinition(dir string) tools.Definition {
	desc := "Run one program with its arguments, without a shell (no word splitting, quoting or expansion), and return its stdout, stderr and exit code. The process gets an empty stdin and is killed with its children after timeout_ms."
	if dir != "" {
		desc += "\n\nRelative working directories are taken from: " + dir
	}
	return tools.Definition{
		Name:         LocalName,
		Description:  desc,
		InputSchema:  tools.SchemaFor[LocalAction](),
		OutputSchema: tools.SchemaFor[Output](),
		Annotations:  tools.Annotations{Title: LocalName, DestructiveHint: true, OpenWorldHint: true},
	}
}

// CallLocal runs a local_shell action.
func (x *Executor) CallLocal(ctx context.Context, a LocalAction) (*tools.Observation, error) {
	r := CommandOutput{Command: fmt.Sprintf("%q", a.Command)}
	out := func(r CommandOutput) *tools.Observation {
		o := Output{Output: []CommandOutput{r}}
		return tools.TextResult(render(o), o)
	}
	switch {
	case len(a.Command) == 0 || a.Command[0] == "":
		return out(rejected(r, errNoCommand.Error())), nil
	case a.TimeoutMS != nil && *a.TimeoutMS < 0:
		return out(rejected(r, fmt.Sprintf("timeout_ms must not be negative, got %d", *a.TimeoutMS))), nil
	}
	if a.User != nil && *a.User != "" && !isSelf(*a.User) {
		return out(rejected(r, fmt.Sprintf("local_shell: cannot run as %q: the sandbox runs every command as its own user, and no other can be switched to", *a.User))), nil
	}
	dir := x.opts.Dir
	if a.WorkingDirectory != nil && *a.WorkingDirectory != "" {
		dir = *a.WorkingDirectory
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(x.opts.Dir, dir)
		}
	}
	limit := cmp.Or(x.opts.MaxWait, bash.DefaultMaxWait)
	if a.TimeoutMS != nil && *a.TimeoutMS > 0 {
		limit = time.Duration(*a.TimeoutMS) * time.Millisecond
	}
	runCtx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	cmd := exec.CommandContext(runCtx, a.Command[0], a.Command[1:]...)
	cmd.Dir = dir
	cmd.Env = environ(x.opts.Env, a.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var stdout, stderr capped
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) } // the whole group
	cmd.WaitDelay = killGrace
	err := cmd.Run()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r.Stdout, r.Stderr = cut(stdout.String(), stderr.String(), DefaultMaxOutputChars, true)
	var ee *exec.ExitError
	switch {
	case runCtx.Err() != nil:
		r.Outcome = Outcome{Type: OutcomeTimeout}
	case err == nil:
		zero := 0
		r.Outcome = Outcome{Type: OutcomeExit, ExitCode: &zero}
	case errors.As(err, &ee):
		code := ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
		r.Outcome = Outcome{Type: OutcomeExit, ExitCode: &code}
	default: // not started: no such program, a bad directory
		return out(rejected(r, err.Error())), nil
	}
	return out(r), nil
}

// environ is the agent's environment with the terminal's and the call's
// variables over it.
func environ(layers ...map[string]string) []string {
	env := map[string]string{}
	for _, kv := range os.Environ() {
		if k, v, ok := cutEnv(kv); ok {
			env[k] = v
		}
	}
	for _, l := range layers {
		for k, v := range l {
			env[k] = v
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func cutEnv(kv string) (string, string, bool) {
	for i := 1; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return "", "", false
}

func isSelf(name string) bool {
	uid := os.Getuid()
	if name == strconv.Itoa(uid) {
		return true
	}
	u, err := user.LookupId(strconv.Itoa(uid))
	return err == nil && u.Username == name
}

// capped keeps the first MaxStreamBytes written to it.
type capped struct{ bytes.Buffer }

func (c *capped) Write(p []byte) (int, error) {
	if room := MaxStreamBytes - c.Len(); room > 0 {
		c.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

func (c *capped) String() string { return string(bytes.ToValidUTF8(c.Bytes(), []byte("\uFFFD"))) }
