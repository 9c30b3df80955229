package sandbox

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// reclaimParallel bounds the sessions probed or removed at once at startup.
const reclaimParallel = 4

// reclaimRow is one line of the startup reclaim table: what was found of a
// session and what became of it.
type reclaimRow struct {
	session string
	action  string // "adopted", "pooled", "removed"
	reason  string
}

// reclaim lists everything under the runtime's labels and decides per
// session: a running container whose agent answers is adopted (into the
// live set, or back into its warm pool if it was never handed out);
// everything else (dead or unhealthy containers, volumes and networks
// without a live container) is removed. It is idempotent.
func (m *Manager) reclaim(ctx context.Context) error {
	res, err := m.rt.List(ctx)
	if err != nil {
		return err
	}
	type group struct {
		ctr   *Resource
		count int
	}
	groups := map[string]*group{}
	for i := range res {
		r := &res[i]
		if r.SessionID == "" {
			continue // shared resources (e.g. the runtime's agent volume)
		}
		g := groups[r.SessionID]
		if g == nil {
			g = &group{}
			groups[r.SessionID] = g
		}
		g.count++
		if r.Kind == KindContainer && r.Labels[LabelSidecar] == "" { // sidecars go with their sandbox
			g.ctr = r
		}
	}
	if len(groups) == 0 {
		return nil
	}

	var (
		mu   sync.Mutex
		rows []reclaimRow
		wg   sync.WaitGroup
		sem  = make(chan struct{}, reclaimParallel)
	)
	for id, g := range groups {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			row := m.reclaimOne(ctx, id, g.ctr)
			mu.Lock()
			rows = append(rows, row)
			mu.Unlock()
		}()
	}
	wg.Wait()
	sort.Slice(rows, func(i, j int) bool { return rows[i].session < rows[j].session })
	counts := map[string]int{}
	for _, r := range rows {
		counts[r.action]++
		m.log.Info("reclaim", "session", r.session, "action", r.action, "reason", r.reason)
	}
	m.log.Info("reclaim done", "sessions", len(rows), "adopted", counts["adopted"], "pooled", counts["pooled"],
		"removed", counts["removed"], "failed", counts["remove failed"])
	return nil
}

func (m *Manager) reclaimOne(ctx context.Context, id string, ctr *Resource) reclaimRow {
	remove := func(reason string) reclaimRow {
		rctx, cancel := context.WithTimeout(ctx, m.opts.RemoveTimeout)
		defer cancel()
		if err := m.rt.Remove(rctx, id); err != nil {
			return reclaimRow{id, "remove failed", fmt.Sprintf("%s; removing: %v", reason, err)}
		}
		return reclaimRow{id, "removed", reason}
	}
	switch {
	case ctr == nil:
		return remove("volume or network without a container")
	case ctr.Paused && !ctr.Pooled:
		return m.adoptPaused(id, ctr, remove)
	case !ctr.Running:
		return remove("container not running")
	}
	opts, err := decodeOptions(ctr.Labels[LabelOptions])
	if err != nil {
		return remove(fmt.Sprintf("unreadable %s label: %v", LabelOptions, err))
	}
	var p *pool
	if ctr.Pooled && ctr.Outdated != "" {
		return remove("pooled sandbox made with outdated settings: " + ctr.Outdated)
	}
	if ctr.Pooled {
		p = m.pools[ctr.Labels[LabelPool]]
		if p == nil || p.key != opts.Key() || !p.room() {
			return remove("pooled sandbox that no configured pool wants")
		}
	}
	s := m.adoptedSession(id, opts, ctr.Labels)
	c, err := m.connect(ctx, id, s.agentLog)
	if err != nil {
		return remove(fmt.Sprintf("agent unreachable: %v", err))
	}
	close(s.started)
	s.setReady(c)
	if p != nil {
		s.pooled = true
		if !p.add(s) {
			c.Close()
			return remove("pool filled meanwhile")
		}
		m.watch(s, c)
		return reclaimRow{id, "pooled", "warm sandbox returned to its pool"}
	}
	m.mu.Lock()
	m.sessions[id] = s
	m.mu.Unlock()
	m.watch(s, c)
	if ctr.Outdated != "" {
		m.log.Warn("adopted a session whose sandbox was made with outdated settings; it keeps them until it is closed",
			"session", id, "outdated", ctr.Outdated)
		return reclaimRow{id, "adopted", "running, agent answers; outdated settings: " + ctr.Outdated}
	}
	return reclaimRow{id, "adopted", "running, agent answers"}
}

// adoptedSession is the session of a sandbox a previous daemon left, as
// its labels describe it (options, creation time), not yet connected.
func (m *Manager) adoptedSession(id string, opts SessionOptions, labels map[string]string) *Session {
	s := newSession(m, id, opts)
	if srt, ok := m.rt.(SidecarRuntime); ok && len(opts.MCPServers) > 0 {
		// Its MCP servers start again at their first use, replacing their
		// containers: a server's state does not survive a daemon restart.
		s.sidecars = newSidecars(s, srt)
	}
	if t, err := time.Parse(time.RFC3339Nano, labels[LabelCreated]); err == nil {
		s.created = t
	}
	return s
}
