// Package sandboxmgr adapts *sandbox.Manager to the core.Manager interface
// the API layers are written against (so they can be tested without Docker).
package sandboxmgr

import (
	"context"
	"encoding/json"
	"io"

	"github.com/sandboxd/sandboxd/internal/apierr"
	"github.com/sandboxd/sandboxd/internal/core"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/tools"
)

// Manager is a core.Manager over a sandbox.Manager.
type Manager struct{ m *sandbox.Manager }

var _ core.Manager = (*Manager)(nil)

// New wraps m.
func New(m *sandbox.Manager) *Manager { return &Manager{m: m} }

// Create starts a session.
func (a *Manager) Create(ctx context.Context, o sandbox.SessionOptions) (core.Session, error) {
	s, err := a.m.Create(ctx, o)
	if err != nil {
		return nil, apierr.FromSandbox(err)
	}
	return session{s}, nil
}

// Get returns a live session.
func (a *Manager) Get(id string) (core.Session, bool) {
	s, err := a.m.Get(id)
	if err != nil {
		return nil, false
	}
	return session{s}, true
}

// List returns the live sessions.
func (a *Manager) List() []core.Session {
	all := a.m.List()
	out := make([]core.Session, len(all))
	for i, s := range all {
		out[i] = session{s}
	}
	return out
}

// Stats counts sessions by state and warm sandboxes.
func (a *Manager) Stats() metrics.Stats {
	st := metrics.Stats{SessionsByState: map[string]int{}}
	for _, s := range a.m.List() {
		st.SessionsByState[s.State().String()]++
	}
	for _, p := range a.m.Pools() {
		st.PoolSize += p.Ready
	}
	return st
}

// Shutdown shuts the manager down.
func (a *Manager) Shutdown(ctx context.Context, keepSessions bool) error {
	return apierr.FromSandbox(a.m.Shutdown(ctx, keepSessions))
}

// Manager returns the wrapped manager.
func (a *Manager) Manager() *sandbox.Manager { return a.m }

// session is a manager's session whose errors are mapped to the API's
// (apierr.FromSandbox) as they leave it.
type session struct{ *sandbox.Session }

func (s session) Tools(ctx context.Context) ([]tools.Definition, error) {
	defs, err := s.Session.Tools(ctx)
	return defs, apierr.FromSandbox(err)
}

func (s session) Call(ctx context.Context, name string, args json.RawMessage, stream tools.StreamFunc) (*tools.Observation, error) {
	obs, err := s.Session.Call(ctx, name, args, stream)
	return obs, apierr.FromSandbox(err)
}

func (s session) Upload(ctx context.Context, destDir string, tar io.Reader) error {
	return apierr.FromSandbox(s.Session.Upload(ctx, destDir, tar))
}

func (s session) Download(ctx context.Context, path string, w io.Writer) error {
	return apierr.FromSandbox(s.Session.Download(ctx, path, w))
}

func (s session) Close(ctx context.Context) error {
	return apierr.FromSandbox(s.Session.Close(ctx))
}

func (s session) Info() core.Info {
	o := s.Options()
	return core.Info{State: s.State().String(), Image: o.Image, Labels: o.Labels}
}
