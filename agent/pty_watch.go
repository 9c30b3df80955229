package agent

import (
	"fmt"
	"io"
	"sync"
)

// watchBuffer holds a watched tool's output for the pump. The tool never
// waits for it: past its bound the oldest bytes are dropped and the
// watcher gets a line saying how many, instead of slowing the tool down.
type watchBuffer struct {
	mu      sync.Mutex
	buf     []byte
	dropped int
	closed  bool
	ready   chan struct{} // capacity 1
}

// watchBound is what a watching PTY holds for a slow watcher.
const watchBound = 1 << 20

func newWatchBuffer() *watchBuffer { return &watchBuffer{ready: make(chan struct{}, 1)} }

func (w *watchBuffer) write(b []byte) {
	w.mu.Lock()
	if !w.closed {
		w.buf = append(w.buf, b...)
		if over := len(w.buf) - watchBound; over > 0 {
			w.dropped += over
			w.buf = append(w.buf[:0], w.buf[over:]...)
		}
	}
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

func (w *watchBuffer) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	select {
	case w.ready <- struct{}{}:
	default:
	}
}

// Read returns buffered output (after a note of what was dropped), waiting
// for some; io.EOF once closed and empty.
func (w *watchBuffer) Read(p []byte) (int, error) {
	for {
		w.mu.Lock()
		if w.dropped > 0 {
			note := fmt.Appendf(nil, "\r\n[sandboxd: %d bytes of the terminal's output were dropped: this view fell behind]\r\n", w.dropped)
			if len(note) <= len(p) {
				w.dropped = 0
				w.mu.Unlock()
				return copy(p, note), nil
			}
		}
		if len(w.buf) > 0 {
			n := copy(p, w.buf)
			w.buf = w.buf[n:]
			if len(w.buf) == 0 {
				w.buf = nil // let a burst's memory go
			}
			w.mu.Unlock()
			return n, nil
		}
		closed := w.closed
		w.mu.Unlock()
		if closed {
			return 0, io.EOF
		}
		<-w.ready
	}
}
