package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/wsproto"
)

// maxBacklog bounds the output a session holds while it refills a gap
// (stream.gap): output beyond it is not kept but read back from the
// server's ring later, as the server does with output its queue cannot
// take. The client's memory never grows with a slow reader either.
const maxBacklog = 8 << 20

// refillTimeout bounds one stream.read.
const refillTimeout = 30 * time.Second

// SeqRange is a range of output seqs, both ends included.
type SeqRange struct{ From, To uint64 }

// OutputLost says what of a session's streamed output could not be
// delivered: the client read more slowly than the session printed, and
// the server's replay ring (1 MiB by default) had dropped these chunks
// before the client read them back. It is never silent: Session.OnLost
// is told, and Session.Call returns it (with the observation) when its
// own output was affected.
type OutputLost struct {
	SessionID string
	// Ranges are the seqs lost; Bytes how many bytes of output they held.
	Ranges []SeqRange
	Bytes  int64
	// CallIDs are the calls whose output the gap held (JSON request ids);
	// MoreCalls: there were more than wsproto.MaxGapCalls.
	CallIDs   []json.RawMessage
	MoreCalls bool
	// Reason says why, when reading back failed for another reason than
	// the ring (the connection or the session ended).
	Reason string
}

func (e *OutputLost) Error() string {
	rs := make([]string, len(e.Ranges))
	for i, r := range e.Ranges {
		rs[i] = fmt.Sprintf("%d-%d", r.From, r.To)
	}
	why := "it was read more slowly than it was printed, and the server no longer held it"
	if e.Reason != "" {
		why = e.Reason
	}
	return fmt.Sprintf("%d bytes of the output of session %s were lost (chunks %s): %s", e.Bytes, e.SessionID, strings.Join(rs, ", "), why)
}

// event is an entry of a session's backlog while it refills a gap: a
// chunk, a gap to read back, or a barrier a call's answer waits for.
type event struct {
	out     *wsproto.StreamOutput
	gap     *wsproto.StreamGap
	barrier chan struct{}
}

// gapNotice handles a stream.gap (on the read loop): the gap and what
// follows it are delivered, in order, by the refill goroutine.
func (s *Session) gapNotice(g wsproto.StreamGap) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if g.ToSeq < g.FromSeq || g.ToSeq <= s.lastSeq && !s.refilling {
		return // nothing this session is missing
	}
	s.queueGap(g)
	if !s.refilling {
		s.refilling = true
		go s.refill()
	}
}

// queueGap appends g to the backlog, merged into a gap just before it;
// with mu held.
func (s *Session) queueGap(g wsproto.StreamGap) {
	if n := len(s.backlog); n > 0 {
		if last := s.backlog[n-1].gap; last != nil && last.ToSeq+1 == g.FromSeq {
			last.ToSeq, last.Bytes = g.ToSeq, last.Bytes+g.Bytes
			last.MoreCalls = last.MoreCalls || g.MoreCalls
			for _, id := range g.CallIDs {
				addCall(last, id)
			}
			return
		}
	}
	s.backlog = append(s.backlog, event{gap: &g})
}

func addCall(g *wsproto.StreamGap, id json.RawMessage) {
	if containsID(g.CallIDs, id) {
		return
	}
	if len(g.CallIDs) < wsproto.MaxGapCalls {
		g.CallIDs = append(g.CallIDs, id)
	} else {
		g.MoreCalls = true
	}
}

// backlogOutput keeps o for the refill goroutine, or past maxBacklog
// turns it into a gap to read back; with mu held, while refilling.
func (s *Session) backlogOutput(o wsproto.StreamOutput) {
	if s.backlogBytes+len(o.Data) <= maxBacklog {
		s.backlog = append(s.backlog, event{out: &o})
		s.backlogBytes += len(o.Data)
		return
	}
	s.queueGap(wsproto.StreamGap{SessionID: o.SessionID, FromSeq: o.Seq, ToSeq: o.Seq, Bytes: int64(len(o.Data)), CallIDs: []json.RawMessage{o.CallID}})
}

// barrier returns a channel closed once everything the session received
// so far is delivered, or nil when it is (on the read loop: a call's
// answer waits for its output).
func (s *Session) barrier() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.refilling {
		return nil
	}
	b := make(chan struct{})
	s.backlog = append(s.backlog, event{barrier: b})
	return b
}

// refill delivers the backlog in order, reading gaps back from the server.
func (s *Session) refill() {
	for {
		s.mu.Lock()
		if len(s.backlog) == 0 {
			s.refilling, s.backlog, s.backlogBytes = false, nil, 0
			s.mu.Unlock()
			return
		}
		ev := s.backlog[0]
		s.backlog[0] = event{}
		s.backlog = s.backlog[1:]
		if ev.out != nil {
			s.backlogBytes -= len(ev.out.Data)
		}
		s.mu.Unlock()
		switch {
		case ev.out != nil:
			s.deliver(*ev.out)
		case ev.barrier != nil:
			close(ev.barrier)
		case ev.gap != nil:
			s.fill(ev.gap)
		}
	}
}

// fill reads gap g back with stream.read and delivers it; what the
// server no longer holds is reported lost.
func (s *Session) fill(g *wsproto.StreamGap) {
	lost := &OutputLost{SessionID: s.ID, CallIDs: g.CallIDs, MoreCalls: g.MoreCalls}
	var got int64
	from := max(g.FromSeq, s.LastSeq()+1)
	for from <= g.ToSeq {
		var r wsproto.StreamReadResult
		ctx, cancel := context.WithTimeout(context.Background(), refillTimeout)
		err := s.c.call(ctx, wsproto.MethodStreamRead, wsproto.StreamReadParams{SessionRef: s.ref(), FromSeq: from, ToSeq: g.ToSeq}, &r)
		cancel()
		if err != nil {
			lost.Reason = "reading it back from the server failed: " + err.Error()
			lost.Ranges = append(lost.Ranges, SeqRange{from, g.ToSeq})
			break
		}
		if r.LostToSeq >= from {
			to := min(r.LostToSeq, g.ToSeq)
			lost.Ranges = append(lost.Ranges, SeqRange{from, to})
			from = to + 1
		}
		for _, ch := range r.Chunks {
			if ch.Seq < from || ch.Seq > g.ToSeq {
				continue // not asked for: a misbehaving server
			}
			got += int64(len(ch.Data))
			s.deliver(ch)
			from = ch.Seq + 1
		}
		if len(r.Chunks) == 0 && r.LostToSeq < from && from <= g.ToSeq {
			lost.Reason = fmt.Sprintf("the server holds nothing of chunks %d-%d (its next is %d)", from, g.ToSeq, r.NextSeq)
			lost.Ranges = append(lost.Ranges, SeqRange{from, g.ToSeq})
			break
		}
	}
	if len(lost.Ranges) == 0 {
		return
	}
	lost.Bytes = max(0, g.Bytes-got)
	s.mu.Lock()
	s.lastSeq = max(s.lastSeq, g.ToSeq)
	for _, id := range g.CallIDs {
		if _, ours := s.streams[string(id)]; ours { // a Call of this client waits for it
			s.lost[string(id)] = merge(s.lost[string(id)], lost)
		}
	}
	if g.MoreCalls {
		s.lostUnattributed++
		s.lastLost = merge(s.lastLost, lost)
	}
	on := s.OnLost
	s.mu.Unlock()
	s.c.opts.Logger.Warn("session output lost", "session", s.ID, "err", lost)
	if on != nil {
		on(lost)
	}
}

// merge adds what b lost to a (nil: nothing yet): a call's error says all
// its call lost, over several gaps.
func merge(a, b *OutputLost) *OutputLost {
	if a == nil {
		c := *b
		c.Ranges = append([]SeqRange(nil), b.Ranges...)
		return &c
	}
	a.Ranges = append(a.Ranges, b.Ranges...)
	a.Bytes += b.Bytes
	for _, id := range b.CallIDs {
		if !containsID(a.CallIDs, id) {
			a.CallIDs = append(a.CallIDs, id)
		}
	}
	a.MoreCalls = a.MoreCalls || b.MoreCalls
	if a.Reason == "" {
		a.Reason = b.Reason
	}
	return a
}

func containsID(ids []json.RawMessage, id json.RawMessage) bool {
	for _, have := range ids {
		if bytes.Equal(have, id) {
			return true
		}
	}
	return false
}
