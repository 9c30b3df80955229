package agent

import "io"

// nopWriteCloser is a writer the connection must not close (a caller's
// stdout that is not the process's own).
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
