package agent

import (
	"fmt"
	"sync"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// The PTYs of a server: at most MaxPTYs in all, each listed by its
// connection, which ends them when it ends.

// reservePTY takes one of the server's PTY slots and id on c (listed as nil
// until the PTY has started).
func (s *Server) reservePTY(c *conn, id uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return fmt.Errorf("%w: no new pty", proto.ErrShuttingDown)
	}
	if s.ptys >= s.opts.MaxPTYs {
		return fmt.Errorf("%w: %d ptys are open in this session (limit %d); close one first", proto.ErrBusy, s.ptys, s.opts.MaxPTYs)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ptys == nil {
		c.ptys = map[uint64]*agentPTY{}
	}
	if _, dup := c.ptys[id]; dup {
		return fmt.Errorf("%w: pty id %d is already in use on this connection", proto.ErrInvalidParams, id)
	}
	c.ptys[id] = nil
	s.ptys++
	return nil
}

// releasePTY gives back the slot and the id of a PTY that ended (or did
// not start).
func (s *Server) releasePTY(c *conn, id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.ptys[id]; ok {
		delete(c.ptys, id)
		s.ptys--
	}
}

// addPTY lists a started PTY under its reserved id.
func (c *conn) addPTY(t *agentPTY) {
	c.mu.Lock()
	c.ptys[t.id] = t
	c.mu.Unlock()
}

func (c *conn) lookupPTY(id uint64) (*agentPTY, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t := c.ptys[id]; t != nil {
		return t, nil
	}
	return nil, fmt.Errorf("%w %d: it ended, or was opened on another connection", proto.ErrUnknownPTY, id)
}

// endPTYs ends every PTY of the connection (it is closing) and waits.
func (c *conn) endPTYs() {
	c.mu.Lock()
	ts := make([]*agentPTY, 0, len(c.ptys))
	for _, t := range c.ptys {
		if t != nil { // nil: still starting; its open request ends before this runs
			ts = append(ts, t)
		}
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, t := range ts {
		wg.Go(t.end)
	}
	wg.Wait()
}

// endAllPTYs ends the PTYs of every connection (the server is stopping).
func (s *Server) endAllPTYs() {
	s.mu.Lock()
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Go(c.endPTYs)
	}
	wg.Wait()
}
