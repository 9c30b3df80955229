package fileeditor

import "sync"

// snapshot is a file as it was before an edit: its exact bytes, or the fact
// that it did not exist (the edit was a create).
type snapshot struct {
	seq     uint64
	existed bool
	data    []byte
}

// history keeps, per file, the snapshots of the last maxPerFile edits, and
// at most maxBytes of snapshot data in all (the oldest snapshot of any file
// goes first). It lives in memory: one executor per session, lost on
// restart, like upstream's.
type history struct {
	mu         sync.Mutex
	files      map[string][]snapshot
	seq        uint64
	bytes      int64
	maxPerFile int
	maxBytes   int64
}

func newHistory(maxPerFile int, maxBytes int64) *history {
	return &history{files: map[string][]snapshot{}, maxPerFile: maxPerFile, maxBytes: maxBytes}
}

func (h *history) push(key string, existed bool, data []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seq++
	s := append(h.files[key], snapshot{seq: h.seq, existed: existed, data: data})
	h.bytes += int64(len(data))
	for len(s) > h.maxPerFile {
		h.bytes -= int64(len(s[0].data))
		s = s[1:]
	}
	h.files[key] = s
	for h.bytes > h.maxBytes {
		if !h.evictOldest(h.seq) {
			break
		}
	}
}

// evictOldest drops the oldest snapshot other than the one numbered keep.
func (h *history) evictOldest(keep uint64) bool {
	var oldestKey string
	var oldest uint64
	for k, s := range h.files {
		if s[0].seq != keep && (oldest == 0 || s[0].seq < oldest) {
			oldestKey, oldest = k, s[0].seq
		}
	}
	if oldest == 0 {
		return false
	}
	s := h.files[oldestKey]
	h.bytes -= int64(len(s[0].data))
	if len(s) == 1 {
		delete(h.files, oldestKey)
	} else {
		h.files[oldestKey] = s[1:]
	}
	return true
}

func (h *history) pop(key string) (snapshot, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.files[key]
	if len(s) == 0 {
		return snapshot{}, false
	}
	last := s[len(s)-1]
	h.bytes -= int64(len(last.data))
	if len(s) == 1 {
		delete(h.files, key)
	} else {
		h.files[key] = s[:len(s)-1]
	}
	return last, true
}

// unpop puts back a snapshot whose undo could not be written.
func (h *history) unpop(key string, snap snapshot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.files[key] = append(h.files[key], snap)
	h.bytes += int64(len(snap.data))
}

func (h *history) clear() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.files = map[string][]snapshot{}
	h.bytes = 0
}
