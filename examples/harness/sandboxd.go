package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

// editablePaths are the task image's folders a session may change when no
// profile is named: the repository and its environment (docs/harness.md,
// "Two ways to run it"). A profile says its own.
var editablePaths = []string{"/testbed", "/opt/venv"}

// sandboxdBackend opens a sandboxd session per instance over the WebSocket
// API: a session from -profile, or the instance's image with editable
// paths when no profile is named. The image is the instance's in both.
type sandboxdBackend struct {
	c       *client.Client // shared by every instance: safe for concurrent use
	profile string
}

func (b *sandboxdBackend) open(ctx context.Context, in *instance) (box, error) {
	opts := client.CreateOptions{Profile: b.profile, Image: in.Image}
	if b.profile == "" {
		opts.EditablePaths = editablePaths
	}
	failedStarts := 0
	for attempt := 0; ; attempt++ {
		s, err := b.c.CreateSession(ctx, opts)
		if err == nil {
			return &sandboxdBox{s: s}, nil
		}
		var e *client.Error
		if !errors.As(err, &e) {
			return nil, err
		}
		switch {
		case e.Code == wsproto.CodeBusy:
			// The server is at a limit (sessions, starts): wait and retry,
			// as long as ctx lets us.
			select {
			case <-time.After(retryAfter(e, attempt)):
				continue
			case <-ctx.Done():
				return nil, fmt.Errorf("%w (still busy after %d retries)", err, attempt)
			}
		case startFailed(e) && failedStarts < maxStartAttempts-1:
			// The sandbox did not start in the server's time (a loaded
			// machine): a harness retries such an infrastructure error
			// rather than count the task as failed.
			failedStarts++
			continue
		case startFailed(e):
			return nil, fmt.Errorf("%w (%d attempts)", err, maxStartAttempts)
		case e.Code == wsproto.CodeUnauthenticated:
			return nil, stopError{fmt.Errorf("the token was refused (pass -token or SANDBOXD_TOKEN): %w", err)}
		case e.Code == wsproto.CodePermission:
			return nil, stopError{fmt.Errorf("this token may not create sessions (an operator token is needed): %w", err)}
		case e.Code == wsproto.CodeInvalidParams && b.profile != "" && strings.Contains(e.Message, "profile"):
			return nil, stopError{fmt.Errorf("profile %q (-profile): %w", b.profile, err)}
		}
		return nil, err
	}
}

// maxStartAttempts is how many times an instance's create is tried while
// its sandbox fails to start.
const maxStartAttempts = 3

// startFailed reports a create whose sandbox did not start in time: the
// server's deadline (-32008), or a start that failed on its side (-32603,
// e.g. "sandbox did not start: its agent did not answer").
func startFailed(e *client.Error) bool {
	return e.Code == wsproto.CodeTimeout || e.Code == wsproto.CodeInternal
}

// retryAfter is the server's hint when its busy error carries one
// (data.retry_after: a create that could not start soon enough; its retry
// gets the sandbox the server went on starting), else a backoff of 1, 2,
// 4, 8, then 10 s (the server at --max-sessions).
func retryAfter(e *client.Error, attempt int) time.Duration {
	if d, ok := e.RetryAfter(); ok {
		return min(d, 5*time.Minute)
	}
	return min(time.Second<<min(attempt, 4), 10*time.Second)
}

// sandboxdBox is one session: files go in and out through the file
// transfer API (byte-exact, any size), commands run in the session's
// terminal tool, as an agent's would.
type sandboxdBox struct{ s *client.Session }

func (b *sandboxdBox) put(ctx context.Context, name string, data []byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Now()}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return b.s.Upload(ctx, workDir, &buf)
}

func (b *sandboxdBox) run(ctx context.Context, command string, timeout time.Duration) (int, string, error) {
	obs, err := b.s.Call(ctx, "terminal", map[string]any{"command": command, "timeout": int(timeout.Seconds())}, nil)
	if err != nil {
		return 0, "", err
	}
	if obs.IsError {
		return 0, "", errors.New(lastLine(obs.Text()))
	}
	st, _ := obs.Structured.(map[string]any)
	code, ok := st["exit_code"].(float64)
	switch {
	case !ok:
		return 0, "", fmt.Errorf("the terminal gave no exit code: %s", lastLine(obs.Text()))
	case code == -1:
		return 0, "", fmt.Errorf("still running after %s (-timeout)", timeout)
	}
	return int(code), obs.Text(), nil
}

func (b *sandboxdBox) get(ctx context.Context, name string) ([]byte, error) {
	var buf bytes.Buffer
	// A tar of one file: the file and a header or two of 512-byte blocks.
	if err := b.s.Download(ctx, path.Join(workDir, name), &limitedWriter{w: &buf, n: maxLog + 64<<10}); err != nil {
		return nil, err
	}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err != nil {
			return nil, fmt.Errorf("%s not in the download: %w", name, err)
		}
		if h.Typeflag == tar.TypeReg && path.Base(h.Name) == name {
			b, err := io.ReadAll(io.LimitReader(tr, maxLog+1))
			if err == nil && len(b) > maxLog {
				err = fmt.Errorf("%s is over %d bytes", name, maxLog)
			}
			return b, err
		}
	}
}

func (b *sandboxdBox) close(ctx context.Context) error { return b.s.Close(ctx) }

// limitedWriter fails once more than n bytes were written.
type limitedWriter struct {
	w io.Writer
	n int64
}

func (l *limitedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		return 0, errors.New("the download is over the size limit")
	}
	l.n -= int64(len(p))
	return l.w.Write(p)
}
