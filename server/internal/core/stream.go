package core

import (
	"encoding/json"
	"sync"
	"unicode/utf8"
)

// Chunk is one numbered piece of a session's streamed output.
type Chunk struct {
	Seq    uint64
	CallID json.RawMessage // the id of the request that started the call
	Data   string
}

// Subscriber receives a session's live output and its end. The methods run
// with the session's stream lock held, in seq order, and must not block: a
// subscriber that cannot keep up withholds output from its client and says
// so (the WebSocket connection's stream.gap, read back with ReadOutput),
// never holding back the session.
type Subscriber interface {
	Output(sessionID string, c Chunk)
	Closed(sessionID, reason string)
}

// maxChunkBytes splits big bursts so one chunk never dominates the ring or
// a client's queue.
const maxChunkBytes = 32 << 10

// stream numbers a session's output chunks, keeps the newest in a bounded
// ring for clients that reconnect, and fans them out to subscribers.
type stream struct {
	sessionID string
	maxBytes  int
	maxChunks int

	mu     sync.Mutex
	next   uint64  // seq of the next chunk; seqs start at 1
	ring   []Chunk // oldest first; ring[start:] is live
	start  int
	bytes  int
	subs   map[Subscriber]struct{}
	closed string // reason, once the session ended
	ended  bool
}

func newStream(sessionID string, maxBytes, maxChunks int) *stream {
	return &stream{sessionID: sessionID, maxBytes: maxBytes, maxChunks: maxChunks, next: 1, subs: map[Subscriber]struct{}{}}
}

// publish numbers data (split into chunks of at most maxChunkBytes, on
// character boundaries) and hands it to the ring and the subscribers.
func (s *stream) publish(callID json.RawMessage, data []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(data) > 0 {
		n := len(data)
		if n > maxChunkBytes {
			n = maxChunkBytes
			for n > maxChunkBytes-utf8.UTFMax && !utf8.RuneStart(data[n]) {
				n--
			}
		}
		c := Chunk{Seq: s.next, CallID: callID, Data: string(data[:n])}
		data = data[n:]
		s.next++
		s.ring = append(s.ring, c)
		s.bytes += len(c.Data)
		s.evict()
		for sub := range s.subs {
			sub.Output(s.sessionID, c)
		}
	}
}

func (s *stream) evict() {
	for s.start < len(s.ring) && (s.bytes > s.maxBytes || len(s.ring)-s.start > s.maxChunks) {
		s.bytes -= len(s.ring[s.start].Data)
		s.ring[s.start] = Chunk{}
		s.start++
	}
	// Compact once the dead prefix is half the slice: amortised O(1).
	if s.start > 0 && s.start >= len(s.ring)/2 {
		s.ring = append(s.ring[:0], s.ring[s.start:]...)
		s.start = 0
	}
}

// ReplayInfo is what subscribe found in the ring.
type ReplayInfo struct {
	Replayed int
	NextSeq  uint64
	Missed   bool // chunks after lastSeq were already dropped
}

// subscribe adds sub. Under the stream lock it first calls before (which
// queues the attach response), then replays the chunks after lastSeq, so the
// client sees response, replay and live chunks in order with no gap and no
// duplicate. A subscriber to an ended session gets Closed at once.
func (s *stream) subscribe(sub Subscriber, lastSeq uint64, before func(ReplayInfo)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.ring[s.start:]
	first := s.next - uint64(len(live)) // seq of the oldest kept chunk
	info := ReplayInfo{NextSeq: s.next, Missed: lastSeq+1 < first && lastSeq+1 < s.next}
	var replay []Chunk
	for i := range live {
		if live[i].Seq > lastSeq {
			replay = live[i:]
			break
		}
	}
	info.Replayed = len(replay)
	before(info)
	for _, c := range replay {
		sub.Output(s.sessionID, c)
	}
	if s.ended {
		sub.Closed(s.sessionID, s.closed)
		return
	}
	s.subs[sub] = struct{}{}
}

func (s *stream) unsubscribe(sub Subscriber) {
	s.mu.Lock()
	delete(s.subs, sub)
	s.mu.Unlock()
}

// end tells every subscriber the session ended and drops them.
func (s *stream) end(reason string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended, s.closed = true, reason
	for sub := range s.subs {
		sub.Closed(s.sessionID, reason)
	}
	clear(s.subs)
}

// utf8Carry holds back the bytes of a character split across two chunks of
// one call, so clients never see a replacement character that the tool did
// not write.
type utf8Carry struct {
	mu   sync.Mutex
	tail []byte
}

// take returns the complete characters of tail+b and keeps the rest.
func (u *utf8Carry) take(b []byte) []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.tail) > 0 {
		b = append(u.tail, b...)
		u.tail = nil
	}
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				u.tail = append([]byte(nil), b[i:]...)
				return b[:i]
			}
			break
		}
	}
	return b
}

// flush returns what is held back (the call ended mid-character).
func (u *utf8Carry) flush() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	t := u.tail
	u.tail = nil
	return t
}

// ReadResult is what read found of a range of seqs in the ring.
type ReadResult struct {
	// Chunks are the chunks of the range the ring still holds, oldest
	// first, cut at the byte bound (at least one, if any is held).
	Chunks []Chunk
	// LostTo is the last seq of the range's start that the ring no longer
	// holds (from..LostTo were evicted); 0 when none was.
	LostTo uint64
	// NextSeq is the seq the next new chunk will get.
	NextSeq uint64
}

// read returns the chunks from..to (inclusive, to clamped to the newest)
// the ring still holds, at most maxBytes of data (but at least one chunk).
func (s *stream) read(from, to uint64, maxBytes int) ReadResult {
	s.mu.Lock()
	defer s.mu.Unlock()
	live := s.ring[s.start:]
	first := s.next - uint64(len(live))
	r := ReadResult{NextSeq: s.next}
	to = min(to, s.next-1)
	if from > to {
		return r
	}
	if from < first {
		r.LostTo = min(to, first-1)
		from = first
	}
	size := 0
	for seq := from; seq <= to; seq++ {
		c := live[seq-first]
		if len(r.Chunks) > 0 && size+len(c.Data) > maxBytes {
			break
		}
		size += len(c.Data)
		r.Chunks = append(r.Chunks, c)
	}
	return r
}
