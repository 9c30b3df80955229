package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/sandboxd/sandboxd/client"
)

// stdinPath is where `run -i` puts its standard input in the sandbox. The
// command's shell opens it and removes it before CMD starts, so CMD reads
// it from its standard input and never sees the file.
const stdinPath = "/workspace/.sandboxd-run-stdin"

// spoolStdin reads in to its end into a temporary file (removed at once:
// the open file is all that is needed), so that its size is known for the
// upload's tar header. Ctrl-C while it reads ends the wait.
func spoolStdin(ctx context.Context, in io.Reader) (*os.File, error) {
	f, err := os.CreateTemp("", "sandboxd-run-stdin-")
	if err != nil {
		return nil, fmt.Errorf("reading standard input: %w", err)
	}
	_ = os.Remove(f.Name()) // best effort: if it stays, it is an empty file in the temp dir
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(f, in)
		copied <- err
	}()
	select {
	case err = <-copied:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		_ = f.Close() // dropped; the read error is the one to report
		return nil, fmt.Errorf("reading standard input: %w", err)
	}
	return f, nil
}

// withInput uploads input (when there is one) and returns command with its
// standard input redirected: from the uploaded file, or from /dev/null.
func withInput(ctx context.Context, s *client.Session, command string, input *os.File) (string, error) {
	if input == nil {
		return command + " </dev/null", nil
	}
	fi, err := input.Stat()
	if err != nil {
		return "", fmt.Errorf("reading standard input: %w", err)
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: stdinPath[len("/workspace/"):], Typeflag: tar.TypeReg,
			Mode: 0o600, Size: fi.Size(), ModTime: time.Now()})
		if err == nil {
			_, err = io.Copy(tw, input)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	err = s.Upload(ctx, "/workspace", pr)
	pr.CloseWithError(io.ErrClosedPipe) // ends the writer if Upload stopped early
	if err != nil {
		return "", fmt.Errorf("uploading standard input (%d bytes): %w", fi.Size(), err)
	}
	return "{ rm -f " + stdinPath + "; " + command + "; } <" + stdinPath, nil
}
