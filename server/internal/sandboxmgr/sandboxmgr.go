// Package sandboxmgr adapts *sandbox.Manager to the core.Backend interface
// the API layers are written against (so they can be tested without Docker).
package sandboxmgr

import (
	"context"
	"encoding/json"
	"io"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
	"github.com/sandboxd/sandboxd/tools"
)

// Backend is a core.Backend over a sandbox.Manager.
type Backend struct{ m *sandbox.Manager }

var _ core.Backend = (*Backend)(nil)

// New wraps m.
func New(m *sandbox.Manager) *Backend { return &Backend{m: m} }

// Create starts a session.
func (a *Backend) Create(ctx context.Context, o sandbox.SessionOptions, co sandbox.CreateOptions) (core.Sandbox, error) {
	s, err := a.m.CreateWith(ctx, o, co)
	if err != nil {
		return nil, apierr.FromSandbox(err)
	}
	return managed{s}, nil
}

// Get returns a live session.
func (a *Backend) Get(id string) (core.Sandbox, bool) {
	s, err := a.m.Get(id)
	if err != nil {
		return nil, false
	}
	return managed{s}, true
}

// List returns the live sessions.
func (a *Backend) List() []core.Sandbox {
	all := a.m.List()
	out := make([]core.Sandbox, len(all))
	for i, s := range all {
		out[i] = managed{s}
	}
	return out
}

// Stats counts sessions by state and warm sandboxes.
func (a *Backend) Stats() metrics.Stats {
	st := metrics.Stats{SessionsByState: map[string]int{}}
	// Every state a listed session can be in, 0 when none is: a gauge that
	// vanishes with the last session reads as "no data", not as 0.
	for state := sandbox.StateStarting; state < sandbox.StateClosed; state++ {
		st.SessionsByState[state.String()] = 0
	}
	for _, s := range a.m.List() {
		st.SessionsByState[s.State().String()]++
	}
	for _, p := range a.m.Pools() {
		st.PoolSize += p.Ready
		st.PoolTarget += p.Size
	}
	return st
}

// Shutdown shuts the manager down.
func (a *Backend) Shutdown(ctx context.Context, keepSessions bool) error {
	return apierr.FromSandbox(a.m.Shutdown(ctx, keepSessions))
}

// Manager returns the wrapped manager.
func (a *Backend) Manager() *sandbox.Manager { return a.m }

// managed is a core.Sandbox over a manager's session, whose errors are
// mapped to the API's (apierr.FromSandbox) as they leave it.
type managed struct{ *sandbox.Session }

func (s managed) Tools(ctx context.Context) ([]tools.Definition, error) {
	defs, err := s.Session.Tools(ctx)
	return defs, apierr.FromSandbox(err)
}

func (s managed) Call(ctx context.Context, name string, args json.RawMessage, stream tools.StreamFunc) (*tools.Observation, error) {
	obs, err := s.Session.Call(ctx, name, args, stream)
	return obs, apierr.FromSandbox(err)
}

func (s managed) Upload(ctx context.Context, destDir string, tar io.Reader) error {
	return apierr.FromSandbox(s.Session.Upload(ctx, destDir, tar))
}

func (s managed) Download(ctx context.Context, path string, w io.Writer) error {
	return apierr.FromSandbox(s.Session.Download(ctx, path, w))
}

func (s managed) Close(ctx context.Context) error {
	return apierr.FromSandbox(s.Session.Close(ctx))
}

func (s managed) Info() core.Info {
	o := s.Options()
	return core.Info{State: s.State().String(), Image: o.Image, Labels: o.Labels}
}

func (s managed) OpenPTY(ctx context.Context, o proto.PTYOptions, h agentclient.PTYHandler) (core.PTY, error) {
	p, err := s.Session.OpenPTY(ctx, o, h)
	if err != nil {
		return nil, apierr.FromSandbox(err)
	}
	return managedPTY{p}, nil
}

// managedPTY is a core.PTY over an agent's PTY, its errors mapped as they
// leave it.
type managedPTY struct{ *agentclient.PTY }

func (p managedPTY) Input(ctx context.Context, data []byte) error {
	return apierr.FromSandbox(p.PTY.Input(ctx, data))
}

func (p managedPTY) Resize(ctx context.Context, rows, cols int) error {
	return apierr.FromSandbox(p.PTY.Resize(ctx, rows, cols))
}

func (p managedPTY) Close(ctx context.Context) (proto.PTYExit, error) {
	st, err := p.PTY.Close(ctx)
	return st, apierr.FromSandbox(err)
}
