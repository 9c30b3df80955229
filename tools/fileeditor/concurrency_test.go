package fileeditor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Edits of one file are serialised: no edit is lost to a read-modify-write
// race, whichever name (symlink or not) each call uses.
func TestConcurrentEditsOfOneFile(t *testing.T) {
	e := newExec(t)
	p := writeTemp(t, "f.txt", nil)
	link := filepath.Join(filepath.Dir(p), "link.txt")
	require.NoError(t, os.Symlink(p, link))
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			path := p
			if i%2 == 1 {
				path = link
			}
			obs, err := e.Call(context.Background(), Action{Command: "insert", Path: path, InsertLine: ptr(0), NewStr: ptr(fmt.Sprint(i))})
			if assert.NoError(t, err) {
				assert.False(t, obs.IsError, obs.Text())
			}
		})
	}
	wg.Wait()
	lines := strings.Split(strings.TrimSuffix(readString(t, p), "\n"), "\n")
	assert.Len(t, lines, n)
	assert.Empty(t, tempFiles(t, filepath.Dir(p)))
}

// Calls on different files do not wait for each other: with one file's lock
// held, an edit of another file completes.
func TestDifferentFilesRunInParallel(t *testing.T) {
	e := newExec(t)
	a := writeTemp(t, "a.txt", []byte("a\n"))
	b := writeTemp(t, "b.txt", []byte("b\n"))
	unlock, err := e.locks.lock(context.Background(), resolvePath(a))
	require.NoError(t, err)

	done := make(chan struct{})
	go func() {
		defer close(done)
		obs, err := e.Call(context.Background(), Action{Command: "str_replace", Path: b, OldStr: ptr("b"), NewStr: ptr("B")})
		assert.NoError(t, err)
		assert.False(t, obs.IsError)
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("an edit of b.txt waited for a.txt's lock")
	}

	// A call on the locked file waits, and gives up with its context.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err = e.Call(ctx, Action{Command: "view", Path: a})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	unlock()
	ok(t, e, Action{Command: "view", Path: a})
	assert.Empty(t, e.locks.locks, "lock entries are freed")
}

func TestClosedAndCancelled(t *testing.T) {
	e, err := NewExecutor(Options{})
	require.NoError(t, err)
	p := writeTemp(t, "f.txt", []byte("a\n"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = e.Call(ctx, Action{Command: "view", Path: p})
	require.ErrorIs(t, err, context.Canceled)
	require.NoError(t, e.Close())
	require.NoError(t, e.Close())
	_, err = e.Call(context.Background(), Action{Command: "view", Path: p})
	assert.ErrorIs(t, err, ErrClosed)
}
