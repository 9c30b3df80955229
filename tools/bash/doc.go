// Package bash is the `terminal` tool: one persistent shell per session on
// a pseudo-terminal, with names, parameters and message texts of the
// OpenHands terminal tool so agents prompted for it work unchanged.
//
// # How it works
//
//   - The shell is bash (`--noprofile --rcfile <init> --noediting -i`) or,
//     where an image has no bash, a POSIX sh (`-i`, init via $ENV): dash or
//     busybox ash. It runs in its own session (Setsid) with the pty as
//     controlling terminal (Setctty), so job control works and C-c becomes
//     SIGINT for the foreground job. The pty is opened with
//     golang.org/x/sys/unix: no cgo, no libc, any Linux image.
//   - The pty's echo is off: typed text never shows up in the output (and
//     busybox ash then skips its line editor). Its settings are restored
//     before every command in case a program or `stty` changed them.
//     Without its line editor busybox ash takes a wait for input that a
//     SIGCHLD interrupts (a background job ending while the shell is idle)
//     for the end of input and would exit: the sh init sets ignoreeof, and
//     the `Use "exit" to leave shell.` it then prints is dropped.
//   - A command's text is written to a private file and started by one short
//     typed line: the read builtin takes the file into a variable (bash:
//     read -d with an empty delimiter; sh: the file is one line quoting the
//     text, as a POSIX read has no -d) and eval runs it. So no 4095-byte
//     line limit applies, heredocs and multi-line scripts arrive whole, the
//     whole text is one command with one exit code, and the shell's
//     messages read as at a prompt, naming no file: "bash: x: command not
//     found", "sh: 1: eval: x: not found" (sh runs as argv[0] "sh").
//   - Job notices ("[1]+  Done  sleep 1") end the output of the command
//     after which the shell saw the job change, where a terminal shows them
//     (before its prompt), instead of opening the next command's output.
//     bash prints them after PROMPT_COMMAND, so the marker function prints
//     them first with `jobs -n` (see marker.go); dash and busybox print
//     them before PS1 (`.`, used before eval, printed pending ones before
//     the file). A job killed by `kill %1` dies a moment after the command
//     ends: if the shell has not seen it die by then, its notice comes with
//     the next command, as at a terminal it shows at the next prompt.
//     busybox reports a job that ends while the shell is idle at once, so
//     that notice opens the next command's output.
//   - Completion: after each command the shell prints a marker holding a
//     random per-shell nonce, a per-command sequence number, $?, $!, $PWD
//     and $PATH (bash from PROMPT_COMMAND, sh from PS1; see marker.go).
//     Output cannot fake it without the nonce; the sequence number keeps a
//     prompt of typed-ahead input from being taken for the end of a later
//     command. A reader goroutine parses markers and cleans output as it
//     arrives and wakes the waiting call: a fast command returns in about a
//     millisecond, there is no polling.
//   - Output is cleaned incrementally (clean.go): escape sequences removed,
//     lines rendered as a terminal shows them ("\r" overwrites, so
//     progress bars keep their last state; "\r\n" is a newline), invalid
//     UTF-8 as U+FFFD. Each call's output is collected with bounded memory
//     (tools/internal/output, shared with the skill tools); beyond the
//     limit the middle is cut and the full output is kept in a file under
//     the state directory. That file holds at most
//     16 MiB, a quarter of a sandbox's state tmpfs: of a larger output, its
//     first and last 8 MiB, with a line saying how much was cut between
//     them, and the note says so. When the disk is full, the oldest saved
//     outputs are removed to make room.
//   - Streaming: while a call runs, each piece of cleaned output goes to
//     tools.StreamFrom(ctx) as it arrives, in finished lines (a line still
//     being drawn follows when it ends or the call returns).
//   - Close and reset end every process of the shell's session (SIGTERM and
//     SIGHUP, a grace period, SIGKILL), then wait for both goroutines.
//
// # Deliberate differences from OpenHands
//
//   - Several commands in one call (`;`, `&&`, newlines, heredocs) run as one
//     command; OpenHands refuses newline-separated statements. No backslash
//     rewriting of `\;` and friends (an old tmux workaround upstream).
//   - The soft timeout really is the one the description states (10 s by
//     default, configurable); upstream says 10 s and uses 30 s.
//   - A call without `timeout` also returns after a wall-clock cap (300 s by
//     default), so a command that prints forever cannot block a call.
//   - A top-level `exit` or a killed shell does not wedge the session: the
//     call reports the shell's exit code, and the next call starts a new
//     shell and says so. Processes the old shell left are ended.
//   - `C-c` (any `C-<letter>`) is a key even without `is_input`; named keys
//     (UP, TAB, ...) only with it. Input keeps its blanks (upstream strips
//     it). Input for a command that has already finished is not sent (it
//     would go to the shell) and the result says so.
//   - `timeout: 0` means no timeout (upstream returns at once).
//   - Text: the exit code appears once ("[The command completed with exit
//     code N.]"), not again as "[Command finished with exit code N]"; the
//     truncation limit applies to the output, so the trailer lines are never
//     cut. Timeout notes print seconds as "2", not "2.0".
//   - The file with the full output of a cut command holds at most 16 MiB:
//     of a larger output its first and last 8 MiB, and the note says so
//     instead of "The complete output has been saved to"; upstream saves
//     all of it.
//   - Escape sequences are all removed (colours too) and lines rendered;
//     upstream keeps colours and raw carriage returns on its pty backend.
//   - The marker runs no command substitution (no `$(pwd)`, no
//     `command -v python`): the Python interpreter path is looked up here
//     from the shell's PATH.
//   - A new command while another call is still in flight is refused at once
//     with the "NOT executed" text instead of waiting.
//   - The user's ~/.bashrc is not read (deterministic start), unless the
//     session asks for the image's environment (shell_init: image,
//     shellinit.go): then the image's BASH_ENV and its user's .bashrc are
//     read first, with /dev/null as input, and the plumbing is set after
//     them.
//   - `set -x` traces the commands but none of the terminal's plumbing;
//     bash traces them one level deeper ("++ echo hi") since they run
//     through eval. With `set -ex` a command's `$?` starts at 0 instead of
//     the previous command's status.
package bash
