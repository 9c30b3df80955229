package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/tools"
)

// DirectRuntime is implemented by runtimes that can give the daemon a
// direct path to a sandbox's agent (decision 0035): a unix socket of the
// daemon's in a folder of the session's, mounted read-only into the
// sandbox at DirectDir, which the agent dials when asked. Calls over it
// skip the engine's attach copy; the attach stream stays up as the
// fallback.
type DirectRuntime interface {
	// ListenDirect listens on a new unix socket in the session's folder
	// and returns the listener (its Close unlinks the socket) and the
	// socket's path inside the sandbox. An error wrapping ErrNoDirect when
	// the session has no folder (the path is off, the engine is remote,
	// the sandbox was made without it).
	ListenDirect(sessionID string) (net.Listener, string, error)
}

// ErrNoDirect: the runtime offers no direct path to this session's agent.
var ErrNoDirect = errors.New("no direct path to the agent")

const (
	// directSetup bounds setting up a direct path (the agent's dial, its
	// hello, the accept) before the session goes on with its stream.
	directSetup = 5 * time.Second
	// directProbe bounds the ping, on the stream, that tells a broken
	// direct connection from a gone agent.
	directProbe = time.Second
)

// directDialer is what offerDirect needs of a client on the stream:
// *agentclient.Client has it; test fakes need not.
type directDialer interface {
	DialDirect(ctx context.Context, path, token string) error
}

// offerDirect asks the agent behind c (a pinged client on the attach
// stream or agent-proxy) to dial a new direct path, and returns a client
// that calls over it with c as the fallback; or c itself when the runtime
// or the agent offers none, or the setup fails (logged: the session works
// as before).
func (m *Manager) offerDirect(ctx context.Context, id string, c AgentClient, log *slog.Logger) AgentClient {
	drt, ok := m.rt.(DirectRuntime)
	if !ok {
		return c
	}
	dd, ok := c.(directDialer)
	if !ok {
		return c
	}
	ln, path, err := drt.ListenDirect(id)
	if err != nil {
		if !errors.Is(err, ErrNoDirect) {
			m.log.Warn("no direct path to the agent; calls go over the engine's stream", "session", id, "err", err)
		}
		return c
	}
	defer ln.Close() // unlinks the socket: nothing more connects
	token, err := agentclient.NewDirectToken()
	if err != nil {
		m.log.Warn("no direct path to the agent; calls go over the engine's stream", "session", id, "err", err)
		return c
	}
	ctx, cancel := context.WithTimeout(ctx, directSetup)
	defer cancel()
	type accepted struct {
		conn net.Conn
		err  error
	}
	got := make(chan accepted, 1)
	go func() {
		nc, err := agentclient.AcceptDirect(ctx, ln, token)
		got <- accepted{nc, err}
	}()
	derr := dd.DialDirect(ctx, path, token)
	if derr != nil {
		cancel() // the agent never dialled: stop waiting
	}
	a := <-got
	if derr != nil || a.err != nil {
		if a.conn != nil {
			a.conn.Close()
		}
		m.log.Warn("no direct path to the agent; calls go over the engine's stream", "session", id, "err", errors.Join(derr, a.err))
		return c
	}
	m.log.Debug("direct path to the agent up", "session", id)
	return &directClient{AgentClient: c, direct: m.opts.Dial(a.conn, log), log: m.log.With("session", id)}
}

// directClient sends calls over the direct connection while it is up and
// over the stream (the embedded AgentClient) once it has ended. The stream
// is the session's connection: Done, Err, Shutdown are its; Close closes
// both.
type directClient struct {
	AgentClient
	direct   AgentClient
	log      *slog.Logger
	fellBack atomic.Bool
}

// errDirectBroken marks an error of a call whose direct connection broke
// while the stream still answers: the agent lives, so there is no cause
// for the session's watcher to find.
var errDirectBroken = errors.New("the direct connection to the agent broke (later calls use the engine's stream)")

// up reports whether calls go over the direct connection.
func (d *directClient) up() bool {
	select {
	case <-d.direct.Done():
		return false
	default:
		return true
	}
}

func (d *directClient) pick() (AgentClient, bool) {
	if d.up() {
		return d.direct, true
	}
	if d.fellBack.CompareAndSwap(false, true) {
		d.log.Warn("direct connection to the agent ended; calls go over the engine's stream", "cause", d.direct.Err())
	}
	return d.AgentClient, false
}

// check turns the error of a call made over the direct connection into
// errDirectBroken when that connection broke but the stream answers.
func (d *directClient) check(ctx context.Context, direct bool, err error) error {
	if !direct || err == nil || !errors.Is(err, proto.ErrDisconnected) {
		return err
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), directProbe)
	defer cancel()
	if d.AgentClient.Ping(pctx) != nil {
		return err // the agent is gone too: the watcher says why
	}
	return fmt.Errorf("%w: %w", errDirectBroken, err)
}

func (d *directClient) Ping(ctx context.Context) error {
	c, direct := d.pick()
	return d.check(ctx, direct, c.Ping(ctx))
}

func (d *directClient) ListTools(ctx context.Context) ([]tools.Definition, error) {
	c, direct := d.pick()
	defs, err := c.ListTools(ctx)
	return defs, d.check(ctx, direct, err)
}

func (d *directClient) Call(ctx context.Context, name string, args json.RawMessage, stream tools.StreamFunc) (*tools.Observation, error) {
	c, direct := d.pick()
	obs, err := c.Call(ctx, name, args, stream)
	return obs, d.check(ctx, direct, err)
}

func (d *directClient) Upload(ctx context.Context, destDir string, tarStream io.Reader) error {
	c, direct := d.pick()
	return d.check(ctx, direct, c.Upload(ctx, destDir, tarStream))
}

func (d *directClient) Download(ctx context.Context, path string, w io.Writer) error {
	c, direct := d.pick()
	return d.check(ctx, direct, c.Download(ctx, path, w))
}

func (d *directClient) OpenPTY(ctx context.Context, o proto.PTYOptions, h agentclient.PTYHandler) (*agentclient.PTY, error) {
	c, direct := d.pick()
	p, err := c.OpenPTY(ctx, o, h)
	return p, d.check(ctx, direct, err)
}

func (d *directClient) InstallSkills(ctx context.Context) error {
	c, direct := d.pick()
	return d.check(ctx, direct, c.InstallSkills(ctx))
}

// Close closes the direct connection, then the stream.
func (d *directClient) Close() error {
	d.direct.Close()
	return d.AgentClient.Close()
}

// Direct reports whether the session's calls go over the direct path to
// its agent (decision 0035) rather than the engine's stream: false before
// it is ready, when the runtime offers none, or once the direct connection
// ended (until a reconnect offers a new one).
func (s *Session) Direct() bool {
	dc, ok := s.currentClient().(*directClient)
	return ok && dc.up()
}
