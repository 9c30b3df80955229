package bash

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// collector is a watcher that keeps what it got.
type collector struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (c *collector) add(p []byte) { c.mu.Lock(); c.b.Write(p); c.mu.Unlock() }
func (c *collector) String() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.b.String()
}

// A watcher sees each command as a prompt line and its raw output (colours
// kept), whether or not the call streams, and never a completion marker
// (its nonce would let the watcher's output fake one). After stop it gets
// nothing more; a watcher that joins later first gets the recent output.
func TestWatchFollowsTheTerminal(t *testing.T) {
	for _, shell := range shells {
		t.Run(shellName(shell), func(t *testing.T) {
			e := newExec(t, testOptions(t, shell))
			var w collector
			stop := e.Watch(w.add)
			out, _, _ := do(t, e, cmd(`printf 'plain\n\033[31mred\033[0m\n'`))
			require.Contains(t, out, "red")
			got := w.String()
			assert.Contains(t, got, "$ printf 'plain\\n\\033[31mred\\033[0m\\n'\r\n")
			assert.Contains(t, got, "plain\r\n\x1b[31mred\x1b[0m\r\n")
			assert.NotContains(t, got, "sbx:", "a marker reached the watcher")
			assert.NotContains(t, got, string(e.sess.codec.end), "a marker reached the watcher")
			assert.Less(t, strings.Index(got, "$ printf"), strings.Index(got, "plain\r\n"))

			do(t, e, cmd("echo two\necho lines"))
			assert.Contains(t, w.String(), "$ echo two\r\necho lines\r\ntwo\r\nlines\r\n")

			stop()
			before := w.String()
			do(t, e, cmd("echo after-stop"))
			assert.Equal(t, before, w.String(), "a stopped watcher got output")

			var late collector
			defer e.Watch(late.add)()
			assert.Contains(t, late.String(), "after-stop\r\n", "a new watcher did not get the recent output")
		})
	}
}

// The recent output a new watcher gets is bounded and starts at a line.
func TestWatchRecentIsBounded(t *testing.T) {
	var w watchers
	line := []byte(strings.Repeat("x", 99) + "\n")
	for range 2 * watchRecent / len(line) {
		w.emit(line)
	}
	w.emit([]byte("last\n"))
	var c collector
	w.add(c.add)
	got := c.String()
	assert.LessOrEqual(t, len(got), watchRecent)
	assert.True(t, strings.HasPrefix(got, "xxx"), "not from a line start: %.20q", got)
	assert.Zero(t, (len(got)-len("last\n"))%len(line), "not from a line start")
	assert.True(t, strings.HasSuffix(got, "last\n"))
}
