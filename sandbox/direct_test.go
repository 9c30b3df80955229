package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/agent/proto"
)

// directRuntime is the fake runtime with a direct path: a real unix socket
// in the test's folder, which the in-process agent dials.
type directRuntime struct {
	*fakeRuntime
	dir     string
	seq     atomic.Int64
	listens atomic.Int64
	err     error  // ListenDirect fails with it when set
	path    string // the path the agent is told, when set (else the socket's)
}

func newDirectRuntime(t *testing.T) *directRuntime {
	return &directRuntime{fakeRuntime: newFakeRuntime(t), dir: t.TempDir()}
}

func (d *directRuntime) ListenDirect(id string) (net.Listener, string, error) {
	d.listens.Add(1)
	if d.err != nil {
		return nil, "", d.err
	}
	p := filepath.Join(d.dir, strconv.FormatInt(d.seq.Add(1), 10)+".sock")
	ln, err := net.Listen("unix", p)
	if err != nil {
		return nil, "", err
	}
	if d.path != "" {
		return ln, d.path, nil
	}
	return ln, p, nil
}

var _ DirectRuntime = (*directRuntime)(nil)

// connRecorder is a DialFunc that keeps the streams it wraps, in order,
// each marked when the host first writes to it.
type connRecorder struct {
	mu    sync.Mutex
	conns []*markedConn
}

type markedConn struct {
	io.ReadWriteCloser
	once  sync.Once
	wrote chan struct{} // closed at the first write
}

func (c *markedConn) Write(b []byte) (int, error) {
	c.once.Do(func() { close(c.wrote) })
	return c.ReadWriteCloser.Write(b)
}

func (r *connRecorder) dial(conn io.ReadWriteCloser, log *slog.Logger) AgentClient {
	mc := &markedConn{ReadWriteCloser: conn, wrote: make(chan struct{})}
	r.mu.Lock()
	r.conns = append(r.conns, mc)
	r.mu.Unlock()
	return DialAgent(mc, log)
}

func (r *connRecorder) last() *markedConn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.conns[len(r.conns)-1]
}

func TestDirectPathCarriesCalls(t *testing.T) {
	rt := newDirectRuntime(t)
	rec := &connRecorder{}
	m := newTestManager(t, rt, ManagerOptions{Dial: rec.dial})
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	require.True(t, s.Direct())
	assert.Equal(t, "hi", echo(t, s, "hi"))
	rec.mu.Lock()
	assert.Len(t, rec.conns, 2, "the attach stream and the direct connection")
	rec.mu.Unlock()
	ents, err := filepath.Glob(filepath.Join(rt.dir, "*"))
	require.NoError(t, err)
	assert.Empty(t, ents, "the listener is unlinked once the agent is connected")
}

func TestDirectPathFallsBackWhenItBreaks(t *testing.T) {
	rt := newDirectRuntime(t)
	rec := &connRecorder{}
	m := newTestManager(t, rt, ManagerOptions{Dial: rec.dial})
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	require.True(t, s.Direct())

	direct := rec.last()
	done := make(chan error, 1)
	go func() {
		_, err := s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x","sleep_ms":60000}`), nil)
		done <- err
	}()
	<-direct.wrote // the call's request: the first frame the host sends on it
	require.NoError(t, direct.Close())
	err = <-done
	require.Error(t, err)
	require.ErrorIs(t, err, proto.ErrDisconnected, "the error of a broken stream")
	require.ErrorIs(t, err, errDirectBroken, "the agent answers on the attach stream: said at once")

	assert.False(t, s.Direct())
	assert.Equal(t, StateReady, s.State())
	assert.Equal(t, "after", echo(t, s, "after"), "calls go over the attach stream")
}

func TestDirectPathBrokenByADeadAgent(t *testing.T) {
	rt := newDirectRuntime(t)
	rec := &connRecorder{}
	m := newTestManager(t, rt, ManagerOptions{Dial: rec.dial})
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	require.True(t, s.Direct())
	direct := rec.last()
	done := make(chan error, 1)
	go func() {
		_, err := s.Call(context.Background(), "echo", json.RawMessage(`{"text":"x","sleep_ms":60000}`), nil)
		done <- err
	}()
	<-direct.wrote
	rt.kill(s.ID())
	err = <-done
	require.Error(t, err)
	require.NotErrorIs(t, err, errDirectBroken, "the stream is gone too: not a fallback")
	<-s.Done()
	assert.Contains(t, err.Error()+s.EndReason(), "exited with code 137")
}

func TestDirectPathSetupFailures(t *testing.T) {
	for name, tweak := range map[string]func(*directRuntime){
		"no direct path":        func(d *directRuntime) { d.err = ErrNoDirect },
		"listen fails":          func(d *directRuntime) { d.err = errors.New("no room") },
		"the agent cannot dial": func(d *directRuntime) { d.path = "/nonexistent/direct.sock" },
	} {
		t.Run(name, func(t *testing.T) {
			rt := newDirectRuntime(t)
			tweak(rt)
			m := newTestManager(t, rt, ManagerOptions{})
			s, err := m.Create(context.Background(), SessionOptions{})
			require.NoError(t, err, "a failed setup does not fail the session")
			assert.False(t, s.Direct())
			assert.Equal(t, "ok", echo(t, s, "ok"))
			assert.EqualValues(t, 1, rt.listens.Load())
		})
	}
}

func TestDirectPathOfferedAgainOnReconnect(t *testing.T) {
	rt := newDirectRuntime(t)
	m := newTestManager(t, rt, ManagerOptions{})
	s, err := m.Create(context.Background(), SessionOptions{})
	require.NoError(t, err)
	first, ok := s.currentClient().(*directClient)
	require.True(t, ok)
	rt.breakStream(s.ID())
	// The reconnect closes the old client once the new one is in place.
	<-first.direct.Done()
	require.NotSame(t, first, s.currentClient(), "reconnected")
	assert.True(t, s.Direct(), "the reconnect offers a new direct path")
	assert.EqualValues(t, 2, rt.listens.Load())
	assert.Equal(t, "again", echo(t, s, "again"))
}
