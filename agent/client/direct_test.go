package agentclient

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// pipeListener hands out the far ends of net.Pipe connections a test makes
// with dial: AcceptDirect over it runs inside a synctest bubble.
type pipeListener struct {
	conns     chan net.Conn
	closed    chan struct{}
	closeOnce sync.Once
}

func newPipeListener() *pipeListener {
	return &pipeListener{conns: make(chan net.Conn), closed: make(chan struct{})}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.closed:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.closeOnce.Do(func() { close(l.closed) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return &net.UnixAddr{Name: "pipe", Net: "unix"} }

// dial connects to the listener and returns the client's end.
func (l *pipeListener) dial(t *testing.T) net.Conn {
	c, s := net.Pipe()
	select {
	case l.conns <- s:
	case <-l.closed:
		t.Fatal("dial: listener closed")
	}
	return c
}

func helloFrame(t *testing.T, token string) []byte {
	raw, err := json.Marshal(proto.HelloParams{Token: token})
	require.NoError(t, err)
	b, err := proto.EncodeFrame(&proto.Frame{Method: proto.MethodDirectHello, Params: raw})
	require.NoError(t, err)
	return b
}

// writeAsync writes b on c without waiting for a reader (net.Pipe is
// synchronous) and reports the outcome on the returned channel.
func writeAsync(c net.Conn, b []byte) <-chan error {
	ch := make(chan error, 1)
	go func() { _, err := c.Write(b); ch <- err }()
	return ch
}

// dropped reports whether the daemon hung up on c: a read ends with EOF.
func dropped(c net.Conn) bool {
	_, err := c.Read(make([]byte, 1))
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrClosedPipe)
}

func TestAcceptDirectDropsConnectionsWithoutTheToken(t *testing.T) {
	token, err := NewDirectToken()
	require.NoError(t, err)
	wrong, err := NewDirectToken()
	require.NoError(t, err)
	reqRaw, _ := json.Marshal(proto.HelloParams{Token: token})
	asRequest, err := proto.EncodeFrame(&proto.Frame{ID: 1, Method: proto.MethodDirectHello, Params: reqRaw})
	require.NoError(t, err)
	asBinary, err := proto.EncodeFrame(&proto.Frame{Method: proto.MethodDirectHello, Params: reqRaw, Data: []byte("x")})
	require.NoError(t, err)
	huge := binary.BigEndian.AppendUint32(nil, maxHelloSize+1)
	for name, first := range map[string][]byte{
		"wrong token":            helloFrame(t, wrong),
		"not a hello":            func() []byte { b, _ := proto.EncodeFrame(&proto.Frame{Method: proto.MethodPing}); return b }(),
		"a request, not a hello": asRequest,
		"binary frame":           asBinary,
		"too large":              huge,
		"not JSON":               append(binary.BigEndian.AppendUint32(nil, 3), "{{{"...),
		"token prefix":           helloFrame(t, token[:len(token)-2]),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ln := newPipeListener()
				ctx, cancel := context.WithCancel(t.Context())
				defer cancel()
				got := make(chan net.Conn, 1)
				go func() { nc, _ := AcceptDirect(ctx, ln, token); got <- nc }()
				bad := ln.dial(t)
				w := writeAsync(bad, first)
				assert.True(t, dropped(bad), "the connection is dropped")
				if werr := <-w; werr != nil {
					t.Logf("the write failed (the daemon hung up without reading it all): %v", werr)
				}
				synctest.Wait()
				select {
				case nc := <-got:
					t.Fatalf("AcceptDirect returned %v on a bad first frame", nc)
				default:
				}
				good := ln.dial(t)
				hw := writeAsync(good, helloFrame(t, token))
				nc := <-got
				require.NotNil(t, nc, "the connection with the token is accepted after the bad one")
				require.NoError(t, <-hw)
				_ = nc.Close()
				_ = good.Close()
				_ = bad.Close()
			})
		})
	}
}

func TestAcceptDirectSilentAndExcessConnections(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		token, err := NewDirectToken()
		require.NoError(t, err)
		ln := newPipeListener()
		got := make(chan net.Conn, 1)
		go func() { nc, _ := AcceptDirect(t.Context(), ln, token); got <- nc }()
		// directCandidates silent connections fill every slot; one more is
		// dropped at once, before any hello timeout.
		var silent []net.Conn
		for range directCandidates {
			silent = append(silent, ln.dial(t))
		}
		extra := ln.dial(t)
		start := time.Now()
		assert.True(t, dropped(extra), "a connection beyond the candidates is dropped")
		assert.Zero(t, time.Since(start), "at once (synctest time)")
		for _, c := range silent {
			assert.True(t, dropped(c), "a silent connection is dropped")
		}
		assert.Equal(t, DirectHelloTimeout, time.Since(start), "after the hello timeout (synctest time)")
		good := ln.dial(t)
		hw := writeAsync(good, helloFrame(t, token))
		nc := <-got
		require.NotNil(t, nc)
		require.NoError(t, <-hw)
		_ = nc.Close()
		_ = good.Close()
		for _, c := range append(silent, extra) {
			_ = c.Close()
		}
	})
}

func TestAcceptDirectLeavesTheNextFrame(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		token, err := NewDirectToken()
		require.NoError(t, err)
		ln := newPipeListener()
		got := make(chan net.Conn, 1)
		go func() { nc, _ := AcceptDirect(t.Context(), ln, token); got <- nc }()
		c := ln.dial(t)
		next, err := proto.EncodeFrame(&proto.Frame{ID: 7, Result: json.RawMessage(`{}`)})
		require.NoError(t, err)
		w := writeAsync(c, append(helloFrame(t, token), next...))
		nc := <-got
		require.NotNil(t, nc)
		var hdr [proto.HeaderSize]byte
		body, _, err := proto.ReadFrame(nc, &hdr)
		require.NoError(t, err)
		require.NoError(t, <-w)
		assert.JSONEq(t, `{"id":7,"result":{}}`, string(body), "the frame after the hello is intact")
		_ = nc.Close()
		_ = c.Close()
	})
}

func TestAcceptDirectEndsWithItsContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		token, err := NewDirectToken()
		require.NoError(t, err)
		ln := newPipeListener()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		nc, err := AcceptDirect(ctx, ln, token)
		assert.Nil(t, nc)
		require.ErrorIs(t, err, proto.ErrDirect)
		select {
		case <-ln.closed:
		default:
			t.Fatal("the listener is closed when AcceptDirect returns")
		}
		_, err = AcceptDirect(t.Context(), newPipeListener(), "short")
		require.ErrorIs(t, err, proto.ErrDirect, "an invalid token is refused")
	})
}
