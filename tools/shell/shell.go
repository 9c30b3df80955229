// Package shell is OpenAI's shell tool contract as a sandbox tool: `shell`
// runs a list of commands, one after the other, in the session's persistent
// shell (the terminal's, tools/bash: cwd, environment and functions
// persist) with each command's stdout and stderr kept apart and an outcome
// of exit or timeout; `local_shell` runs one argv without a shell, as the
// older local_shell_call action asks. Decision 0046.
package shell

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/bash"
)

// Name is the tool's name, as OpenAI's hosted tool and the Agents SDK call it.
const Name = "shell"

// Outcome types.
const (
	OutcomeExit    = "exit"
	OutcomeTimeout = "timeout"
)

// Limits.
const (
	// MaxCommands caps the commands of one call.
	MaxCommands = 64
	// DefaultMaxOutputChars cuts each stream of a command when the call
	// gives no max_output_length (the terminal's own cap).
	DefaultMaxOutputChars = bash.DefaultMaxOutputChars
	// MaxStreamBytes is the most of a stream read back from the sandbox's
	// file before characters are counted.
	MaxStreamBytes = 1 << 20
	// interruptWait is how long a timed-out command is given to end after
	// Ctrl+C before the shell is reset.
	interruptWait = 2 * time.Second
)

// Action is the tool's input: shell_call.action of the Responses API.
type Action struct {
	Commands        []string `json:"commands" jsonschema:"Shell commands to run in order in one persistent shell (cd and exported variables carry over to later commands and calls). Each may be a multi-line script."`
	TimeoutMS       *int64   `json:"timeout_ms,omitempty" jsonschema:"Optional. Milliseconds each command may run; a command that runs longer is interrupted, its outcome is timeout and the commands after it are not run. 0 or absent: the terminal's own limit."`
	MaxOutputLength *int64   `json:"max_output_length,omitempty" jsonschema:"Optional. The most characters of stdout and stderr together kept per command (stdout first); 0 keeps none."`
}

// Outcome is how a command ended.
type Outcome struct {
	Type     string `json:"type" jsonschema:"exit or timeout."`
	ExitCode *int   `json:"exit_code,omitempty" jsonschema:"The exit code (type exit)."`
}

// CommandOutput is one command's result (ShellCommandOutput in the SDK).
type CommandOutput struct {
	Command string  `json:"command,omitempty" jsonschema:"The command."`
	Stdout  string  `json:"stdout" jsonschema:"What the command wrote to stdout."`
	Stderr  string  `json:"stderr" jsonschema:"What the command wrote to stderr."`
	Outcome Outcome `json:"outcome" jsonschema:"How the command ended."`
}

// Output is the structured result: shell_call_output's output and
// max_output_length.
type Output struct {
	Output          []CommandOutput `json:"output" jsonschema:"One entry per command run, in order; none after a timeout."`
	MaxOutputLength *int64          `json:"max_output_length,omitempty" jsonschema:"The max_output_length the call gave."`
}

const description = `Run shell commands in the sandbox's persistent shell. ` + "`commands`" + ` run one after the other in the same shell, so cd, exported variables and functions carry over to the next command and the next call. Each command's stdout and stderr are returned apart with its exit code. A command that runs past timeout_ms is interrupted (Ctrl+C), reported as a timeout, and the commands after it are not run. stdin is empty: commands cannot be interactive.`

// Definition is the tool as a model sees it.
func Definition(dir string) tools.Definition {
	desc := description
	if dir != "" {
		desc += "\n\nThe shell starts in: " + dir
	}
	return tools.Definition{
		Name:         Name,
		Description:  desc,
		InputSchema:  tools.SchemaFor[Action](),
		OutputSchema: tools.SchemaFor[Output](),
		Annotations:  tools.Annotations{Title: Name, DestructiveHint: true, OpenWorldHint: true},
	}
}

// Params are the factory's parameters: the terminal's (bash.Params), plus
// Terminal to serve the terminal tool on the same shell, and LocalShell to
// serve local_shell as well.
type Params struct {
	bash.Params
	Terminal   bool `json:"terminal,omitempty"`
	LocalShell bool `json:"local_shell,omitempty"`
}

// Factory makes shell (and terminal, local_shell when params ask) for a
// session.
func Factory(env tools.Env, params json.RawMessage) ([]*tools.Tool, error) {
	var p Params
	if err := tools.DecodeParams(params, &p); err != nil {
		return nil, fmt.Errorf("shell: params: %w", err)
	}
	bp, err := json.Marshal(p.Params)
	if err != nil {
		return nil, err
	}
	opts, err := bash.OptionsFromParams(env, bp)
	if err != nil {
		return nil, err
	}
	if err := makeDir(env.Workspace, opts.Dir); err != nil {
		return nil, err
	}
	x, err := NewExecutor(opts, env.StateDir)
	if err != nil {
		return nil, err
	}
	var made []*tools.Tool
	add := func(t *tools.Tool, err error) error {
		if err != nil {
			_ = x.Close()
			return err
		}
		made = append(made, t)
		return nil
	}
	if p.Terminal {
		if err := add(tools.NewFunc(bash.NewDefinition(opts), x.term.Call, x)); err != nil {
			return nil, err
		}
	}
	if err := add(tools.NewFunc(Definition(opts.Dir), x.Call, x)); err != nil {
		return nil, err
	}
	if p.LocalShell {
		if err := add(tools.NewFunc(LocalDefinition(opts.Dir), x.CallLocal, x)); err != nil {
			return nil, err
		}
	}
	return made, nil
}

// makeDir creates dir when it lies inside workspace, as the terminal does.
func makeDir(workspace, dir string) error {
	if workspace == "" || dir == "" {
		return nil
	}
	if rel, err := filepath.Rel(workspace, dir); err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil
	}
	return os.MkdirAll(dir, 0o755)
}

// Executor runs shell calls on a terminal executor.
type Executor struct {
	term    *bash.Executor
	opts    bash.Options
	dir     string // the streams' files
	ownDir  bool   // dir was made here and goes with Close
	seq     atomic.Uint64
	mu      sync.Mutex // one shell call at a time: its commands are one sequence
	closeMu sync.Once
}

// NewExecutor starts a terminal with opts. Each command's streams go to
// files under stateDir/shell (a private temporary folder if stateDir is
// empty), removed once read.
func NewExecutor(opts bash.Options, stateDir string) (*Executor, error) {
	x := &Executor{opts: opts}
	if stateDir != "" {
		x.dir = filepath.Join(stateDir, "shell")
		if err := os.MkdirAll(x.dir, 0o700); err != nil {
			return nil, fmt.Errorf("shell: %w", err)
		}
	} else {
		d, err := os.MkdirTemp("", "sandboxd-shell-")
		if err != nil {
			return nil, fmt.Errorf("shell: %w", err)
		}
		x.dir, x.ownDir = d, true
	}
	term, err := bash.NewExecutor(opts)
	if err != nil {
		x.removeDir()
		return nil, err
	}
	x.term = term
	return x, nil
}

func (x *Executor) removeDir() {
	if x.ownDir {
		_ = os.RemoveAll(x.dir)
	}
}

// Close ends the shell and its processes.
func (x *Executor) Close() error {
	var err error
	x.closeMu.Do(func() {
		err = x.term.Close()
		x.removeDir()
	})
	return err
}

// Watch follows the shell's output (the terminal's watchers).
func (x *Executor) Watch(fn tools.StreamFunc) (stop func()) { return x.term.Watch(fn) }

// Call runs the commands in order and stops after the first that times out.
func (x *Executor) Call(ctx context.Context, a Action) (*tools.Observation, error) {
	if len(a.Commands) == 0 {
		return tools.Errorf("`commands` is empty: give at least one command."), nil
	}
	if len(a.Commands) > MaxCommands {
		return tools.Errorf("%d commands in one call; at most %d.", len(a.Commands), MaxCommands), nil
	}
	if a.TimeoutMS != nil && *a.TimeoutMS < 0 {
		return tools.Errorf("timeout_ms must not be negative, got %d.", *a.TimeoutMS), nil
	}
	if a.MaxOutputLength != nil && *a.MaxOutputLength < 0 {
		return tools.Errorf("max_output_length must not be negative, got %d.", *a.MaxOutputLength), nil
	}
	limit := int64(DefaultMaxOutputChars)
	if a.MaxOutputLength != nil {
		limit = *a.MaxOutputLength
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	out := Output{Output: []CommandOutput{}, MaxOutputLength: a.MaxOutputLength}
	for _, cmd := range a.Commands {
		r, err := x.runOne(ctx, cmd, a.TimeoutMS)
		if err != nil {
			return nil, err
		}
		r.Stdout, r.Stderr = cut(r.Stdout, r.Stderr, limit, a.MaxOutputLength == nil)
		out.Output = append(out.Output, r)
		if r.Outcome.Type == OutcomeTimeout {
			break
		}
	}
	return tools.TextResult(render(out), out), nil
}

// runOne runs one command in the shell, its streams to files.
func (x *Executor) runOne(ctx context.Context, cmd string, timeoutMS *int64) (CommandOutput, error) {
	r := CommandOutput{Command: cmd}
	if strings.TrimSpace(cmd) == "" {
		return rejected(r, "empty command"), nil
	}
	n := x.seq.Add(1)
	outPath := filepath.Join(x.dir, strconv.FormatUint(n, 10)+".out")
	errPath := filepath.Join(x.dir, strconv.FormatUint(n, 10)+".err")
	defer func() { _, _ = os.Remove(outPath), os.Remove(errPath) }() // read by then
	// Braces run the command in the shell itself (cd and exports persist);
	// the newlines let it end in a comment or a heredoc.
	script := "{\n" + cmd + "\n} >" + quote(outPath) + " 2>" + quote(errPath) + " </dev/null"
	wait := cmp.Or(x.opts.MaxWait, bash.DefaultMaxWait).Seconds()
	if timeoutMS != nil && *timeoutMS > 0 {
		wait = float64(*timeoutMS) / 1000
	}
	obs, err := x.term.Call(ctx, bash.Action{Command: script, Timeout: &wait})
	if err != nil {
		return r, err
	}
	bo, _ := obs.Structured.(bash.Output)
	switch {
	case obs.IsError:
		return rejected(r, obs.Text()), nil
	case bo.Timeout:
		r.Outcome = Outcome{Type: OutcomeTimeout}
		if err := x.stop(ctx); err != nil {
			return r, err
		}
	default:
		code := bo.ExitCode
		r.Outcome = Outcome{Type: OutcomeExit, ExitCode: &code}
	}
	r.Stdout, r.Stderr = readStream(outPath), readStream(errPath)
	return r, nil
}

// stop ends a command that timed out: Ctrl+C, then a new shell if it
// does not end.
func (x *Executor) stop(ctx context.Context) error {
	wait := interruptWait.Seconds()
	obs, err := x.term.Call(ctx, bash.Action{Command: "C-c", IsInput: true, Timeout: &wait})
	if err != nil {
		return err
	}
	if bo, _ := obs.Structured.(bash.Output); obs.IsError || bo.Timeout {
		_, err = x.term.Call(ctx, bash.Action{Reset: true})
	}
	return err
}

func rejected(r CommandOutput, msg string) CommandOutput {
	one := 1
	r.Stderr, r.Outcome = msg, Outcome{Type: OutcomeExit, ExitCode: &one}
	return r
}

func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// readStream reads up to MaxStreamBytes of a stream's file as valid UTF-8.
func readStream(p string) string {
	f, err := os.Open(p)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, _ := io.ReadAll(io.LimitReader(f, MaxStreamBytes))
	return strings.ToValidUTF8(string(b), "\uFFFD")
}

// cut keeps at most limit characters of stdout and stderr together,
// stdout first; with note, a cut stream ends saying so.
func cut(stdout, stderr string, limit int64, note bool) (string, string) {
	if limit >= math.MaxInt32 {
		return stdout, stderr
	}
	n := int(limit)
	so := utf8.RuneCountInString(stdout)
	if note {
		// The default: each stream gets the whole cap, as the terminal's.
		return head(stdout, n, true), head(stderr, n, true)
	}
	if so >= n {
		return head(stdout, n, false), ""
	}
	return stdout, head(stderr, n-so, false)
}

func head(s string, n int, note bool) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i := 0
	for j := range s {
		if i == n {
			s2 := s[:j]
			if note {
				s2 += fmt.Sprintf("\n[... output cut at %d characters]", n)
			}
			return s2
		}
		i++
	}
	return s
}

// render is the text a model reads.
func render(o Output) string {
	var b strings.Builder
	for i, r := range o.Output {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "$ %s\n", firstLine(r.Command))
		if r.Stdout != "" {
			b.WriteString(r.Stdout)
			if !strings.HasSuffix(r.Stdout, "\n") {
				b.WriteString("\n")
			}
		}
		if r.Stderr != "" {
			b.WriteString("[stderr]\n")
			b.WriteString(r.Stderr)
			if !strings.HasSuffix(r.Stderr, "\n") {
				b.WriteString("\n")
			}
		}
		if r.Outcome.Type == OutcomeTimeout {
			b.WriteString("[timed out: the command was interrupted; the commands after it were not run]\n")
		} else {
			fmt.Fprintf(&b, "[exit code %d]\n", *r.Outcome.ExitCode)
		}
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i] + " ..."
	}
	return s
}

var errNoCommand = errors.New("local_shell: command is empty")
