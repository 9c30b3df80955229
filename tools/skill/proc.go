package skill

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// pipeGrace is how long a finished run waits for the end of its output
// after its process group was killed: a process that left the group
// (setsid) and kept the output pipe open would otherwise hold the call.
const pipeGrace = 2 * time.Second

// procSpec is one process to run: a script of a skill, or an installer.
type procSpec struct {
	argv    []string
	dir     string
	env     []string
	timeout time.Duration
	// split gives stderr a pipe of its own (out's stderr argument says
	// which one a chunk came from); else both share one, in order.
	split bool
	// out receives the output as it comes, one call at a time.
	out func(stderr bool, p []byte)
}

// procResult is how a run ended.
type procResult struct {
	exit      int            // the exit code; -1 when killed by a signal or not started
	signal    syscall.Signal // the signal that killed it, if one did (ours included)
	timedOut  bool           // killed at spec.timeout
	cancelled bool           // killed because ctx ended
	startErr  error          // it did not start
}

// run runs spec in a session (and process group) of its own, stdin on
// /dev/null. On timeout or when ctx ends the whole group is killed
// (SIGKILL), and once the process exits whatever is left in its group is
// killed too, so a run leaves nothing behind unless it moved a process out
// of its group on purpose. run returns after the process was reaped and its
// output read to the end (or pipeGrace after, see there).
func run(ctx context.Context, spec procSpec) procResult {
	bin, err := lookPath(spec.argv[0], spec.env)
	if err != nil {
		return procResult{exit: -1, startErr: err}
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		return procResult{exit: -1, startErr: err}
	}
	readers := []*os.File{outR}
	errW := outW
	if spec.split {
		var errR *os.File
		if errR, errW, err = os.Pipe(); err != nil {
			outR.Close()
			outW.Close()
			return procResult{exit: -1, startErr: err}
		}
		readers = append(readers, errR)
	}
	cmd := &exec.Cmd{
		Path:        bin,
		Args:        spec.argv,
		Dir:         spec.dir,
		Env:         spec.env,
		Stdout:      outW,
		Stderr:      errW,
		SysProcAttr: &syscall.SysProcAttr{Setsid: true},
	}
	err = cmd.Start()
	outW.Close()
	if spec.split {
		errW.Close()
	}
	if err != nil {
		for _, r := range readers {
			r.Close()
		}
		return procResult{exit: -1, startErr: err}
	}
	pid := cmd.Process.Pid

	var mu sync.Mutex
	var reading sync.WaitGroup
	for i, r := range readers {
		stderr := i == 1
		reading.Go(func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := r.Read(buf)
				if n > 0 {
					mu.Lock()
					spec.out(stderr, buf[:n])
					mu.Unlock()
				}
				if err != nil {
					return
				}
			}
		})
	}
	readDone := make(chan struct{})
	go func() { reading.Wait(); close(readDone) }()

	exited, reap := waitExit(cmd)
	var res procResult
	timer := time.NewTimer(spec.timeout)
	select {
	case <-exited:
	case <-timer.C:
		res.timedOut = true
		killGroup(pid)
	case <-ctx.Done():
		res.cancelled = true
		killGroup(pid)
	}
	timer.Stop()
	<-exited
	killGroup(pid) // what the script left running in its group
	waitErr := reap()

	grace := time.NewTimer(pipeGrace)
	select {
	case <-readDone:
	case <-grace.C:
		for _, r := range readers {
			_ = r.SetReadDeadline(time.Now())
		}
		<-readDone
	}
	grace.Stop()
	for _, r := range readers {
		r.Close()
	}

	res.exit = -1
	var ee *exec.ExitError
	switch {
	case cmd.ProcessState != nil:
		res.exit = cmd.ProcessState.ExitCode()
		if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			res.signal = ws.Signal()
		}
	case errors.As(waitErr, &ee):
		res.exit = ee.ExitCode()
	case waitErr != nil:
		res.startErr = waitErr
	}
	return res
}

// killGroup sends SIGKILL to the process group pgid (ESRCH when it is empty
// is no error worth reporting).
func killGroup(pgid int) { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

// lookPath finds file on the PATH of env (not of this process: an
// installer may have put a newer python3 in $HOME/.local/bin).
func lookPath(file string, env []string) (string, error) {
	if strings.Contains(file, "/") {
		return file, nil
	}
	path := envValue(env, "PATH")
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, file)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w in PATH (%s)", file, exec.ErrNotFound, path)
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if v, ok := strings.CutPrefix(env[i], key+"="); ok {
			return v
		}
	}
	return ""
}
