package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/sandboxd/sandboxd/tools"
)

// Refill backoff after failed starts: 1s, 2s, 4s ... up to maxPoolBackoff.
const maxPoolBackoff = 30 * time.Second

// The demand policy of a pool whose Max is above its Min (PoolOptions).
const (
	// demandWindow is how far back claims count as demand.
	demandWindow = 10 * time.Second
	// maxDemand bounds the claims remembered in the window (a pool never
	// aims above its Max, so more would change nothing).
	maxDemand = 10_000
	// initialStartCost is the refill latency assumed before the pool has
	// measured one (a cold start on 2 cores takes about that).
	initialStartCost = time.Second
	// DefaultPoolIdle is how long a sandbox above the pool's target waits
	// ready before it is retired (PoolOptions.Idle).
	DefaultPoolIdle = time.Minute
)

// Refill scheduling (decision 0037): a container start takes the engine
// and both CPUs for most of a second, and the sessions just handed out
// make their first calls through the same engine meanwhile. So while
// claims are recent the pool starts only what keeps its reserve (the
// claims one refill latency takes, plus one) covered, and the rest of
// what it lacks together once claims have stopped for refillQuiet.
const refillQuiet = time.Second

// pool keeps started sandboxes of one options key ready. A pooled session
// is fully started (its agent answered a ping), so handing one out costs a
// slice pop.
//
// Its size follows demand between min and max (decision 0034): it aims at
// target = min + round(claim rate × refill latency), capped at max, where
// the claim rate counts every create that asked it (handed out or not) in
// the last demandWindow and the refill latency is a moving average of its
// own starts; so a burst that drains it grows it, and the growth is what
// the claims would have taken while refills ran. A sandbox above the
// target that has been ready for idle is retired (oldest first), so the
// pool shrinks back to min once claims stop. With min = max it is a fixed
// pool of that size, as before. Refills take start slots after every
// client create waiting for one (startSlots), so a pool growing under a
// burst never delays the burst's own cold creates.
//
// When it refills is decision 0037: while claims are recent it starts only
// what keeps its reserve covered and the rest together once they stop
// (refillsLocked), and each sandbox makes a warm-up call before it is
// pooled (warmUp), so a handed-out session's first calls neither share the
// engine with container starts nor pay the agent's first-call cost.
type pool struct {
	m        *Manager
	id       string // poolID: its key in Manager.pools and its sandboxes' LabelPool
	key      string // its options' key (SessionOptions.Key)
	opts     SessionOptions
	min, max int
	idle     time.Duration
	log      *slog.Logger
	kick     chan struct{}

	mu        sync.Mutex
	ready     []pooled // oldest first
	starting  int
	failures  int
	retryAt   time.Time
	closed    bool
	demand    []time.Time   // claims in the last demandWindow, oldest first (Max > Min only)
	startCost time.Duration // moving average of a refill's latency
	// claims are the claims of the last demandWindow whatever the bounds,
	// oldest first: the rate the reserve is sized by (refillQuiet).
	claims []time.Time
	// warm is the call made on a started sandbox before it is pooled
	// (warmUp); nil: none.
	warm *warmCall
}

// pooled is a ready sandbox of a pool and since when it waits.
type pooled struct {
	s  *Session
	at time.Time
}

func newPool(m *Manager, id string, o SessionOptions, po PoolOptions) *pool {
	lo, hi := po.bounds()
	idle := po.Idle
	if idle <= 0 {
		idle = DefaultPoolIdle
	}
	return &pool{
		m: m, id: id, key: o.Key(), opts: o, min: lo, max: hi, idle: idle,
		log:       m.log.With("pool", id, "image", o.Image),
		kick:      make(chan struct{}, 1),
		startCost: initialStartCost,
		warm:      m.opts.warmUp,
	}
}

// poolID is the id of a pool: the options key of a shared pool; the
// profile's name, a slash and the options key of any other, so that a
// profile's pool serves only that profile's creates (and a profile-less
// pool only profile-less ones). Sandboxes of a pool carry it as LabelPool.
func poolID(profile string, shared bool, key string) string {
	if shared {
		return key
	}
	return profile + "/" + key
}

// poolFor is the pool a create draws from: its profile's own (pool id
// own), else a shared pool of the same options (key); nil if neither.
func (m *Manager) poolFor(own, key string) *pool {
	if p := m.pools[own]; p != nil {
		return p
	}
	return m.pools[key]
}

// bounds are the pool's min and max: Size, and Max when above it.
func (po PoolOptions) bounds() (lo, hi int) {
	return po.Size, max(po.Size, po.Max)
}

// claimed counts one create that asked the pool for a sandbox (the take
// that follows kicks the pool's loop).
func (p *pool) claimed() {
	p.mu.Lock()
	p.claims = appendClaim(p.claims, time.Now())
	if p.max > p.min {
		p.demand = append(p.demand, time.Now())
		if len(p.demand) > maxDemand {
			p.demand = p.demand[len(p.demand)-maxDemand:]
		}
	}
	p.mu.Unlock()
}

// appendClaim adds a claim at now, forgetting those older than
// demandWindow and keeping at most maxDemand.
func appendClaim(claims []time.Time, now time.Time) []time.Time {
	claims = append(forgetClaims(claims, now), now)
	if len(claims) > maxDemand {
		claims = claims[len(claims)-maxDemand:]
	}
	return claims
}

// forgetClaims drops the claims older than demandWindow.
func forgetClaims(claims []time.Time, now time.Time) []time.Time {
	i := 0
	for i < len(claims) && now.Sub(claims[i]) >= demandWindow {
		i++
	}
	if i == len(claims) {
		return nil
	}
	return claims[i:]
}

// refillsLocked is how many of missing the pool starts now, and how long
// it may wait before it looks again (see refillQuiet): all of them once no
// claim came for refillQuiet; while claims are recent, only what brings
// ready and starting sandboxes up to the reserve, 1 + ⌈claim rate × refill
// latency⌉ (what the claims take while one refill runs, and the hand-out
// in flight).
func (p *pool) refillsLocked(now time.Time, missing int) (int, time.Duration) {
	p.claims = forgetClaims(p.claims, now)
	if missing <= 0 || len(p.claims) == 0 {
		return missing, time.Hour
	}
	since := now.Sub(p.claims[len(p.claims)-1])
	if since >= refillQuiet {
		return missing, time.Hour
	}
	rate := float64(len(p.claims)) / demandWindow.Seconds()
	reserve := 1 + int(math.Ceil(rate*p.startCost.Seconds()))
	start := min(missing, max(reserve-len(p.ready)-p.starting, 0))
	if start == missing {
		return missing, time.Hour
	}
	return start, refillQuiet - since
}

// targetLocked is the size the pool aims at now (see pool); it forgets
// claims older than demandWindow.
func (p *pool) targetLocked(now time.Time) int {
	i := 0
	for i < len(p.demand) && now.Sub(p.demand[i]) >= demandWindow {
		i++
	}
	p.demand = p.demand[i:]
	if len(p.demand) == 0 {
		p.demand = nil
		return p.min
	}
	rate := float64(len(p.demand)) / demandWindow.Seconds()
	extra := math.Round(rate * p.startCost.Seconds())
	if extra >= float64(p.max-p.min) {
		return p.max
	}
	return p.min + int(extra)
}

// take hands out the oldest ready session, or nil.
func (p *pool) take() *Session {
	var stale []*Session
	var got *Session
	p.mu.Lock()
	for len(p.ready) > 0 && got == nil {
		s := p.ready[0].s
		p.ready = p.ready[1:]
		if s.State() == StateReady {
			got = s
		} else {
			stale = append(stale, s)
		}
	}
	p.mu.Unlock()
	for _, s := range stale {
		p.m.closeInBackground(s)
	}
	p.signal()
	return got
}

// hasReady reports whether a sandbox waits in the pool.
func (p *pool) hasReady() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready) > 0
}

// add puts a started session in the pool; false if the pool is closed or
// at its max (then the caller closes it).
func (p *pool) add(s *Session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.ready) >= p.max {
		return false
	}
	p.ready = append(p.ready, pooled{s, time.Now()})
	return true
}

// remove takes s out of the pool; false if it was not in it.
func (p *pool) remove(s *Session) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, r := range p.ready {
		if r.s == s {
			p.ready = append(p.ready[:i], p.ready[i+1:]...)
			return true
		}
	}
	return false
}

// room reports whether the pool wants another sandbox (for adoption): up
// to its max, as what is above the target is retired once idle.
func (p *pool) room() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return !p.closed && len(p.ready)+p.starting < p.max
}

// drain closes the pool and returns its sessions for the caller to close.
func (p *pool) drain() []*Session {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	out := make([]*Session, len(p.ready))
	for i, r := range p.ready {
		out[i] = r.s
	}
	p.ready = nil
	return out
}

func (p *pool) signal() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// run keeps the pool at its target until ctx ends: it fills and retires,
// then sleeps until kicked (a claim, a start ended) or until the target or
// an idle sandbox may have changed.
func (p *pool) run(ctx context.Context) {
	for {
		wait := p.fill()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-p.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// fill retires the idle sandboxes above the target and starts as many as
// the pool lacks (after a failure, not before its backoff; while claims
// are recent, only what its reserve lacks: refillsLocked); the manager's
// start slots bound how many run at once. It returns how long the pool
// may wait before it needs looking at again.
func (p *pool) fill() time.Duration {
	now := time.Now()
	var retire []*Session
	p.mu.Lock()
	target := p.targetLocked(now)
	for len(p.ready) > target && now.Sub(p.ready[0].at) >= p.idle {
		retire = append(retire, p.ready[0].s)
		p.ready = p.ready[1:]
	}
	missing, wait := p.refillsLocked(now, target-len(p.ready)-p.starting)
	if backoff := p.retryAt.Sub(now); backoff > 0 {
		wait, missing = backoff, 0
	}
	if len(p.demand) > 0 { // the target drops as claims leave the window
		wait = min(wait, demandWindow-now.Sub(p.demand[0]))
	}
	if len(p.ready) > target { // the oldest is above the target, not idle yet
		wait = min(wait, max(p.idle-now.Sub(p.ready[0].at), time.Millisecond))
	}
	if p.closed || missing < 0 {
		missing = 0
	}
	p.starting += missing
	p.mu.Unlock()
	if len(retire) > 0 {
		p.log.Info("warm pool shrinking: idle sandboxes retired", "retired", len(retire), "target", target)
	}
	for _, s := range retire {
		p.m.closeInBackground(s)
	}
	for range missing {
		if !p.m.goBackground(p.startOne) {
			p.mu.Lock()
			p.starting--
			p.mu.Unlock()
		}
	}
	return wait
}

func (p *pool) startOne(ctx context.Context) {
	began := time.Now()
	s, err := p.m.start(ctx, p.opts, p.id, CreateOptions{}, "")
	if err == nil {
		if err = p.warmUp(ctx, s); err != nil {
			_ = s.Close(context.Background()) // teardown logs a failed removal
		}
	}
	p.mu.Lock()
	p.starting--
	if err != nil {
		if ctx.Err() == nil {
			p.failures++
			backoff := min(time.Second<<min(p.failures-1, 5), maxPoolBackoff)
			p.retryAt = time.Now().Add(backoff)
			p.log.Error("warm pool start failed", "err", err, "retry_in", backoff)
		}
		p.mu.Unlock()
		p.signal()
		return
	}
	p.failures = 0
	p.startCost = (3*p.startCost + time.Since(began)) / 4
	p.mu.Unlock()
	if !p.add(s) {
		_ = s.Close(context.Background()) // the pool closed meanwhile; teardown logs a failed removal
		return
	}
	p.log.Debug("warm sandbox ready", "session", s.id)
	p.signal()
}

// warmCall is a tool call a pool makes on each sandbox it started before
// the sandbox waits in the pool (ManagerOptions.warmUp).
type warmCall struct {
	tool string
	args json.RawMessage
}

// defaultWarmUp runs `true` in the terminal. The first call on a started
// sandbox costs more than the next (decision 0037): the agent's first
// tools/call and the shell's first command page in and set up what every
// later one reuses. A pooled sandbox pays that before it is handed out.
// The call leaves no trace a session can see: the shell keeps no history,
// `true` writes nothing, and the observation goes nowhere.
var defaultWarmUp = &warmCall{tool: "terminal", args: json.RawMessage(`{"command":"true"}`)}

// warmUpTimeout bounds the warm-up call.
const warmUpTimeout = 10 * time.Second

// warmUp makes the pool's warm-up call on s. A toolset without the tool
// (a profile without a terminal) has nothing to warm; an observation that
// is an error is the tool's answer and is ignored; an error (the agent
// did not answer) fails the start.
func (p *pool) warmUp(ctx context.Context, s *Session) error {
	if p.warm == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, warmUpTimeout)
	defer cancel()
	if _, err := s.Call(ctx, p.warm.tool, p.warm.args, nil); err != nil && !errors.Is(err, tools.ErrUnknownTool) {
		return fmt.Errorf("session %s: %w: the warm-up call (%s) failed: %w", s.id, ErrStart, p.warm.tool, err)
	}
	return nil
}

// dropPooled removes a failed session from its pool and closes it.
func (m *Manager) dropPooled(s *Session) {
	for _, p := range m.pools {
		if p.remove(s) {
			m.closeInBackground(s)
			p.signal()
			return
		}
	}
	m.dropSnapPooled(s)
}

// closeInBackground closes a session as tracked background work.
func (m *Manager) closeInBackground(s *Session) {
	// Close's error needs no handling here: teardown logs a failed removal.
	if !m.goBackground(func(context.Context) { _ = s.Close(context.Background()) }) {
		go func() { _ = s.Close(context.Background()) }() // Shutdown closes the rest and waits
	}
}

// PoolStat is the state of one warm pool.
type PoolStat struct {
	Key      string `json:"key"` // the pool's id: "profile/options-key", or the options key of a shared pool
	Image    string `json:"image"`
	Size     int    `json:"size"` // what it aims at now, between Min and Max
	Min      int    `json:"min"`
	Max      int    `json:"max"`
	Ready    int    `json:"ready"`
	Starting int    `json:"starting"`
}

func (p *pool) stat() PoolStat {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStat{Key: p.id, Image: p.opts.Image, Size: p.targetLocked(time.Now()), Min: p.min, Max: p.max,
		Ready: len(p.ready), Starting: p.starting}
}

// Pools reports the warm pools (for metrics and readiness checks).
func (m *Manager) Pools() []PoolStat {
	out := make([]PoolStat, 0, len(m.pools))
	for _, p := range m.pools {
		out = append(out, p.stat())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}
