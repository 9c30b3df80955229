//go:build !linux

package skill

import "os/exec"

// waitExit reports when cmd's process has exited. Without waitid(WNOWAIT)
// it is reaped at once, so killing its group afterwards could in theory hit
// a new group with the reused id; skills run in Linux sandboxes only, and
// this keeps the package compiling elsewhere.
func waitExit(cmd *exec.Cmd) (exited <-chan struct{}, reap func() error) {
	ch := make(chan struct{})
	var err error
	go func() {
		err = cmd.Wait()
		close(ch)
	}()
	return ch, func() error { <-ch; return err }
}
