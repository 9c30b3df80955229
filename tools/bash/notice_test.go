package bash

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// jobNotice is the shell's report of a finished job: bash "[1]+  Done
// sleep 0.2", dash "[1] + Done  sleep 0.2", busybox "[1]+  Done  sleep 0.2".
func jobNotice(state, command string) *regexp.Regexp {
	return regexp.MustCompile(`(?m)^\[1\] ?\+ +` + state + ` +` + regexp.QuoteMeta(command) + `$`)
}

// exitedChild waits until pid has ended: gone (reaped, as bash does on
// SIGCHLD) or a zombie (dash reaps when it next looks at its jobs).
func exitedChild(t *testing.T, pid int) {
	t.Helper()
	require.Eventually(t, func() bool {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return true
		}
		i := strings.LastIndexByte(string(stat), ')')
		return i > 0 && strings.HasPrefix(string(stat[i:]), ") Z")
	}, time.Minute, time.Millisecond, "process %d did not end", pid)
}

// takesSIGTERM waits until process pid no longer ignores SIGTERM: a child
// of an interactive shell (which ignores it) restores it shortly after the
// fork, and a SIGTERM sent before that is lost.
func takesSIGTERM(t *testing.T, pid int) {
	t.Helper()
	var err error
	require.Eventually(t, func() bool {
		var ign uint64
		ign, err = ignoredSignals(pid)
		return err != nil || ign&sigBit(unix.SIGTERM) == 0
	}, time.Minute, time.Millisecond, "process %d still ignores SIGTERM", pid)
	require.NoError(t, err)
}

// ignores reports whether process pid ignores sig.
func ignores(pid int, sig unix.Signal) bool {
	ign, err := ignoredSignals(pid)
	return err == nil && ign&sigBit(sig) != 0
}

func sigBit(sig unix.Signal) uint64 { return 1 << (uint(sig) - 1) }

// ignoredSignals is the SigIgn mask of process pid.
func ignoredSignals(pid int) (uint64, error) {
	status, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			return strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		}
	}
	return 0, fmt.Errorf("no SigIgn in /proc/%d/status", pid)
}

// A job that ended while the shell was idle is reported at the end of the
// next command, where a terminal shows it (before the prompt), not at the
// start of the command after that (bash printed it after the marker) nor at
// the start of the next one (`.` in dash printed it before the file).
//
// busybox ash notices the job at once, as its wait for input is
// interrupted, and reports it then: usually at the start of the next
// command. It must not take that interruption for the end of its input and
// exit.
func TestJobNoticeEndsTheCommandThatSawIt(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			text, out, _ := do(t, e, cmd("sleep 0.2 &"))
			require.Positive(t, out.Metadata.PID, text)
			if shell == "bash" {
				assert.Equal(t, "[1] "+strconv.Itoa(out.Metadata.PID), body(text), "a new job is announced once, not listed again as Running")
			}
			exitedChild(t, out.Metadata.PID)

			text, out, _ = do(t, e, cmd("echo two"))
			assert.False(t, out.ShellRestarted, text)
			assert.NotContains(t, text, eofNotice)
			assert.Regexp(t, jobNotice("Done", "sleep 0.2"), body(text))
			if shellName(shell) != "busybox" { // either: it depends on when busybox runs
				assert.True(t, strings.HasPrefix(body(text), "two\n"), "the command's output comes first: %q", text)
			}

			text, _, _ = do(t, e, cmd("echo three"))
			assert.Equal(t, "three", body(text), "the notice is not repeated")
		})
	}
}

// A job killed by a command is reported at that command's end once the
// shell has seen it die, even when the command runs only builtins. (Right
// after `kill` alone the job may not have died yet: as at a terminal, its
// notice then ends the next command.)
func TestKilledJobNoticeEndsTheKillingCommand(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			_, out, _ := do(t, e, cmd("sleep 100 &"))
			require.Positive(t, out.Metadata.PID)
			takesSIGTERM(t, out.Metadata.PID)
			// bash reaps on SIGCHLD: a builtin loop sees the job gone. dash
			// and busybox reap when they wait for a child (busybox runs
			// sleep in-process: the subshell makes one).
			wait := `while kill -0 $! 2>/dev/null; do :; done`
			if shell != "bash" {
				wait = `while [ -e /proc/$! ]; do (sleep 0.01); done`
			}
			text, out, _ := do(t, e, withTimeout("kill %1; "+wait+"; echo killed", 20))
			require.Equal(t, 0, out.ExitCode, text)
			assert.True(t, strings.HasPrefix(body(text), "killed\n"), "%q", text)
			assert.Regexp(t, jobNotice("Terminated", "sleep 100"), body(text))

			text, _, _ = do(t, e, cmd("echo next"))
			assert.Equal(t, "next", body(text))
		})
	}
}

// Under sh, messages name the shell as at a terminal, not the private file
// the command came in.
func TestShellMessagesDoNotNameTheCommandFile(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			opts := testOptions(t, shell)
			e := newExec(t, opts)
			want := map[string]string{ // command -> message
				"definitely_not_a_command_x": `^sh: (\d+: )?(eval: )?definitely_not_a_command_x: not found$`,
				"if true; then":              `^sh: (\d+: )?eval: [Ss]yntax error: .*(end of file|EOF).*$`,
				"echo 'unterminated":         `^sh: (\d+: )?eval: [Ss]yntax error: [Uu]nterminated quoted string$`,
			}
			if shell == "bash" {
				want = map[string]string{
					"definitely_not_a_command_x": `^bash: definitely_not_a_command_x: command not found$`,
					"if true; then":              `^bash: (eval: line \d+: )?syntax error: unexpected end of file$`,
				}
			}
			for command, msg := range want {
				text, out, _ := do(t, e, cmd(command))
				assert.NotEqual(t, 0, out.ExitCode, text)
				assert.NotContains(t, text, ".command-")
				assert.NotContains(t, text, opts.StateDir)
				assert.Regexp(t, msg, body(text))
			}
		})
	}
}

func TestDropEOFNotice(t *testing.T) {
	for in, want := range map[string]string{
		"":                                       "",
		"a\r\nUse \"exit\" to leave shell.\r\nb": "ab",
		"\nUse \"exit\" to leave shell.\n\x1e":   "\x1e",
		"echo Use \"exit\" to leave shell.":      "echo Use \"exit\" to leave shell.",
	} {
		assert.Equal(t, want, string(dropEOFNotice([]byte(in))), "%q", in)
	}
}
