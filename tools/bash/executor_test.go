package bash

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/sandboxd/sandboxd/tools"
)

// TestCommands checks single commands' output and exit code in both shells.
func TestCommands(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 10000) // longer than the pty's 4095-byte line limit
	cases := []struct {
		name     string
		command  string
		want     string // exact output
		exit     int
		bashOnly bool
	}{
		{name: "echo", command: "echo hello", want: "hello"},
		{name: "exit code", command: "echo hello; false", want: "hello", exit: 1},
		{name: "stderr merged", command: "echo out; echo err >&2", want: "out\nerr"},
		{name: "no output", command: "true", want: ""},
		{name: "no trailing newline", command: "printf abc", want: "abc"},
		{name: "invalid utf8", command: `printf 'a\377\376b\n'`, want: "a\ufffd\ufffdb"},
		{name: "colours stripped", command: `printf '\033[1;31mred\033[0m\n'`, want: "red"},
		{name: "crlf normalised", command: `printf 'a\r\nb\r\n'`, want: "a\nb"},
		{name: "progress bar", command: `printf '10%%\r50%%\r100%%\n'`, want: "100%"},
		{name: "and chain", command: "echo a && echo b", want: "a\nb"},
		{name: "pipe", command: "printf 'b\\na\\n' | sort", want: "a\nb"},
		{name: "multi-line script", command: "echo one\necho two\nfalse", want: "one\ntwo", exit: 1},
		{name: "multi-line exit code of last", command: "false\necho last", want: "last"},
		{name: "heredoc", command: "cat <<'EOF'\nline $HOME\nsecond\nEOF", want: "line $HOME\nsecond"},
		{name: "heredoc then command", command: "cat <<EOF\nx\nEOF\necho after", want: "x\nafter"},
		{name: "double brackets", command: "[[ -d / ]] && echo dir", want: "dir", bashOnly: true},
		{name: "brace group", command: "{ echo x; }", want: "x"},
		{name: "if block", command: "if true; then\n  echo yes\nfi", want: "yes"},
		{name: "for loop", command: "for i in 1 2 3; do\n echo $i\ndone", want: "1\n2\n3"},
		{name: "comment at end", command: "echo x # comment", want: "x"},
		{name: "long line", command: "echo " + long + " | wc -c", want: "10001"},
		{name: "history expansion off", command: "echo 'a!b' a!b", want: "a!b a!b"},
		{name: "pagers", command: "echo $PAGER $GIT_PAGER", want: "cat cat"},
		{name: "term set", command: "echo $TERM", want: "xterm-256color"},
		{name: "stdin is a tty", command: "[ -t 0 ] && [ -t 1 ] && echo tty", want: "tty"},
		{name: "not found", command: "definitely_not_a_command_x", exit: 127},
		{name: "syntax error", command: "echo (", exit: 2},
		{name: "fake marker from PS1", command: `printf '%s\n' "$PS1" >/dev/null; echo "$PS1" | wc -l`, want: "1"},
	}
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			for _, c := range cases {
				if c.bashOnly && shell != "bash" {
					continue
				}
				t.Run(c.name, func(t *testing.T) {
					text, out, obs := do(t, e, cmd(c.command))
					assert.False(t, obs.IsError, text)
					assert.Equal(t, c.exit, out.ExitCode, text)
					assert.Equal(t, c.exit, out.Metadata.ExitCode)
					assert.Contains(t, text, fmt.Sprintf("[The command completed with exit code %d.]", c.exit))
					if c.exit != 127 && c.exit != 2 {
						assert.Equal(t, strings.TrimSpace(c.want), strings.TrimSpace(body(text)), "text: %q", text)
					}
					assert.NotContains(t, text, "__sbx", "internal lines must not show")
					assert.NotContains(t, text, "\x1e")
				})
			}
		})
	}
}

func TestTextFormat(t *testing.T) {
	t.Parallel()
	opts := testOptions(t, "bash")
	e := newExec(t, opts)
	text, out, _ := do(t, e, cmd("echo hello; false"))
	dir, _ := filepath.Abs(opts.Dir)
	assert.True(t, strings.HasPrefix(text, "hello\n[The command completed with exit code 1.]\n[Current working directory: "+dir+"]"), text)
	assert.Equal(t, "echo hello; false", out.Command)
	assert.Equal(t, dir, out.Metadata.WorkingDir)
	assert.NotEmpty(t, out.Metadata.Username)
	assert.NotEmpty(t, out.Metadata.Hostname)
	assert.Equal(t, -1, out.Metadata.PID)
	assert.False(t, out.Timeout)

	// Without output the text starts with the completion note.
	text, _, _ = do(t, e, cmd("true"))
	assert.True(t, strings.HasPrefix(text, "[The command completed with exit code 0.]"), text)
}

func TestPythonInterpreterPath(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	bin := t.TempDir()
	py := filepath.Join(bin, "python")
	require.NoError(t, os.WriteFile(py, []byte("#!/bin/sh\n"), 0o755))
	text, out, _ := do(t, e, cmd("export PATH="+bin+":$PATH"))
	assert.Equal(t, py, out.Metadata.PyInterpreterPath)
	assert.Contains(t, text, "[Python interpreter: "+py+"]")
	_, out, _ = do(t, e, cmd("export PATH=/nonexistent"))
	assert.Empty(t, out.Metadata.PyInterpreterPath)
}

// TestStatePersists: cwd, variables, functions, aliases and background jobs
// live on between calls.
func TestStatePersists(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			sub := t.TempDir()
			_, out, _ := do(t, e, cmd("cd "+sub))
			assert.Equal(t, sub, out.Metadata.WorkingDir)
			text, out, _ := do(t, e, cmd("pwd"))
			assert.Equal(t, sub, body(text))
			assert.Equal(t, sub, out.Metadata.WorkingDir)

			do(t, e, cmd("export FOO=bar; plain=1"))
			text, _, _ = do(t, e, cmd("echo $FOO $plain"))
			assert.Equal(t, "bar 1", body(text))

			do(t, e, cmd("greet() { echo \"hi $1\"; }"))
			text, _, _ = do(t, e, cmd("greet you"))
			assert.Equal(t, "hi you", body(text))

			_, out, _ = do(t, e, cmd("sleep 30 &"))
			require.Positive(t, out.Metadata.PID, "metadata pid is $!")
			text, _, _ = do(t, e, cmd("kill -0 $! && echo alive; echo $!"))
			assert.Equal(t, "alive\n"+strconv.Itoa(out.Metadata.PID), body(text))
			do(t, e, cmd("kill %1 2>/dev/null || kill $!"))
		})
	}
}

// TestExitStatusCarriesOver: `$?` in a command is the status of the one
// before, as at a terminal, also after C-c and after a syntax error;
// `set -x` shows none of the plumbing that restores it.
func TestExitStatusCarriesOver(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			text, _, _ := do(t, e, cmd("echo $?"))
			assert.Equal(t, "0", body(text), "a new shell starts with 0")
			do(t, e, cmd("(exit 3)"))
			text, out, _ := do(t, e, cmd("echo status=$?"))
			assert.Equal(t, "status=3", body(text))
			assert.Equal(t, 0, out.ExitCode)
			text, _, _ = do(t, e, cmd("echo again=$?"))
			assert.Equal(t, "again=0", body(text))

			_, out, _ = do(t, e, withTimeout("sleep 30", 0.05))
			require.Equal(t, -1, out.ExitCode)
			waitFor(t, e, "sleep runs", runs("sleep"))
			_, out, _ = do(t, e, input("C-c"))
			require.Equal(t, 130, out.ExitCode)
			text, _, _ = do(t, e, cmd("echo $?"))
			assert.Equal(t, "130", body(text))

			_, out, _ = do(t, e, cmd(`echo "abc`))
			require.Equal(t, 2, out.ExitCode)
			text, _, _ = do(t, e, cmd("echo $?"))
			assert.Equal(t, "2", body(text))

			do(t, e, cmd("false"))
			text, _, _ = do(t, e, cmd("set -x; echo traced"))
			do(t, e, cmd("set +x"))
			assert.NotContains(t, text, "__sbx_ret")
			assert.NotContains(t, text, "return")
		})
	}
}

func TestSoftTimeoutAndContinue(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			g := newGate(t)
			// Silent after "started" until the gate opens: the soft
			// timeout, not the command's end, ends the call.
			text, out, obs := doSoft(t, e, cmd("echo started; "+g.wait()+"; echo finished"))
			assert.False(t, obs.IsError)
			assert.Equal(t, -1, out.ExitCode)
			assert.True(t, out.Timeout)
			assert.Equal(t, TimeoutSoft, out.TimeoutKind)
			assert.Equal(t, "started", body(text))
			assert.Contains(t, text, "[The command has no new output after 0.2 seconds. "+timeoutTemplate+"]")

			// Empty command: waits and returns only the new output.
			g.open(t)
			text, out, obs = do(t, e, cmd(""))
			assert.False(t, obs.IsError, text)
			assert.Equal(t, 0, out.ExitCode)
			assert.Equal(t, continuedPrefix+"finished", body(text))
			assert.Contains(t, text, "[The command completed with exit code 0.]")

			// Nothing runs now: polls and input are errors.
			text, _, obs = do(t, e, cmd(""))
			assert.True(t, obs.IsError)
			assert.Equal(t, "No previous running command to retrieve logs from.", text)
			text, _, obs = do(t, e, input("hello"))
			assert.True(t, obs.IsError)
			assert.Equal(t, "No previous running command to interact with.", text)
			text, _, obs = do(t, e, input("C-c"))
			assert.True(t, obs.IsError)
			assert.Equal(t, "No previous running command to interact with.", text)
		})
	}
}

// TestSoftTimeoutCountsFromLastOutput: a command that keeps printing for
// longer than the soft timeout, never silent for it, is not cut off; the
// soft timeout ends the call once output stops, with every line in it. The
// test decides when output happens (each line waits at a gate the test
// opens), so a slow machine cannot make a gap between lines: the gaps are
// a quarter of the soft timeout plus the time the shell takes to echo,
// which only a stall of more than 1.5 s (a hang) makes a soft timeout.
func TestSoftTimeoutCountsFromLastOutput(t *testing.T) {
	t.Parallel()
	const soft = 2 * time.Second
	opts := testOptions(t, "bash")
	opts.SoftTimeout = soft
	e := newExec(t, opts)
	// A gate per line (a FIFO read twice could give the second read the
	// first writer's end of file), more than the lines the loop below asks for.
	gates := make([]gate, 12)
	quoted := make([]string, len(gates))
	for i := range gates {
		gates[i] = newGate(t)
		quoted[i] = shellQuote(string(gates[i]))
	}
	stop := filepath.Join(t.TempDir(), "stop")

	type result struct {
		obs *tools.Observation
		err error
	}
	ended := make(chan result, 1)
	start := time.Now()
	go func() {
		obs, err := e.Call(context.Background(), cmd("for g in "+strings.Join(quoted, " ")+
			"; do read -r _ <\"$g\"; [ -e "+shellQuote(stop)+" ] && break; echo \"line $((n+=1)).\"; done; echo finished"))
		ended <- result{obs, err}
	}()

	// A line every soft/4 until the call is 1.5 soft timeouts old: a soft
	// timeout counted from the call's start would cut it off.
	var want []string
	for n := 1; n == 1 || time.Since(start) < soft+soft/2; n++ {
		if n > 1 {
			<-time.After(soft / 4) // the command's pace, not a wait for an event
		}
		require.Less(t, n, len(gates), "more lines than gates")
		gates[n-1].open(t)
		line := fmt.Sprintf("line %d.", n)
		want = append(want, line)
		callEnded := false
		require.Eventually(t, func() bool {
			select {
			case r := <-ended:
				ended <- r
				callEnded = true
				return true
			default:
			}
			e.mu.Lock()
			s := e.sess
			e.mu.Unlock()
			if s == nil {
				return false
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			return printed(line)(s)
		}, time.Minute, time.Millisecond, "%s printed", line)
		if callEnded {
			r := <-ended
			t.Fatalf("the call ended while the command printed a line every %v (before %q): %v %v", soft/4, line, r.err, r.obs.Text())
		}
	}

	// Silent now, at the gate: the soft timeout ends the call.
	var r result
	select {
	case r = <-ended:
	case <-time.After(soft + 20*time.Second):
		t.Fatal("the soft timeout did not end the call after the output stopped")
	}
	require.NoError(t, r.err)
	out, _ := r.obs.Structured.(Output)
	assert.Equal(t, -1, out.ExitCode, r.obs.Text())
	assert.Equal(t, TimeoutSoft, out.TimeoutKind)
	assert.Equal(t, strings.Join(want, "\n"), body(r.obs.Text()))

	// The command goes on from the gate and completes.
	require.NoError(t, os.WriteFile(stop, nil, 0o600))
	gates[len(want)].open(t)
	waitFor(t, e, "the command ends", commandEnded)
	text, out, _ := do(t, e, cmd(""))
	assert.Equal(t, 0, out.ExitCode, text)
	assert.Equal(t, continuedPrefix+"finished", body(text))
}

func TestHardTimeout(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			// Silent for longer than the soft timeout after "late": an
			// explicit timeout disables the soft one, so the hard one ends
			// the call.
			text, out, _ := doSoft(t, e, withTimeout("sleep 0.1; echo late; sleep 30", 0.6))
			assert.Equal(t, -1, out.ExitCode)
			assert.Equal(t, TimeoutHard, out.TimeoutKind)
			assert.Equal(t, "late", body(text))
			assert.Contains(t, text, "[The command timed out after 0.6 seconds. "+timeoutTemplate+"]")
			// The process keeps running.
			text, _, obs := do(t, e, cmd("echo new"))
			assert.True(t, obs.IsError)
			assert.Contains(t, text, `[Your command "echo new" is NOT executed. The previous command is still running`)
			// Interrupt it.
			text, out, _ = do(t, e, input("C-c"))
			assert.Equal(t, 130, out.ExitCode, text)
			assert.Contains(t, text, "[The command completed with exit code 130. CTRL+C was sent.]")
		})
	}
}

func TestWallClockCap(t *testing.T) {
	t.Parallel()
	opts := testOptions(t, "bash")
	// The cap counts from the call's start, whatever the output: a command
	// that prints all along is ended by it. The soft timeout is out of the
	// way (an hour), so the cap ends the call however slowly the loop runs
	// (a 0.3 s soft timeout could fire between two ticks under load); 2 s
	// leaves room for the two ticks asserted below unless the machine hangs.
	opts.SoftTimeout = time.Hour
	opts.MaxWait = 2 * time.Second
	e := newExec(t, opts)
	// Never silent: only the cap ends the call. The
	// loop forks nothing (read -t on a pipe nobody writes to is its 0.05 s
	// wait): a fork of the shell that has not yet exec'd sleep could miss
	// the C-c below. It runs in a subshell that exits 130 on SIGINT: a
	// C-c that lands as read -t times out would otherwise end the loop
	// with read's status, 142 (seen under load).
	g := newGate(t)
	text, out, _ := do(t, e, cmd("( trap 'exit 130' INT; while :; do echo tick; read -t 0.05 -r _ <>"+string(g)+"; done )"))
	assert.Equal(t, -1, out.ExitCode)
	assert.Equal(t, TimeoutLimit, out.TimeoutKind)
	assert.Contains(t, body(text), "tick\ntick")
	assert.Contains(t, text, "[The command is still running after 2 seconds, the longest a call waits without a `timeout`.")
	text, out, _ = do(t, e, input("C-c"))
	assert.Equal(t, 130, out.ExitCode, text)
}

func TestRefusedWhileRunningIsNotExecuted(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			marker := filepath.Join(t.TempDir(), "ran")
			_, out, _ := do(t, e, withTimeout("echo first; sleep 30", 0.05))
			require.Equal(t, -1, out.ExitCode)
			_, out, _ = doSoft(t, e, cmd("")) // soft timeout again, nothing new
			require.Equal(t, TimeoutSoft, out.TimeoutKind)
			waitFor(t, e, "sleep runs", runs("sleep"))

			text, out, obs := do(t, e, cmd("touch "+marker))
			assert.True(t, obs.IsError)
			assert.Equal(t, -1, out.ExitCode)
			assert.Contains(t, text, fmt.Sprintf("[Your command %q is NOT executed.", "touch "+marker))
			assert.Contains(t, text, timeoutTemplate)

			text, out, _ = do(t, e, input("C-c"))
			assert.Equal(t, 130, out.ExitCode, text)
			assert.NoFileExists(t, marker, "the refused command must never run")
			text, _, _ = do(t, e, cmd("echo ok"))
			assert.Equal(t, "ok", body(text))
			assert.NoFileExists(t, marker)
		})
	}
}

func TestRefusalShowsNewOutput(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	g := newGate(t)
	_, out, _ := do(t, e, withTimeout(g.wait()+"; echo later; sleep 30", 0.05))
	require.Equal(t, -1, out.ExitCode)
	g.open(t)
	waitFor(t, e, `"later" arrives between calls`, printed("later\n"))
	text, _, obs := do(t, e, cmd("echo x"))
	assert.True(t, obs.IsError)
	assert.True(t, strings.HasPrefix(text, continuedPrefix+"later\n[Your command"), text)
	do(t, e, input("C-c"))
}

func TestPreviousCommandFinishedMeanwhile(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	g := newGate(t)
	_, out, _ := do(t, e, withTimeout(g.wait()+"; echo done-old", 0.05))
	require.Equal(t, -1, out.ExitCode)
	g.open(t)
	waitFor(t, e, "the command ends between calls", commandEnded)
	text, out, obs := do(t, e, cmd("echo new"))
	assert.False(t, obs.IsError)
	assert.Equal(t, 0, out.ExitCode)
	assert.True(t, strings.HasPrefix(text, continuedPrefix+"done-old\n[The previous command completed with exit code 0.]\n\nnew\n"), text)
}

func TestInput(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			text, out, _ := doSoft(t, e, cmd("printf 'name? '; IFS= read -r name; echo \"hello $name\""))
			require.Equal(t, -1, out.ExitCode)
			assert.True(t, strings.HasPrefix(text, "name?\n[The command has no new output"), "the unfinished prompt line is returned: %q", text)

			text, out, _ = do(t, e, input("  world  "))
			assert.Equal(t, 0, out.ExitCode, text)
			assert.Equal(t, continuedPrefix+"hello   world", body(text), "input is typed as given; echo is off")

			// C-d ends input.
			_, out, _ = do(t, e, withTimeout("cat", 0.05))
			require.Equal(t, -1, out.ExitCode)
			text, out, _ = do(t, e, Action{Command: "line one", IsInput: true, Timeout: ptr(0.3)})
			assert.Equal(t, -1, out.ExitCode)
			assert.Equal(t, continuedPrefix+"line one", body(text))
			text, out, _ = do(t, e, input("C-d"))
			assert.Equal(t, 0, out.ExitCode, text)
			assert.Contains(t, text, "[The command completed with exit code 0. CTRL+D was sent.]")
		})
	}
}

func TestInputKeys(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	// od shows exactly which bytes a key sends.
	// It prints nothing until its input ends: each call returns on its
	// own timeout.
	_, out, _ := do(t, e, withTimeout("od -An -c", 0.05))
	require.Equal(t, -1, out.ExitCode)
	// (BS would erase the TAB: the line editor of the pty handles it.)
	for _, k := range []string{"UP", "TAB", "ESC", "ENTER"} {
		_, out, _ = do(t, e, Action{Command: k, IsInput: true, Timeout: ptr(0.05)})
		require.Equal(t, -1, out.ExitCode, k)
	}
	text, out, _ := do(t, e, input("C-d"))
	require.Equal(t, 0, out.ExitCode, text)
	assert.Contains(t, text, `033   [   A  \t 033  \n`)

	// C-z stops the job: the shell prompt returns with 148.
	do(t, e, withTimeout("sleep 30", 0.05))
	waitFor(t, e, "sleep runs", runs("sleep"))
	text, out, _ = do(t, e, input("C-z"))
	assert.Equal(t, 148, out.ExitCode, text)
	assert.Contains(t, text, "CTRL+Z was sent.")
	do(t, e, cmd("kill -9 %1"))
}

func TestInputAfterCommandEnded(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	g := newGate(t)
	_, out, _ := do(t, e, withTimeout(g.wait()+"; echo bye", 0.05))
	require.Equal(t, -1, out.ExitCode)
	g.open(t)
	waitFor(t, e, "the command ends between calls", commandEnded)
	text, out, obs := do(t, e, input("exit"))
	assert.False(t, obs.IsError)
	assert.Equal(t, 0, out.ExitCode)
	assert.Contains(t, text, "bye")
	assert.Contains(t, text, "before your input arrived, so the input was NOT sent.")
	text, _, _ = do(t, e, cmd("echo still here"))
	assert.Equal(t, "still here", body(text), "the shell did not receive the input")
}

func TestUnterminatedQuoteHasNoPS2(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			text, out, _ := do(t, e, cmd(`echo "abc`))
			// The whole command text is read at once: an unterminated quote
			// is a syntax error, not a wait for more input.
			assert.Equal(t, 2, out.ExitCode, text)
			assert.NotContains(t, text, "> ")
			text, _, _ = do(t, e, cmd("echo fine"))
			assert.Equal(t, "fine", body(text))
		})
	}
}

func TestLiteralGuard(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	text, _, obs := do(t, e, cmd(`{"command": "ls"}`))
	assert.True(t, obs.IsError)
	assert.Contains(t, text, "looks like a Python/JSON dict literal")
	text, _, obs = do(t, e, cmd(`[[ -d / ]] && echo ok`))
	assert.False(t, obs.IsError)
	assert.Equal(t, "ok", body(text))
}

func TestArgumentErrors(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	text, _, obs := do(t, e, Action{Command: "ls", Reset: true, IsInput: true})
	assert.True(t, obs.IsError)
	assert.Equal(t, "Cannot use reset=True with is_input=True", text)
	_, _, obs = do(t, e, cmd("echo a\x00b"))
	assert.True(t, obs.IsError)
}

func TestOutputTruncation(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			opts := testOptions(t, shell)
			e := newExec(t, opts)
			text, out, _ := do(t, e, cmd("seq 1 100000"))
			assert.Equal(t, 0, out.ExitCode)
			require.True(t, out.Truncated)
			require.NotEmpty(t, out.FullOutputPath)
			assert.True(t, strings.HasPrefix(out.FullOutputPath, opts.StateDir), out.FullOutputPath)
			assert.True(t, strings.HasPrefix(text, "1\n2\n3\n"))
			assert.Contains(t, text, "The complete output has been saved to "+out.FullOutputPath)
			assert.Contains(t, text, "99999\n100000\n[The command completed with exit code 0.]")
			assert.LessOrEqual(t, utf8.RuneCountInString(body(text)), DefaultMaxOutputChars)
			full, err := os.ReadFile(out.FullOutputPath)
			require.NoError(t, err)
			assert.Len(t, full, 588895) // seq 1 100000 | wc -c
			st, err := os.Stat(opts.StateDir)
			require.NoError(t, err)
			assert.Equal(t, os.FileMode(0o700), st.Mode().Perm())
		})
	}
}

func TestIdleOutputShowsInNextCall(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	g := newGate(t)
	do(t, e, cmd("("+g.wait()+"; echo from-background) &"))
	g.open(t)
	waitFor(t, e, "the background job prints while the shell is idle", printed("from-background\n"))
	text, _, _ := do(t, e, cmd("echo now"))
	assert.Contains(t, body(text), "from-background")
	assert.Contains(t, body(text), "now")
}

func TestResetKillsAndStartsFresh(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			do(t, e, cmd("export FOO=bar; cd /"))
			_, out, _ := do(t, e, cmd("sleep 60 &"))
			bg := out.Metadata.PID
			require.Positive(t, bg)
			do(t, e, withTimeout("sleep 60", 0.05)) // a running foreground command too

			text, out, obs := do(t, e, Action{Reset: true})
			assert.False(t, obs.IsError)
			assert.Equal(t, "[RESET]", out.Command)
			assert.Equal(t, 0, out.ExitCode)
			assert.True(t, out.ShellRestarted)
			assert.True(t, strings.HasPrefix(text, "Terminal session has been reset. All previous environment variables and session state have been cleared."), text)
			assert.False(t, processAlive(bg), "background job of the old shell is killed")

			text, out, _ = do(t, e, Action{Reset: true, Command: "echo ${FOO:-unset}; pwd"})
			assert.Equal(t, "[RESET] echo ${FOO:-unset}; pwd", out.Command)
			assert.Contains(t, text, "Terminal session has been reset.")
			assert.Contains(t, text, "\n\nunset\n"+e.cfg.dir+"\n[The command completed with exit code 0.]")
		})
	}
}

func TestShellExitStartsNewShell(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			do(t, e, cmd("export FOO=bar"))
			text, out, _ := do(t, e, cmd("exit 3"))
			assert.Equal(t, 3, out.ExitCode, text)
			assert.Contains(t, text, "[The shell exited with code 3. The next command starts a new shell")

			text, out, obs := do(t, e, cmd("echo ${FOO:-unset}"))
			assert.False(t, obs.IsError)
			assert.True(t, out.ShellRestarted)
			assert.True(t, strings.HasPrefix(text, "The previous shell session ended (exit code 3), so a new one was started."), text)
			assert.Contains(t, text, "\n\nunset\n[The command completed with exit code 0.]")

			// Killed from inside, while idle.
			g := newGate(t)
			do(t, e, cmd("("+g.wait()+"; kill -9 $$) &"))
			g.open(t)
			waitFor(t, e, "the shell is killed while idle", func(s *session) bool { return s.exited })
			text, out, _ = do(t, e, cmd("echo back"))
			assert.True(t, out.ShellRestarted)
			assert.Contains(t, text, "exit code 137")
			assert.Contains(t, text, "back")
		})
	}
}

func TestContextCancelInterrupts(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The caller gives up once the command runs.
			cancelled := make(chan struct{})
			go func() {
				defer close(cancelled)
				eventually(t, e, "sleep runs", runs("sleep"))
				cancel()
			}()
			obs, err := e.Call(ctx, withTimeout("echo begun; sleep 30", 60))
			<-cancelled
			require.NoError(t, err)
			out := obs.Structured.(Output)
			assert.Equal(t, 130, out.ExitCode, obs.Text())
			assert.Contains(t, obs.Text(), "begun")
			assert.Contains(t, obs.Text(), "The command was interrupted by user request. The process received SIGINT (Ctrl+C)")
			text, _, _ := do(t, e, cmd("echo next"))
			assert.Equal(t, "next", body(text))

			// A context that is already done: nothing happens.
			_, err = e.Call(ctx, cmd("echo no"))
			assert.ErrorIs(t, err, context.Canceled)
		})
	}
}

func TestStreaming(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	var mu sync.Mutex
	var chunks []string
	sawOne := make(chan struct{})
	ctx := tools.WithStream(context.Background(), func(b []byte) {
		mu.Lock()
		chunks = append(chunks, string(b))
		if len(chunks) == 1 {
			close(sawOne)
		}
		mu.Unlock()
	})
	// The command goes on once its first output has been streamed.
	g := newGate(t)
	opened := make(chan struct{})
	go func() {
		defer close(opened)
		select {
		case <-sawOne:
			g.open(t)
		case <-time.After(time.Minute):
			t.Error("no output streamed while the command runs")
		}
	}()
	obs, err := e.Call(ctx, cmd("echo one; "+g.wait()+"; printf '\\033[32mtwo\\033[0m\\n'"))
	<-opened
	require.NoError(t, err)
	require.Equal(t, 0, obs.Structured.(Output).ExitCode)
	mu.Lock()
	defer mu.Unlock()
	assert.GreaterOrEqual(t, len(chunks), 2, "output arrives while the command runs")
	assert.Equal(t, "one\ntwo\n", strings.Join(chunks, ""), "cleaned text, no markers")
}

// Output that arrives between two calls (a client polling a running
// command) is streamed at the start of the next call: a client following
// the stream (sandboxd run) gets every line once, in order.
func TestStreamHasNoGapsBetweenPolls(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	var mu sync.Mutex
	var streamed strings.Builder
	ctx := tools.WithStream(context.Background(), func(b []byte) {
		mu.Lock()
		streamed.Write(b)
		mu.Unlock()
	})
	g1, g2 := newGate(t), newGate(t)
	script := "seq 1 20; " + g1.wait() + "; seq 21 40; " + g2.wait() + "; seq 41 60"
	_, out, _ := do(t, e, withTimeout(script, 0.05))
	require.Equal(t, -1, out.ExitCode, "still running after the first call")
	_, err := e.Call(ctx, withTimeout("", 0.05)) // attach briefly
	require.NoError(t, err)
	g1.open(t)
	waitFor(t, e, "output arrives with no call attached", func(s *session) bool {
		return bytes.Contains(s.unstreamed, []byte("40\n"))
	})
	g2.open(t)
	for range 100 {
		obs, err := e.Call(ctx, withTimeout("", 1))
		require.NoError(t, err)
		if obs.Structured.(Output).ExitCode != -1 {
			break
		}
	}
	mu.Lock()
	defer mu.Unlock()
	lines := strings.Fields(streamed.String())
	require.NotEmpty(t, lines)
	first, err := strconv.Atoi(lines[0])
	require.NoError(t, err)
	for i, l := range lines {
		assert.Equal(t, strconv.Itoa(first+i), l, "line %d of the stream", i)
	}
	assert.Equal(t, "60", lines[len(lines)-1])
}

func TestConcurrentCalls(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	marker := filepath.Join(t.TempDir(), "ran")
	g := newGate(t)
	done := make(chan Output)
	go func() {
		obs, err := e.Call(context.Background(), withTimeout(g.wait()+"; echo first", 60))
		if !assert.NoError(t, err) {
			done <- Output{ExitCode: -2}
			return
		}
		done <- obs.Structured.(Output)
	}()
	require.Eventually(t, func() bool { return e.holder.Load() != nil }, time.Minute, time.Millisecond, "the first call holds the terminal")
	text, out, obs := do(t, e, cmd("touch "+marker))
	assert.True(t, obs.IsError)
	assert.Equal(t, -1, out.ExitCode)
	assert.Contains(t, text, "is NOT executed")
	g.open(t)
	first := <-done
	assert.Equal(t, 0, first.ExitCode)
	assert.NoFileExists(t, marker)

	// Polls wait for the call in flight instead of being refused.
	var wg sync.WaitGroup
	results := make([]string, 4)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obs, err := e.Call(context.Background(), cmd(fmt.Sprintf("echo %d", i)))
			if assert.NoError(t, err) {
				results[i] = obs.Text()
			}
		}()
	}
	wg.Wait()
	ran := 0
	for i, r := range results {
		if strings.HasPrefix(r, fmt.Sprintf("%d\n", i)) {
			ran++
		} else {
			assert.Contains(t, r, "is NOT executed")
		}
	}
	assert.GreaterOrEqual(t, ran, 1)
}

func TestTTYSettingsRestored(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	do(t, e, cmd("stty echo"))
	text, _, _ := do(t, e, cmd("echo hi"))
	assert.Equal(t, "hi", body(text), "the typed line must not be echoed")
}

func TestCloseKillsEverything(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			opts := testOptions(t, shell)
			opts.KillGrace = 50 * time.Millisecond // the shell ignores TERM and HUP: SIGKILL ends it
			e, err := NewExecutor(opts)
			require.NoError(t, err)
			_, out, _ := do(t, e, cmd("sleep 60 &"))
			bg := out.Metadata.PID
			_, out, _ = do(t, e, withTimeout("trap '' TERM HUP; sleep 60 & wait", 0.05))
			require.Equal(t, -1, out.ExitCode)
			shellPID := e.sess.pid
			require.Eventually(t, func() bool { return ignores(shellPID, unix.SIGHUP) }, time.Minute, time.Millisecond, "the trap is set")
			require.NoError(t, e.Close())
			assert.False(t, processAlive(bg))
			assert.False(t, processAlive(shellPID))
			assert.Empty(t, sessionMembers(shellPID, ""))
			require.NoError(t, e.Close(), "Close is idempotent")
			_, err = e.Call(context.Background(), cmd("echo x"))
			assert.ErrorIs(t, err, ErrClosed)
		})
	}
}

// Processes that ignore TERM and HUP and each fork a successor before they
// exit keep their count level while every pid changes (a fork bomb at its
// pids limit looks the same), and a scan of /proc can miss a chain of them
// outright (a child forked after the listing, its parent gone before it is
// read): Close must freeze and end them all. Every link holds the write
// end of a FIFO, so the test's read end sees EOF exactly when the last of
// them has died; a scan would be fooled as terminate's own once was.
func TestCloseEndsChurningProcesses(t *testing.T) {
	t.Parallel()
	fifo := filepath.Join(t.TempDir(), "alive")
	require.NoError(t, unix.Mkfifo(fifo, 0o600))
	r, err := os.OpenFile(fifo, os.O_RDONLY|unix.O_NONBLOCK, 0)
	require.NoError(t, err)
	defer r.Close()
	opts := testOptions(t, "bash")
	opts.KillGrace = 50 * time.Millisecond
	e, err := NewExecutor(opts)
	require.NoError(t, err)
	shellPID, tag := e.sess.pid, e.sess.tag
	t.Cleanup(func() { // whatever the outcome, leave no chain running on the host
		w := newSweeper(shellPID, tag)
		for range 1000 {
			if n, _ := w.Signal(unix.SIGKILL); n == 0 {
				return
			}
		}
	})
	_, out, _ := do(t, e, cmd(`exec 3>`+shellQuote(fifo)+`; trap '' TERM HUP; w(){ sleep 0.01; w & }; for i in 1 2 3 4 5 6 7 8; do w & done; exec 3>&-; echo started`))
	require.Equal(t, 0, out.ExitCode)
	require.NoError(t, e.Close())
	// A bound against a hang: the links die within Close, so EOF is there
	// at once; a survivor keeps the FIFO open for ever.
	require.NoError(t, r.SetReadDeadline(time.Now().Add(20*time.Second)))
	n, err := r.Read(make([]byte, 1))
	assert.Equal(t, 0, n)
	require.ErrorIs(t, err, io.EOF, "a process of the session outlived Close (it holds the FIFO open)")
	assert.Empty(t, sessionMembers(shellPID, tag), "nothing of the session is left, stopped or running")
}

func TestTempStateDirRemovedOnClose(t *testing.T) {
	t.Parallel()
	opts := testOptions(t, "bash")
	opts.StateDir = ""
	e, err := NewExecutor(opts)
	require.NoError(t, err)
	dir := e.opts.StateDir
	assert.DirExists(t, dir)
	require.NoError(t, e.Close())
	assert.NoDirExists(t, dir)
}

func TestExtraEnvAndShellOption(t *testing.T) {
	t.Parallel()
	opts := testOptions(t, "sh")
	opts.Env = map[string]string{"GREETING": "hola", "TERM": "dumb"}
	e := newExec(t, opts)
	assert.False(t, e.cfg.bash)
	text, _, _ := do(t, e, cmd("echo $GREETING $TERM; echo ${BASH_VERSION:-no-bash}"))
	if strings.Contains(text, "no-bash") {
		assert.Equal(t, "hola dumb\nno-bash", body(text))
	} else {
		// /bin/sh is bash on this system; still the POSIX flavour.
		assert.True(t, strings.HasPrefix(body(text), "hola dumb\n"))
	}
}

func processAlive(pid int) bool {
	if err := unix.Kill(pid, 0); err != nil {
		return false
	}
	state, _, ok := procStat(pid)
	return ok && state != 'Z' && state != 'X'
}

func ptr[T any](v T) *T { return &v }

func TestCtrlKeyWithoutIsInput(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	_, out, _ := do(t, e, withTimeout("sleep 30", 0.05))
	require.Equal(t, -1, out.ExitCode)
	waitFor(t, e, "sleep runs", runs("sleep"))
	text, out, _ := do(t, e, cmd("C-c"))
	assert.Equal(t, 130, out.ExitCode, text)
}

func TestZeroTimeoutMeansNone(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	_, out, _ := doSoft(t, e, withTimeout("sleep 30", 0))
	assert.Equal(t, TimeoutSoft, out.TimeoutKind)
	do(t, e, input("C-c"))
}

// TestTypeAheadIsNotTakenForTheEnd: input typed into a command that does not
// read it runs in the shell after the command; its prompt must not be taken
// for the end of a later command.
func TestTypeAheadIsNotTakenForTheEnd(t *testing.T) {
	t.Parallel()
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			t.Parallel()
			e := newExec(t, testOptions(t, shell))
			first, second := newGate(t), newGate(t)
			_, out, _ := do(t, e, withTimeout(first.wait(), 0.05))
			require.Equal(t, -1, out.ExitCode)
			// Typed while the command runs (it does not read the
			// terminal): the shell runs it after the command ends.
			text, out, _ := do(t, e, Action{Command: second.wait() + "; echo typed-ahead", IsInput: true, Timeout: ptr(0.05)})
			require.Equal(t, -1, out.ExitCode, text)
			first.open(t)
			text, out, _ = do(t, e, cmd(""))
			assert.Equal(t, 0, out.ExitCode, text)
			// The typed-ahead line goes on once the next command has been
			// sent, which thus waits behind it: the typed-ahead line's
			// prompt comes first.
			opened := make(chan struct{})
			go func() {
				defer close(opened)
				if eventually(t, e, "the next command is sent", func(s *session) bool { return s.seq == 2 }) {
					second.open(t)
				}
			}()
			text, out, _ = do(t, e, cmd("echo next"))
			<-opened
			assert.Equal(t, 0, out.ExitCode, text)
			assert.Equal(t, "typed-ahead\nnext", body(text))
		})
	}
}

func TestCloseDuringCall(t *testing.T) {
	t.Parallel()
	e, err := NewExecutor(testOptions(t, "bash"))
	require.NoError(t, err)
	returned := make(chan *tools.Observation)
	go func() {
		obs, err := e.Call(context.Background(), withTimeout("sleep 30", 20))
		assert.NoError(t, err)
		returned <- obs
	}()
	waitFor(t, e, "sleep runs", runs("sleep"))
	require.NoError(t, e.Close())
	obs := <-returned
	require.NotNil(t, obs)
	// Either the command's end (killed by SIGTERM) or the shell's is seen.
	assert.Regexp(t, `exit code 143|The shell exited`, obs.Text())
}

func TestInteractiveProgram(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	// A program with its own prompt that reads lines until "quit".
	script := `while printf 'calc> '; IFS= read -r line; do [ "$line" = quit ] && break; echo "= $((line))"; done`
	text, out, _ := doSoft(t, e, cmd(script))
	require.Equal(t, -1, out.ExitCode)
	assert.True(t, strings.HasPrefix(text, "calc>"), text)
	text, out, _ = do(t, e, Action{Command: "6*7", IsInput: true, Timeout: ptr(0.3)})
	assert.Equal(t, -1, out.ExitCode)
	assert.Equal(t, continuedPrefix+"= 42\ncalc>", body(text))
	text, out, _ = do(t, e, input("quit"))
	assert.Equal(t, 0, out.ExitCode, text)
}

func TestStdoutRedirectedKeepsPrompt(t *testing.T) {
	t.Parallel()
	e := newExec(t, testOptions(t, "bash"))
	log := filepath.Join(t.TempDir(), "log")
	_, out, _ := do(t, e, cmd("exec >"+log))
	assert.Equal(t, 0, out.ExitCode)
	_, out, _ = do(t, e, cmd("echo into-log; false"))
	assert.Equal(t, 1, out.ExitCode, "the command still completes")
	data, err := os.ReadFile(log)
	require.NoError(t, err)
	assert.Equal(t, "into-log\n", string(data))
}

func TestBrokenBashFallsBackToSh(t *testing.T) {
	fake := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(fake, "bash"), []byte("#!/bin/sh\nexit 1\n"), 0o755))
	t.Setenv("PATH", fake+string(os.PathListSeparator)+os.Getenv("PATH"))
	opts := testOptions(t, "")
	opts.StartTimeout = 3 * time.Second
	opts.Logger = slog.New(slog.DiscardHandler)
	e := newExec(t, opts)
	assert.False(t, e.cfg.bash)
	text, out, _ := do(t, e, cmd("echo works"))
	assert.Equal(t, 0, out.ExitCode)
	assert.Equal(t, "works", body(text))
}

// `set -x` traces the model's commands, not the terminal's plumbing (the
// line that runs each command, the prompt hook); `$?` and `set -e` behave
// as without it, and xtrace stays on across a command that does not parse
// and goes off with `set +x`. bash traces the commands one level deeper
// ("++"): they run through eval.
func TestSetXShowsNoPlumbing(t *testing.T) {
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			e := newExec(t, testOptions(t, shell))
			trace := "+ "
			if shell == "bash" {
				trace = "++ "
			}
			noPlumbing := func(text string) {
				t.Helper()
				assert.NotContains(t, text, "__sbx")
				assert.NotRegexp(t, `(?m)^\++ eval`, text)
			}
			text, _, _ := do(t, e, cmd("set -x"))
			noPlumbing(text)
			assert.Empty(t, body(text))
			text, _, _ = do(t, e, cmd("echo hi"))
			noPlumbing(text)
			assert.Equal(t, trace+"echo hi\nhi", body(text))

			do(t, e, cmd("false"))
			text, _, _ = do(t, e, cmd("echo status=$?"))
			noPlumbing(text)
			assert.Contains(t, body(text), "status=1", "$? is the previous command's")

			text, _, _ = do(t, e, cmd(`echo "unterminated`))
			noPlumbing(text)
			text, out, _ := do(t, e, cmd("echo after"))
			noPlumbing(text)
			assert.Equal(t, trace+"echo after\nafter", body(text), "still on after a command that did not parse")
			assert.Equal(t, 0, out.ExitCode)

			text, _, _ = do(t, e, cmd("set +x"))
			noPlumbing(text)
			text, _, _ = do(t, e, cmd("echo quiet"))
			assert.Equal(t, "quiet", body(text), "off after set +x")

			// With set -e as well, a failing status does not end the shell.
			do(t, e, cmd("set -ex"))
			do(t, e, cmd("(exit 3) || true"))
			text, out, _ = do(t, e, cmd("echo still-here"))
			noPlumbing(text)
			assert.Contains(t, body(text), "still-here")
			assert.Equal(t, 0, out.ExitCode)
		})
	}
}
