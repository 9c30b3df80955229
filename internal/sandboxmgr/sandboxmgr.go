// Package sandboxmgr adapts *sandbox.Manager to the core.Manager interface
// the API layers are written against (so they can be tested without Docker).
package sandboxmgr

import (
	"context"
	"errors"
	"strings"

	"github.com/sandboxd/sandboxd/internal/core"
	"github.com/sandboxd/sandboxd/internal/metrics"
	"github.com/sandboxd/sandboxd/sandbox"
)

// Manager is a core.Manager over a sandbox.Manager.
type Manager struct{ m *sandbox.Manager }

var _ core.Manager = (*Manager)(nil)

// New wraps m.
func New(m *sandbox.Manager) *Manager { return &Manager{m: m} }

// Create starts a session.
func (a *Manager) Create(ctx context.Context, o core.CreateOptions) (core.Session, error) {
	s, err := a.m.Create(ctx, Options(o))
	if err != nil {
		return nil, apiNames(err)
	}
	return session{s}, nil
}

// apiFields renames the manager's option fields to the API's where they
// differ, so an invalid-options error names what the client sent.
var apiFields = strings.NewReplacer("limits.memory", "limits.memory_mb", "limits.tmpfs", "limits.tmp_mb")

func apiNames(err error) error {
	var oe *sandbox.OptionsError
	if !errors.As(err, &oe) {
		return err
	}
	renamed := &sandbox.OptionsError{Problems: make([]string, len(oe.Problems))}
	for i, p := range oe.Problems {
		renamed.Problems[i] = apiFields.Replace(p)
	}
	return renamed
}

// Options converts the API's create options to the manager's.
func Options(o core.CreateOptions) sandbox.SessionOptions {
	idle := o.IdleTimeout
	if idle < 0 {
		idle = sandbox.NoIdleTimeout
	}
	return sandbox.SessionOptions{
		Image: o.Image, Env: o.Env, Cwd: o.Cwd, User: o.User, Network: o.Network,
		IdleTimeout: idle, Labels: o.Labels,
		Limits: sandbox.Limits{Memory: o.MemoryBytes, CPUs: o.CPUs, Pids: o.Pids, Tmpfs: o.TmpBytes},
	}
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
	return a.m.Shutdown(ctx, keepSessions)
}

// Manager returns the wrapped manager.
func (a *Manager) Manager() *sandbox.Manager { return a.m }

type session struct{ *sandbox.Session }

func (s session) Info() core.Info {
	o := s.Options()
	return core.Info{State: s.State().String(), Image: o.Image, Labels: o.Labels}
}
