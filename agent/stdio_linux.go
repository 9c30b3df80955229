package agent

import (
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// protocolStdio returns stdin/stdout as the protocol connection. When they
// are the process's real fds it protects the stream: the protocol keeps a
// private duplicate of stdout, and fd 1 is pointed at stderr, so a stray
// write (a library printing, a child process inheriting fd 1) lands in the
// log instead of corrupting frames. Pipes and sockets are made non-blocking
// so that closing the connection interrupts a pending read or write.
func protocolStdio(in io.Reader, out io.Writer) (io.ReadWriteCloser, error) {
	if in != io.Reader(os.Stdin) || out != io.Writer(os.Stdout) {
		return proto.JoinConn(io.NopCloser(in), nopWriteCloser{out}), nil
	}
	outFD, err := syscall.Dup(1)
	if err != nil {
		return nil, fmt.Errorf("stdio: duplicating stdout: %w", err)
	}
	syscall.CloseOnExec(outFD)
	if err := syscall.Dup3(2, 1, 0); err != nil {
		_ = syscall.Close(outFD) // best effort: the dup is unused and the error is the one to report
		return nil, fmt.Errorf("stdio: pointing fd 1 at stderr: %w", err)
	}
	inFD, err := syscall.Dup(0)
	if err != nil {
		return nil, fmt.Errorf("stdio: duplicating stdin: %w", err)
	}
	syscall.CloseOnExec(inFD)
	// Nothing else may consume protocol bytes: fd 0 becomes /dev/null.
	if null, err := os.Open(os.DevNull); err == nil {
		_ = syscall.Dup3(int(null.Fd()), 0, 0) // best effort: without it fd 0 is merely still the protocol pipe
		_ = null.Close()                       // read-only: nothing to flush
	}
	pollable(inFD)
	pollable(outFD)
	return proto.JoinConn(os.NewFile(uintptr(inFD), "protocol-in"), os.NewFile(uintptr(outFD), "protocol-out")), nil
}

// pollable puts a pipe or socket in non-blocking mode, which makes
// os.NewFile register it with the runtime poller (Close then interrupts a
// blocked Read). A terminal or file is left alone: its mode is shared with
// other processes.
func pollable(fd int) {
	var st syscall.Stat_t
	if syscall.Fstat(fd, &st) != nil {
		return
	}
	if t := st.Mode & syscall.S_IFMT; t == syscall.S_IFIFO || t == syscall.S_IFSOCK {
		_ = syscall.SetNonblock(fd, true)
	}
}
