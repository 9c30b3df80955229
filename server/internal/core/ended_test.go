package core_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/server/internal/core"
)

// A closed session is remembered for the idempotency TTL, so a repeated
// close succeeds; after it, the id is as unknown as any other.
func TestEndedForIdempotencyTTL(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const ttl = 10 * time.Minute
		c, s := newCore(t, core.Options{IdemTTL: ttl})
		require.NoError(t, s.Close(context.Background()))
		synctest.Wait() // the core forgets the session in the background
		op := c.Operator()
		_, err := c.Authorize(op, s.ID(), "", false)
		require.Error(t, err, "the closed session is still served")
		assert.True(t, c.Ended(op, s.ID(), "", false), "a repeated close within the TTL")

		time.Sleep(ttl - time.Second)
		assert.True(t, c.Ended(op, s.ID(), "", false), "just before the TTL")
		time.Sleep(2 * time.Second)
		assert.False(t, c.Ended(op, s.ID(), "", false), "after the TTL")
	})
}
