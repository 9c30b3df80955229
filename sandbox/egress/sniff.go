package egress

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"
)

// maxHello bounds the bytes read for a ClientHello: one TLS record holds at
// most 16 KiB (plus its header); a hello split over records (post-quantum
// key shares) stays far below 64 KiB.
const maxHello = 64 << 10

// errHelloRead stops the handshake once the ClientHello is parsed.
var errHelloRead = errors.New("egress: ClientHello read")

// ReadClientHello reads a TLS ClientHello from r with crypto/tls's own
// parser (a server handshake stopped as soon as the hello is parsed, its
// replies discarded) and returns the server name it asks for ("" when it
// sends none) and every byte it read, which the caller replays upstream.
// It reads at most maxHello bytes; err is set when r does not start with a
// well-formed ClientHello.
func ReadClientHello(r io.Reader) (serverName string, read []byte, err error) {
	var buf bytes.Buffer
	var name string
	got := false
	c := tls.Server(helloConn{r: io.TeeReader(io.LimitReader(r, maxHello), &buf)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, got = h.ServerName, true
			return nil, errHelloRead
		},
	})
	herr := c.Handshake()
	if got {
		return name, buf.Bytes(), nil
	}
	if herr == nil { // cannot happen: there is no certificate to finish with
		herr = errors.New("no ClientHello")
	}
	return "", buf.Bytes(), fmt.Errorf("not a TLS ClientHello: %w", herr)
}

// helloConn is the read side of a connection for ReadClientHello: writes
// (the alert that ends the stopped handshake) go nowhere.
type helloConn struct{ r io.Reader }

func (c helloConn) Read(p []byte) (int, error)     { return c.r.Read(p) }
func (helloConn) Write(p []byte) (int, error)      { return len(p), nil }
func (helloConn) Close() error                     { return nil }
func (helloConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (helloConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (helloConn) SetDeadline(time.Time) error      { return nil }
func (helloConn) SetReadDeadline(time.Time) error  { return nil }
func (helloConn) SetWriteDeadline(time.Time) error { return nil }

// SplitTarget splits a request's target ("host", "host:port", "[v6]:port")
// into the normalized host (NormalizeHost) and the port, defPort when it
// names none. ok is false for anything else, port 0 included.
func SplitTarget(target string, defPort int) (host string, port int, ok bool) {
	h, p := target, ""
	if i := lastColon(target); i >= 0 {
		h, p = target[:i], target[i+1:]
	}
	if p == "" {
		if h != target { // "host:" has an empty port
			return "", 0, false
		}
		port = defPort
	} else {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 || p[0] == '+' || p[0] == '0' {
			return "", 0, false
		}
		port = n
	}
	norm, _, ok := NormalizeHost(h)
	if !ok {
		return "", 0, false
	}
	return norm, port, true
}

// lastColon is the index of the colon before a port in target, -1 when it
// has none: a bare IPv6 address ("::1") has colons but no port, a bracketed
// one ("[::1]:443") has its port after the bracket.
func lastColon(target string) int {
	if len(target) > 0 && target[0] == '[' {
		end := bytes.IndexByte([]byte(target), ']')
		if end < 0 {
			return -1
		}
		if end+1 < len(target) && target[end+1] == ':' {
			return end + 1
		}
		return -1
	}
	first, last := -1, -1
	for i := 0; i < len(target); i++ {
		if target[i] == ':' {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	if first != last { // more than one colon: a bare IPv6 address
		return -1
	}
	return last
}
