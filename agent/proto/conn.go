package proto

import (
	"errors"
	"io"
)

// JoinConn makes one io.ReadWriteCloser of a read side and a write side:
// a child's stdout and stdin pipes, or the agent's own stdin and stdout.
// Close closes the write side first (the peer then sees EOF), then the
// read side.
func JoinConn(r io.ReadCloser, w io.WriteCloser) io.ReadWriteCloser {
	return &joined{r: r, w: w}
}

type joined struct {
	r io.ReadCloser
	w io.WriteCloser
}

func (j *joined) Read(p []byte) (int, error)  { return j.r.Read(p) }
func (j *joined) Write(p []byte) (int, error) { return j.w.Write(p) }
func (j *joined) Close() error                { return errors.Join(j.w.Close(), j.r.Close()) }
