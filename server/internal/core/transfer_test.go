package core_test

import (
	"bytes"
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// newCore returns a core over a fake backend with one session holding a
// file of 160 kB at /workspace/a, shut down when the test ends (inside the
// test's bubble, so its goroutines end with it).
func newCore(t *testing.T, opts core.Options) (*core.Core, *core.Session) {
	t.Helper()
	m := servertest.NewFakeBackend()
	opts.Backend, opts.OperatorToken = m, auth.NewToken()
	c, err := core.New(opts)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Shutdown(context.Background(), false) })
	r, err := c.Create(context.Background(), c.Operator(), core.APIWebSocket, core.CreateRequest{})
	require.NoError(t, err)
	payload := bytes.Repeat([]byte("0123456789abcdef"), 10000)
	require.NoError(t, m.Sandbox(r.Session.ID()).Upload(context.Background(), "/workspace/a", bytes.NewReader(payload)))
	return c, r.Session
}

// A transfer that sees no message for the idle time is aborted; one that
// does is kept.
func TestTransferIdlesOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const idle = time.Minute
		_, s := newCore(t, core.Options{TransferIdle: idle})
		ctx := context.Background()
		first, err := s.DownloadChunk(ctx, core.DownloadRequest{Path: "/workspace/a", Size: 16 << 10})
		require.NoError(t, err)
		require.False(t, first.EOF)

		time.Sleep(idle - time.Second)
		next, err := s.DownloadChunk(ctx, core.DownloadRequest{DownloadID: first.DownloadID, Offset: 16 << 10, Size: 16 << 10})
		require.NoError(t, err, "a message within the idle time keeps the transfer")
		assert.Equal(t, int64(16<<10), next.Offset)

		time.Sleep(idle + time.Second)
		_, err = s.DownloadChunk(ctx, core.DownloadRequest{DownloadID: first.DownloadID, Offset: 32 << 10, Size: 16 << 10})
		assert.Equal(t, apierr.NotFound, apierr.KindOf(err), "%v", err)
	})
}

// A download its client abandoned does not hold a drain for the whole
// idle time: draining shortens it to DrainTransferIdle.
func TestDrainShortensTransferIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c, s := newCore(t, core.Options{TransferIdle: time.Hour, DrainTransferIdle: 2 * time.Second})
		d, err := s.DownloadChunk(context.Background(), core.DownloadRequest{Path: "/workspace/a", Size: 16 << 10})
		require.NoError(t, err)
		require.False(t, d.EOF)
		// The client never asks for the rest.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		require.NoError(t, c.Drain(ctx), "the abandoned download held the drain")
		_, err = s.DownloadChunk(context.Background(), core.DownloadRequest{DownloadID: d.DownloadID, Offset: 16 << 10})
		assert.Equal(t, apierr.NotFound, apierr.KindOf(err), "the abandoned download is gone: %v", err)
	})
}
