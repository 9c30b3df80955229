//go:build linux

package pty

import (
	"bytes"
	"testing"
)

// A size set on the master is the slave's (what `stty size` shows a
// program), and bytes written on one side come out of the other.
func TestOpenSizeAndData(t *testing.T) {
	master, slave, err := Open()
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer master.Close()
	defer slave.Close()
	if err := SetSize(master, 33, 101); err != nil {
		t.Fatal(err)
	}
	rows, cols, err := Size(slave)
	if err != nil || rows != 33 || cols != 101 {
		t.Fatalf("slave size %dx%d (%v), want 33x101", rows, cols, err)
	}
	if _, err := slave.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := master.Read(buf)
	if err != nil || !bytes.Equal(buf[:n], []byte("hello\r\n")) { // the line discipline's ONLCR
		t.Fatalf("master read %q, %v", buf[:n], err)
	}
}
