package bash

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/sandboxd/sandboxd/tools"
)

// Name is the tool name the model calls (OpenHands-compatible).
const Name = "terminal"

// Action is the input of one terminal call. Names and meanings follow the
// OpenHands TerminalAction so agents prompted for it work unchanged.
type Action struct {
	Command string   `json:"command" jsonschema:"The shell command to run. Several commands (a multi-line script, commands joined with ; or &&, pipes, heredocs) run together as one command. Use an empty string to get more output of a command that is still running (previous exit code -1). When is_input is true this is text typed into the running process (followed by Enter), or one key name sent as a key without Enter: C-c (Ctrl+C), C-d (Ctrl+D, end of input), C-z (Ctrl+Z), any C-<letter>, UP, DOWN, LEFT, RIGHT, HOME, END, PGUP, PGDN, TAB, ESC, BS (Backspace), ENTER."`
	IsInput bool     `json:"is_input,omitempty" jsonschema:"If true, command is input to the process that is still running (text or a key name) instead of a new shell command. Default false."`
	Timeout *float64 `json:"timeout,omitempty" jsonschema:"Optional. Maximum number of seconds to wait for the command. If it runs longer, the call returns what was printed so far with exit code -1 and the command keeps running; you can then wait longer (empty command), send input, or interrupt it (C-c)."`
	Reset   bool     `json:"reset,omitempty" jsonschema:"If true, kill the shell and all its processes and start a fresh shell; if command is not empty it runs in the new shell. Use only when the terminal stops responding: environment variables, functions, background jobs and the working directory are lost. Cannot be combined with is_input."`
}

// Metadata is what the shell's prompt reported after the command (OpenHands
// CmdOutputMetadata). ExitCode and PID are -1 when unknown.
type Metadata struct {
	ExitCode          int    `json:"exit_code" jsonschema:"exit code of the command, -1 while it still runs or when unknown"`
	PID               int    `json:"pid" jsonschema:"process id of the last background job started by the shell ($!), -1 if none"`
	Username          string `json:"username,omitempty" jsonschema:"user the shell runs as"`
	Hostname          string `json:"hostname,omitempty" jsonschema:"host name of the sandbox"`
	WorkingDir        string `json:"working_dir,omitempty" jsonschema:"working directory of the shell after the command"`
	PyInterpreterPath string `json:"py_interpreter_path,omitempty" jsonschema:"path of the python the shell would run, empty if none"`
	Prefix            string `json:"prefix,omitempty" jsonschema:"text put before the output"`
	Suffix            string `json:"suffix,omitempty" jsonschema:"text put after the output (completion or timeout note)"`
}

// Timeout kinds of Output.TimeoutKind.
const (
	TimeoutSoft  = "no_output" // no new output for the soft timeout
	TimeoutHard  = "timeout"   // the action's timeout elapsed
	TimeoutLimit = "limit"     // the wall-clock cap of a call without timeout
)

// Output is the structured result of a terminal call.
type Output struct {
	Command        string   `json:"command" jsonschema:"the command or input of this call"`
	ExitCode       int      `json:"exit_code" jsonschema:"exit code of the command; -1 if it is still running or was not run"`
	Timeout        bool     `json:"timeout" jsonschema:"true if the call returned before the command finished"`
	TimeoutKind    string   `json:"timeout_kind,omitempty" jsonschema:"why the call returned early: no_output (soft timeout), timeout (the timeout parameter) or limit (wall-clock cap)"`
	ShellRestarted bool     `json:"shell_restarted,omitempty" jsonschema:"true if a new shell was started for this call (reset, or the previous shell ended)"`
	Truncated      bool     `json:"truncated,omitempty" jsonschema:"true if the output was cut in the middle"`
	FullOutputPath string   `json:"full_output_path,omitempty" jsonschema:"file holding the full output when it was cut"`
	Metadata       Metadata `json:"metadata"`
}

// timeoutTemplate is OpenHands' TIMEOUT_MESSAGE_TEMPLATE, verbatim.
const timeoutTemplate = `You may wait longer to see additional output by sending empty command '', send other commands to interact with the current process, send keys ("C-c", "C-z", "C-d") to interrupt/kill the previous command before sending your new command, or use the timeout parameter in terminal for future commands.`

// NewDefinition is the tool definition for an executor with these options:
// the soft timeout, wall-clock cap and output limit in the texts are the
// configured ones.
func NewDefinition(opts Options) tools.Definition {
	opts = opts.withDefaults()
	soft := seconds(opts.SoftTimeout)
	return tools.Definition{
		Name:        Name,
		Description: description(opts),
		InputSchema: tools.SchemaFor[Action](func(s *jsonschema.Schema) {
			zero := 0.0
			t := s.Properties["timeout"]
			t.Minimum = &zero
			t.Description = fmt.Sprintf("Optional. Maximum number of seconds to wait for the command. If it runs longer, the call returns what was printed so far with exit code -1 and the command keeps running; you can then wait longer (empty command), send input, or interrupt it (C-c). Without it, the call returns when the command prints nothing new for %s seconds, and after at most %s seconds in any case. Set a higher value for commands expected to take long (installations, builds, tests) or for a known duration (sleep).", soft, seconds(opts.MaxWait))
		}),
		OutputSchema: tools.SchemaFor[Output](),
		Annotations: tools.Annotations{
			Title:           Name,
			ReadOnlyHint:    false,
			DestructiveHint: true,
			IdempotentHint:  false,
			OpenWorldHint:   true,
		},
	}
}

func description(opts Options) string {
	soft, limit := seconds(opts.SoftTimeout), seconds(opts.MaxWait)
	return strings.Join([]string{
		"Execute a shell command in the terminal within a persistent shell session.",
		"",
		"### Command Execution",
		"* Persistent session: environment variables, shell functions, virtual environments, background jobs and the working directory persist between calls.",
		"* Several commands in one call (a multi-line script, `;`, `&&`, pipes, heredocs) run together as one command with one exit code (that of the last command run).",
		"* Soft timeout: when a command prints nothing new for " + soft + " seconds, the call returns what it printed so far with exit code `-1`; the command keeps running. Without `timeout`, a call also returns after " + limit + " seconds even if the command keeps printing.",
		"* Avoid `set -e`, `set -u` or `set -o pipefail` at the top level: they stay on for the rest of the session and a later failing command would end the shell. Use them inside a script or a subshell `( set -e; ... )`.",
		"* Avoid a top-level `exit`: it ends the shell (the next command starts a new one, with the state lost).",
		"",
		"### Long-running Commands",
		"* For commands that may run indefinitely, run them in the background and redirect output to a file, e.g. `python3 app.py > server.log 2>&1 &`.",
		"* For commands that take long (installation, builds, tests) or a known fixed time (sleep), set the `timeout` parameter to a suitable number of seconds.",
		"* If a command returns exit code `-1`, it is still running. While it runs, a new command is NOT executed. You can:",
		"  - send an empty `command` to wait for more output",
		"  - set `is_input` to `true` and send text to its standard input (Enter is added)",
		"  - set `is_input` to `true` and send a key: `C-c`, `C-d`, `C-z`, any `C-<letter>`, `UP`, `DOWN`, `LEFT`, `RIGHT`, `HOME`, `END`, `PGUP`, `PGDN`, `TAB`, `ESC`, `BS`, `ENTER`",
		"  - after `C-c`, re-run the command with a longer `timeout` to let it finish",
		"",
		"### Best Practices",
		"* Verify a parent directory exists before creating files or directories.",
		"* Prefer absolute paths and avoid excessive use of `cd`.",
		"* Interactive pagers are disabled (`PAGER=cat`, `GIT_PAGER=cat`); prefer non-interactive flags (e.g. `apt-get -y`).",
		"",
		"### Output Handling",
		"* stdout and stderr are merged; terminal escape sequences (colours, cursor movement) are removed.",
		fmt.Sprintf("* Output longer than %d characters is cut in the middle; the full output is saved to a file whose path the note gives.", opts.MaxOutputChars),
		"",
		"### Terminal Reset",
		"* Set `reset` to `true` to kill the shell and its processes and start a fresh one if the terminal stops responding.",
		"* Resetting clears environment variables, functions, background jobs and working directory changes.",
	}, "\n")
}

// seconds formats a duration as a plain number of seconds ("10", "0.5").
func seconds(d time.Duration) string {
	return formatSeconds(d.Seconds())
}

func formatSeconds(s float64) string {
	b, _ := json.Marshal(s) // shortest decimal, no exponent for sane values
	return string(b)
}
