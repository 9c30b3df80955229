package egress

import (
	"io"
	"net"
	"sync"
)

// trackedConn is a sandbox's connection to the proxy: its Close frees its
// place in the session's bound.
type trackedConn struct {
	net.Conn
	ss   *session
	once sync.Once
}

func (c *trackedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		c.ss.mu.Lock()
		delete(c.ss.conns, c)
		c.ss.mu.Unlock()
		<-c.ss.sem
	})
	return err
}

// splice copies both ways between the sandbox's connection (after the
// bytes already read from it, first) and up until both sides end, closing
// each write side as its reader ends.
func splice(c net.Conn, first []byte, up net.Conn) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(c, up)
		closeWrite(c)
	}()
	if len(first) > 0 {
		_, _ = up.Write(first)
	}
	_, _ = io.Copy(up, c)
	closeWrite(up)
	wg.Wait()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}

// prefixConn reads r (the bytes already read, then the connection) before
// the connection itself.
type prefixConn struct {
	*trackedConn
	r io.Reader
}

func (c *prefixConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// connListener hands connections to the session's HTTP server.
type connListener struct {
	addr net.Addr
	ch   chan net.Conn
	once sync.Once
	done chan struct{}
}

func newConnListener(addr net.Addr) *connListener {
	return &connListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) put(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return l.addr }
