package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/sandboxd/sandboxd/sandbox/sidecar"
	"github.com/sandboxd/sandboxd/tools"
)

// newSidecars is the set of a session's MCP servers (package
// sandbox/sidecar, the daemon's MCP client to them), each started by srt.
func newSidecars(s *Session, srt SidecarRuntime) *sidecar.Set {
	return sidecar.New(s.m.ctx, sidecar.Options{Servers: sidecarServers(s, srt), Log: s.agentLog, Closed: ErrClosed})
}

// sidecarServers are a session's MCP servers as a sidecar.Set runs them:
// started by srt with the session's labels and their secrets, and what
// they list learned by the manager.
func sidecarServers(s *Session, srt SidecarRuntime) []sidecar.Server {
	out := make([]sidecar.Server, len(s.opts.MCPServers))
	for i, srv := range s.opts.MCPServers {
		out[i] = sidecar.Server{
			Name:      srv.Name,
			Transport: srv.Transport,
			Eager:     srv.Start == StartEager,
			Start: func(ctx context.Context) (*sidecar.Conn, error) {
				return s.startSidecar(ctx, srt, srv)
			},
			Learned: func(defs []tools.Definition) { s.m.learnedTools(srv, defs) },
		}
	}
	return out
}

// startSidecar runs the container of one of the session's MCP servers,
// replacing any it had, with its secrets resolved now.
func (s *Session) startSidecar(ctx context.Context, srt SidecarRuntime, srv MCPServer) (*sidecar.Conn, error) {
	env, err := sidecarEnv(srv, s.m.opts.Secrets)
	if err != nil {
		return nil, err
	}
	conn, err := srt.StartSidecar(ctx, SidecarSpec{
		SessionID: s.id,
		Server:    srv,
		Labels:    SessionLabels(s.id, s.opts, "", s.created),
		Env:       env,
	})
	if err != nil {
		return nil, fmt.Errorf("mcp server %q: starting its container: %w", srv.Name, err)
	}
	return conn, nil
}

// needWorkspace reports whether one of servers mounts the session's
// workspace.
func needWorkspace(servers []MCPServer) bool {
	for _, srv := range servers {
		if srv.Workspace != "" {
			return true
		}
	}
	return false
}

// sidecarToolCache is what the manager learned of MCP servers' tools, by
// declaration (sidecarKey), for lists made without a sandbox (the
// stateless MCP clients' list of a profile).
type sidecarToolCache struct {
	mu   sync.Mutex
	defs map[string][]tools.Definition
	ver  atomic.Uint64 // counts changes of defs
}

// sidecarKey identifies a declaration with its defaults filled, without
// what does not change its tools: its workspace mount (a probe has none)
// and its limits (a probe's are the defaults).
func sidecarKey(s MCPServer) string {
	s.Workspace = ""
	s = s.withDefaults(Limits{})
	s.Limits = SidecarLimits{}
	b, _ := json.Marshal(s)
	return string(b)
}

func (m *Manager) learnedTools(s MCPServer, defs []tools.Definition) {
	m.sidecarTools.mu.Lock()
	defer m.sidecarTools.mu.Unlock()
	if m.sidecarTools.defs == nil {
		m.sidecarTools.defs = map[string][]tools.Definition{}
	}
	key := sidecarKey(s)
	if prev, ok := m.sidecarTools.defs[key]; ok && sidecar.SameTools(prev, defs) {
		return
	}
	m.sidecarTools.defs[key] = defs
	m.sidecarTools.ver.Add(1)
}

// SidecarToolsVersion changes whenever what SidecarTools returns may have:
// a sidecar's tools were learned, or changed (list_changed, a restart).
func (m *Manager) SidecarToolsVersion() uint64 { return m.sidecarTools.ver.Load() }

// SidecarTools returns the tools of servers as sessions name them, as last
// learned (LearnSidecarTools, or any session's sidecar); a server not
// learned yet contributes none.
func (m *Manager) SidecarTools(servers []MCPServer) []tools.Definition {
	m.sidecarTools.mu.Lock()
	defer m.sidecarTools.mu.Unlock()
	var out []tools.Definition
	for _, s := range servers {
		out = append(out, m.sidecarTools.defs[sidecarKey(s)]...)
	}
	return out
}

// LearnSidecarTools starts each of servers once in a probe (its own
// labelled containers, removed after), reads its tools, and keeps them
// for SidecarTools. serve calls it at start for every profile with
// sidecars, so stateless MCP clients see them without opening a sandbox.
func (m *Manager) LearnSidecarTools(ctx context.Context, servers []MCPServer) error {
	if len(servers) == 0 {
		return nil
	}
	srt, ok := m.rt.(SidecarRuntime)
	if !ok {
		return errors.New("this runtime cannot run MCP sidecars")
	}
	lim := m.opts.Defaults.Limits.withDefaults(builtinDefaults.Limits)
	resolved := make([]MCPServer, len(servers))
	for i, s := range servers {
		resolved[i] = s.withDefaults(lim)
		resolved[i].Workspace = "" // a probe has no workspace
	}
	o := SessionOptions{MCPServers: resolved}
	var p problems
	o.validateMCPServers(&p)
	if err := p.err(); err != nil {
		return err
	}
	s := newSession(m, "probe-"+uuid.NewString(), o)
	probe := sidecarServers(s, srt)
	for i := range probe {
		probe[i].Eager = true // a probe starts the lazy ones too
	}
	set := sidecar.New(m.ctx, sidecar.Options{Servers: probe, Log: s.agentLog, Closed: ErrClosed})
	err := set.StartEager(ctx)
	set.Close()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.RemoveTimeout)
	defer cancel()
	if rerr := m.rt.Remove(rctx, s.id); rerr != nil {
		err = errors.Join(err, fmt.Errorf("removing the probe: %w", rerr))
	}
	return err
}
