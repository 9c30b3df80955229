package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

// busyErr is a busy create as the Go client returns it (data decoded from
// the wire into a map).
func busyErr(retry int) error {
	data := map[string]any{"kind": "busy"}
	if retry > 0 {
		data["retry_after"] = float64(retry)
	}
	return &client.Error{Code: wsproto.CodeBusy, Message: "sandboxd is busy: all 4 start slots stayed taken for 2m0s", Data: data}
}

// run retries a busy create after the retry_after the server gives (a
// backoff without one), says so, and gives up after --busy-wait; any other
// error ends it at once.
func TestCreateRetrying(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var progress bytes.Buffer
		answers := []error{busyErr(5), busyErr(0), busyErr(0), nil}
		tries := 0
		create := func() (*client.Session, error) {
			err := answers[tries]
			tries++
			if err != nil {
				return nil, err
			}
			return &client.Session{}, nil
		}
		began := time.Now()
		s, err := createRetrying(context.Background(), time.Minute, &progress, create)
		if err != nil || s == nil {
			t.Fatalf("createRetrying: %v", err)
		}
		if took := time.Since(began); took != 5*time.Second+time.Second+2*time.Second {
			t.Errorf("took %v: want 5 s (retry_after), then 1 s and 2 s of backoff", took)
		}
		for _, want := range []string{"retrying in 5s (attempt 2)", "retrying in 1s (attempt 3)", "retrying in 2s (attempt 4)", "started on attempt 4, 8s after the first"} {
			if !strings.Contains(progress.String(), want) {
				t.Errorf("progress %q lacks %q", progress.String(), want)
			}
		}

		// Still busy past --busy-wait: the busy error, said so.
		tries, answers = 0, []error{busyErr(20), busyErr(20), busyErr(20)}
		_, err = createRetrying(context.Background(), 30*time.Second, &progress, create)
		var rpcErr *client.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != wsproto.CodeBusy || !strings.Contains(err.Error(), "--busy-wait") || tries != 2 {
			t.Errorf("past --busy-wait: %v after %d tries", err, tries)
		}
		// --busy-wait 0: no retry.
		tries = 0
		if _, err = createRetrying(context.Background(), 0, &progress, create); !errors.As(err, &rpcErr) || tries != 1 {
			t.Errorf("--busy-wait 0: %v after %d tries", err, tries)
		}
		// Another error: at once.
		tries, answers = 0, []error{&client.Error{Code: wsproto.CodeInvalidParams, Message: "bad"}}
		if _, err = createRetrying(context.Background(), time.Minute, &progress, create); !errors.As(err, &rpcErr) || rpcErr.Code != wsproto.CodeInvalidParams || tries != 1 {
			t.Errorf("invalid params: %v after %d tries", err, tries)
		}
		// Ctrl-C while waiting to retry.
		tries, answers = 0, []error{busyErr(30)}
		ctx, cancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, cancel)
		if _, err = createRetrying(ctx, time.Minute, &progress, create); !errors.Is(err, context.Canceled) {
			t.Errorf("interrupted: %v", err)
		}
	})
}
