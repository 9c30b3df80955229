package core_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// A kept session whose token the store holds is adopted; one with no token
// on record (the previous daemon ended between its start and the answer to
// its client) can never be reached, and is removed at start.
func TestStartAdoptsKnownAndRemovesUnreachableSessions(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		m := servertest.NewFakeBackend()
		known, err := m.Create(context.Background(), sandbox.SessionOptions{}, sandbox.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		orphan, err := m.Create(context.Background(), sandbox.SessionOptions{}, sandbox.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens, err := core.NewTokenStore(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		token := auth.NewToken()
		if err := tokens.Save(known.ID(), auth.DigestOf(token)); err != nil {
			t.Fatal(err)
		}
		c, err := core.New(core.Options{Backend: m, OperatorToken: auth.NewToken(), Tokens: tokens})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Shutdown(context.Background(), false)
		synctest.Wait() // the removal runs in the background
		select {
		case <-orphan.Done():
		default:
			t.Fatal("the session with no token on record was not removed")
		}
		select {
		case <-known.Done():
			t.Fatal("the adopted session was closed")
		default:
		}
		p, err := c.Authenticate(token)
		if err != nil || p.SessionID != known.ID() {
			t.Fatalf("the adopted session's token: %+v %v", p, err)
		}
	})
}
