package api

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/daemon"
)

// Two daemons of one scope (labels on one engine) at once: the second does
// not start, and the first's session lives on. Before the scope lock, the
// second adopted the first's live session when it started and shut it down
// with its own shutdown (the container exited 0 under a running call): the
// cause of TestMCPTransferTools' sandbox dying mid-upload when the suite's
// daemons shared one scope (issue 23). Once the first has stopped, a daemon
// of that scope starts.
func TestDaemonsOfOneScopeRefuseEachOther(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	first := newDaemon(t, nil)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			_ = first.Shutdown(context.Background())
		}
	})
	s, err := first.Manager.Create(ctx, sandbox.SessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	call := func() string {
		t.Helper()
		obs, err := s.Call(ctx, "terminal", json.RawMessage(`{"command":"echo alive"}`), nil)
		if err != nil {
			t.Fatalf("the first daemon's session: %v", err)
		}
		return obs.Text()
	}
	call()

	second, err := daemon.New(ctx, daemonConfig(t, nil))
	if err == nil {
		// What two daemons of one scope do: the second adopted the
		// first's session, and its shutdown closes it.
		_ = second.Shutdown(ctx)
		_, callErr := s.Call(ctx, "terminal", json.RawMessage(`{"command":"echo alive"}`), nil)
		t.Fatalf("a second daemon of the same scope started; after its shutdown the first's session is %s: %v", s.State(), callErr)
	}
	if !errors.Is(err, daemon.ErrScopeInUse) || !strings.Contains(err.Error(), "--label KEY=VALUE") {
		t.Fatalf("second daemon: %v", err)
	}
	t.Log(err)
	if out := call(); !strings.Contains(out, "alive") || s.State() != sandbox.StateReady {
		t.Fatalf("after the refused daemon: %s (%s)", out, s.State())
	}

	if err := first.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	third, err := daemon.New(ctx, daemonConfig(t, nil))
	if err != nil {
		t.Fatalf("a daemon of the scope once the first stopped: %v", err)
	}
	if err := third.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}
