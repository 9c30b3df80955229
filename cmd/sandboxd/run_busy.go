package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/wsproto"
)

// Waits of run's create.
const (
	// createWait bounds one create on the client's side: above the
	// server's own bound (3 min), so its answer (a busy error) comes first.
	createWait = 4 * time.Minute
	// defaultBusyWait is how long run keeps retrying a create the server
	// answers busy (--busy-wait).
	defaultBusyWait = 10 * time.Minute
	// maxBusyBackoff bounds the wait between retries of a busy error that
	// names no retry_after (the server at --max-sessions).
	maxBusyBackoff = 30 * time.Second
)

// createRetrying runs create until it returns a session or an error other
// than busy (wsproto.CodeBusy), for at most busyWait in all (0: no retry).
// Between tries it waits the retry_after the server gave (a start the
// server kept for the retry is what the retry gets: decision 0041), else
// a backoff from 1 s doubling to maxBusyBackoff; each retry is said on
// progress. interrupt (Ctrl-C) ends the wait with its error.
func createRetrying(interrupt context.Context, busyWait time.Duration, progress io.Writer,
	create func() (*client.Session, error)) (*client.Session, error) {
	began := time.Now()
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		s, err := create()
		if err == nil {
			if attempt > 1 {
				say(progress, "sandboxd run: started on attempt %d, %v after the first\n", attempt, time.Since(began).Round(time.Second))
			}
			return s, nil
		}
		var rpcErr *client.Error
		if !errors.As(err, &rpcErr) || rpcErr.Code != wsproto.CodeBusy {
			return nil, err
		}
		wait, ok := rpcErr.RetryAfter()
		if !ok {
			wait, backoff = backoff, min(2*backoff, maxBusyBackoff)
		}
		if time.Since(began)+wait > busyWait {
			if busyWait == 0 {
				return nil, err
			}
			return nil, fmt.Errorf("%w (still busy after retrying for %v: --busy-wait)", err, time.Since(began).Round(time.Second))
		}
		say(progress, "sandboxd run: %s; retrying in %v (attempt %d)\n", rpcErr.Message, wait, attempt+1)
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-interrupt.Done():
			t.Stop()
			return nil, interrupt.Err()
		}
	}
}
