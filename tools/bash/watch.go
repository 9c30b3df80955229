package bash

import (
	"bytes"
	"sync"

	"github.com/sandboxd/sandboxd/tools"
)

var _ tools.Watcher = (*Executor)(nil)

// Watch follows the terminal live (tools.Watcher): fn gets what the shell's
// pty prints, escape sequences included, whoever's call runs and whether it
// streams, with the completion markers taken out; each command the tool
// runs shows first as a line "$ <command>" (the pty's echo is off, so the
// typed text never appears by itself). Input sent to a running program
// (is_input) shows only if the program echoes it. A new watcher first gets
// the last watchRecent bytes, from a line start. The watchers outlive a
// reset: they follow the next shell.
func (e *Executor) Watch(fn tools.StreamFunc) (stop func()) {
	return e.watch.add(fn)
}

// watchRecent is how much of the terminal's latest output a new watcher
// gets first, so it joins with some context.
const watchRecent = 16 << 10

// watchers fans the terminal's output out to its watchers.
type watchers struct {
	mu     sync.Mutex
	next   int
	fns    map[int]tools.StreamFunc
	recent []byte
}

func (w *watchers) add(fn tools.StreamFunc) (stop func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fns == nil {
		w.fns = map[int]tools.StreamFunc{}
	}
	w.next++
	id := w.next
	w.fns[id] = fn
	if len(w.recent) > 0 {
		fn(bytes.Clone(w.recent))
	}
	return func() {
		// Under the lock: an emit in progress ends before stop returns.
		w.mu.Lock()
		delete(w.fns, id)
		w.mu.Unlock()
	}
}

// emit hands b to every watcher and keeps it as recent output.
func (w *watchers) emit(b []byte) {
	if len(b) == 0 {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.recent = append(w.recent, b...)
	if len(w.recent) > watchRecent {
		cut := w.recent[len(w.recent)-watchRecent:]
		if i := bytes.IndexByte(cut, '\n'); i >= 0 && i < len(cut)-1 {
			cut = cut[i+1:] // from a line start
		}
		w.recent = append(w.recent[:0], cut...)
	}
	for _, fn := range w.fns {
		fn(b)
	}
}

// commandEcho is how a command the tool runs shows to watchers: a prompt
// line, as a terminal with echo on would show it typed.
func commandEcho(command string) []byte {
	return []byte("$ " + string(bytes.ReplaceAll([]byte(command), []byte("\n"), []byte("\r\n"))) + "\r\n")
}
