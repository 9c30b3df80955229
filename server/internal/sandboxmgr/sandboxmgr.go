// Package sandboxmgr adapts *sandbox.Manager to the core.Backend interface
// the API layers are written against (so they can be tested without Docker).
// Errors are mapped where they leave the process (apierr), but a create's
// (its invalid options are named in the client's terms before the core
// wraps them).
package sandboxmgr

import (
	"context"

	agentclient "github.com/sandboxd/sandboxd/agent/client"
	"github.com/sandboxd/sandboxd/agent/proto"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/internal/apierr"
	"github.com/sandboxd/sandboxd/server/internal/core"
	"github.com/sandboxd/sandboxd/server/internal/metrics"
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
		// The one error mapped here, not at the edge: a create's invalid
		// options, named as the client sent them, before the core wraps
		// them in words of its own.
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
	st.EgressDenials = a.m.EgressDenialCounts()
	return st
}

// Shutdown shuts the manager down.
func (a *Backend) Shutdown(ctx context.Context, keepSessions bool) error {
	return a.m.Shutdown(ctx, keepSessions)
}

// Manager returns the wrapped manager.
func (a *Backend) Manager() *sandbox.Manager { return a.m }

// managed is a core.Sandbox over a manager's session: the session itself
// (its errors are mapped where they leave the process, by apierr), with
// Info and OpenPTY in the core's types.
type managed struct{ *sandbox.Session }

func (s managed) Info() core.Info {
	o := s.Options()
	return core.Info{State: s.State().String(), Image: o.Image, Labels: o.Labels}
}

// OpenPTY is the session's, returned as a core.PTY (which *agentclient.PTY
// is).
func (s managed) OpenPTY(ctx context.Context, o proto.PTYOptions, h agentclient.PTYHandler) (core.PTY, error) {
	p, err := s.Session.OpenPTY(ctx, o, h)
	if err != nil {
		return nil, err
	}
	return p, nil
}
