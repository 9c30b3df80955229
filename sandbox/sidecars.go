package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/sandboxd/sandboxd/tools"
)

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
	if prev, ok := m.sidecarTools.defs[key]; ok && sameTools(prev, defs) {
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
	set := newSidecars(s, srt)
	errs := make([]error, len(set.all))
	var wg sync.WaitGroup
	for i, c := range set.all {
		wg.Go(func() { _, errs[i] = c.session(ctx) })
	}
	wg.Wait()
	set.close()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.opts.RemoveTimeout)
	defer cancel()
	if err := m.rt.Remove(rctx, s.id); err != nil {
		errs = append(errs, fmt.Errorf("removing the probe: %w", err))
	}
	return errors.Join(errs...)
}
