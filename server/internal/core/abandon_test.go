package core_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// A create whose client stopped waiting before the answer does not hold a
// slot until the idle timeout: with an idempotency key its session waits
// AbandonedCreateGrace for a retry to take it, then is closed; one a retry
// took stays.
func TestAbandonedCreateIsClosed(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	newCore := func(t *testing.T) (*core.Core, *servertest.FakeBackend, core.Principal) {
		m := servertest.NewFakeBackend()
		m.CreateDelay = time.Second
		token := auth.NewToken()
		c, err := core.New(core.Options{Backend: m, OperatorToken: token, AbandonedCreateGrace: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Shutdown(context.Background(), false) })
		p, err := c.Authenticate(token)
		if err != nil {
			t.Fatal(err)
		}
		return c, m, p
	}
	// abandon starts a create and stops waiting for it half-way.
	abandon := func(t *testing.T, c *core.Core, p core.Principal, key string) {
		wait, leave := context.WithCancel(context.Background())
		time.AfterFunc(500*time.Millisecond, leave)
		_, err := c.Create(wait, p, core.APIWebSocket, core.CreateRequest{IdempotencyKey: key})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the abandoned create returned %v", err)
		}
	}

	t.Run("with a key, closed after the grace", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, m, p := newCore(t)
			abandon(t, c, p, key)
			time.Sleep(time.Second) // the create ends
			synctest.Wait()
			if m.Live() != 1 {
				t.Fatalf("%d sessions live after the create ended, want 1 (waiting for a retry)", m.Live())
			}
			time.Sleep(time.Minute)
			synctest.Wait()
			if m.Live() != 0 {
				t.Fatalf("%d sessions live after the grace, want 0", m.Live())
			}
			// A retry after that learns the session ended.
			if _, err := c.Create(context.Background(), p, core.APIWebSocket, core.CreateRequest{IdempotencyKey: key}); err == nil {
				t.Fatal("a retry after the close got a session")
			}
		})
	})
	t.Run("with a key, taken by a retry", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, m, p := newCore(t)
			abandon(t, c, p, key)
			time.Sleep(30 * time.Second)
			r, err := c.Create(context.Background(), p, core.APIWebSocket, core.CreateRequest{IdempotencyKey: key})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Minute)
			synctest.Wait()
			if m.Live() != 1 || r.Session.Info().State == "closed" {
				t.Fatalf("the session a retry took was closed (%d live)", m.Live())
			}
		})
	})
	t.Run("with a key, joined by a retry while running", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, m, p := newCore(t)
			wait, leave := context.WithCancel(context.Background())
			first := make(chan error, 1)
			go func() {
				_, err := c.Create(wait, p, core.APIWebSocket, core.CreateRequest{IdempotencyKey: key})
				first <- err
			}()
			time.Sleep(200 * time.Millisecond)
			leave()
			if err := <-first; !errors.Is(err, context.Canceled) {
				t.Fatalf("the abandoned create returned %v", err)
			}
			if _, err := c.Create(context.Background(), p, core.APIWebSocket, core.CreateRequest{IdempotencyKey: key}); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Minute)
			synctest.Wait()
			if m.Live() != 1 {
				t.Fatalf("%d sessions live, want the one the retry took", m.Live())
			}
		})
	})
	t.Run("without a key, never made", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			c, m, p := newCore(t)
			abandon(t, c, p, "")
			time.Sleep(time.Second)
			synctest.Wait()
			if m.Live() != 0 || m.Created() != 0 {
				t.Fatalf("%d live, %d created: the create should have been cancelled", m.Live(), m.Created())
			}
		})
	})
}
