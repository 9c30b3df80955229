package sandbox

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The target: min plus the claims of the last demandWindow times the
// measured refill latency, capped at max; back to min once the claims
// leave the window.
func TestPoolTarget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &pool{min: 2, max: 20, startCost: 2 * time.Second}
		now := time.Now()
		assert.Equal(t, 2, p.targetLocked(now), "no demand: min")
		for range 10 {
			p.demand = append(p.demand, now)
		}
		assert.Equal(t, 4, p.targetLocked(now), "1 claim/s × 2 s refill: 2 more")
		for range 3 {
			p.demand = append(p.demand, now.Add(5*time.Second))
		}
		assert.Equal(t, 5, p.targetLocked(now.Add(5*time.Second)), "1.3 claims/s × 2 s = 2.6: rounded to 3")
		assert.Equal(t, 3, p.targetLocked(now.Add(demandWindow)), "the first ten left the window: 0.3/s × 2 s = 0.6")
		p.demand = []time.Time{now}
		assert.Equal(t, 2, p.targetLocked(now), "one claim in 10 s (0.1/s × 2 s = 0.2) does not grow it")
		assert.Equal(t, 2, p.targetLocked(now.Add(5*time.Second+demandWindow)), "all left: min")
		assert.Empty(t, p.demand, "forgotten")

		for range 1000 {
			p.demand = append(p.demand, now)
		}
		assert.Equal(t, 20, p.targetLocked(now), "capped at max")

		fixed := &pool{min: 3, max: 3, startCost: time.Minute}
		fixed.claimed()
		assert.Empty(t, fixed.demand, "a fixed pool counts no demand")
		assert.Equal(t, 3, fixed.targetLocked(now))
	})
}

// A burst larger than the pool grows it toward max while refills run, and
// once the claims stop it shrinks back to min after idle; nothing leaks.
func TestPoolGrowsWithDemandAndShrinksBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = time.Second
		const idle = 30 * time.Second
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 1, Max: 6, Idle: idle}}, MaxConcurrentStarts: 32})
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, PoolStat{Key: m.Pools()[0].Key, Image: "test-image", Size: 1, Min: 1, Max: 6, Ready: 1}, m.Pools()[0])

		// 15 creates at once: 1.5 claims/s × 1 s per refill (no start
		// waits for a slot) = 1.5: the pool aims at 1+2.
		var wg sync.WaitGroup
		sessions := make(chan *Session, 15)
		for range 15 {
			wg.Go(func() {
				s, err := m.Create(context.Background(), SessionOptions{})
				if assert.NoError(t, err) {
					sessions <- s
				}
			})
		}
		wg.Wait()
		close(sessions)
		require.Len(t, m.List(), 15, "every create of the burst got its sandbox")
		st := m.Pools()[0]
		assert.Equal(t, 3, st.Size, "grown with the demand")
		time.Sleep(2 * time.Second) // the refills end
		synctest.Wait()
		st = m.Pools()[0]
		assert.Equal(t, 3, st.Ready, "filled to the grown target")

		// A second burst of 3 is served from the pool at once.
		began := time.Now()
		for range 3 {
			s, err := m.Create(context.Background(), SessionOptions{})
			require.NoError(t, err)
			require.NoError(t, s.Close(context.Background()))
		}
		assert.Equal(t, began, time.Now(), "handed out without waiting for a start")

		// The claims leave the window: the target falls back to min, and
		// the surplus is retired once it has waited idle.
		time.Sleep(demandWindow)
		synctest.Wait()
		st = m.Pools()[0]
		assert.Equal(t, 1, st.Size, "no demand: back to min")
		assert.Greater(t, st.Ready, 1, "not idle long enough yet to be retired")
		time.Sleep(idle)
		synctest.Wait()
		assert.Equal(t, 1, m.Pools()[0].Ready, "shrunk back to min")

		for s := range sessions {
			require.NoError(t, s.Close(context.Background()))
		}
		synctest.Wait()
		assert.Empty(t, m.List())
		assert.Equal(t, 1, rt.count(), "only the pool's one sandbox is left in the runtime")

		// A burst whose demand × refill latency passes max grows it to max only.
		p := m.pools[m.Pools()[0].Key]
		for range 60 {
			p.claimed()
		}
		p.signal() // as a take does
		synctest.Wait()
		assert.Equal(t, 6, m.Pools()[0].Size, "capped at max")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 6, m.Pools()[0].Ready)
		assert.Equal(t, 6, rt.count())
	})
}

// With Max equal to Size (or unset) the pool keeps a fixed size, whatever
// the demand.
func TestPoolFixedSizeIgnoresDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = time.Second
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 2}}, MaxConcurrentStarts: 8})
		time.Sleep(time.Second)
		synctest.Wait()
		for range 20 {
			s, err := m.Create(context.Background(), SessionOptions{})
			require.NoError(t, err)
			require.NoError(t, s.Close(context.Background()))
		}
		time.Sleep(5 * time.Second)
		synctest.Wait()
		assert.Equal(t, PoolStat{Key: m.Pools()[0].Key, Image: "test-image", Size: 2, Min: 2, Max: 2, Ready: 2}, m.Pools()[0])
		assert.Equal(t, 2, rt.count())
	})
}

// Invalid bounds are refused, each named.
func TestPoolOptionsValidated(t *testing.T) {
	_, err := NewManager(context.Background(), newFakeRuntime(t), ManagerOptions{Defaults: SessionOptions{Image: "i"},
		Pools: []PoolOptions{{Size: 3, Max: 2}, {Size: 1, Idle: -time.Second}}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "pools[0].max: 2 is below the size (min) 3")
	assert.Contains(t, err.Error(), "pools[1].idle: -1s is negative")
}

// While claims are recent and the pool holds its reserve, refills wait;
// once the claims stop for refillQuiet, what the pool lacks starts at once
// (decision 0037).
func TestPoolDefersRefillsWhileClaimsAreRecent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = time.Second
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 8}}, MaxConcurrentStarts: 8})
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, 8, m.Pools()[0].Ready)
		require.EqualValues(t, 8, rt.starts.Load())

		// Three hand-outs 100 ms apart: 0.3 claims/s × 1 s per refill
		// makes a reserve of 2, which the 5 left cover.
		var last time.Time
		for i := range 3 {
			if i > 0 {
				time.Sleep(100 * time.Millisecond)
			}
			s, err := m.Create(context.Background(), SessionOptions{})
			require.NoError(t, err)
			last = time.Now()
			assert.Equal(t, "hi", echo(t, s, "hi"))
			synctest.Wait()
			assert.EqualValues(t, 8, rt.starts.Load(), "no refill while claims are recent (hand-out %d)", i+1)
		}
		st := m.Pools()[0]
		assert.Equal(t, 5, st.Ready)
		assert.Equal(t, 0, st.Starting)

		time.Sleep(refillQuiet - time.Millisecond - time.Since(last))
		synctest.Wait()
		assert.EqualValues(t, 8, rt.starts.Load(), "still within refillQuiet of the last claim")
		time.Sleep(time.Millisecond)
		synctest.Wait()
		assert.Equal(t, 3, m.Pools()[0].Starting, "the three refills start together once claims stopped")
		time.Sleep(time.Second)
		synctest.Wait()
		assert.Equal(t, 8, m.Pools()[0].Ready)
		assert.EqualValues(t, 11, rt.starts.Load())
	})
}

// A pool that falls below its reserve while claims go on starts what the
// reserve lacks at once, and the rest once the claims stop.
func TestPoolRefillsBelowReserveAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = 3 * time.Second
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 4}}, MaxConcurrentStarts: 8})
		time.Sleep(3 * time.Second)
		synctest.Wait()
		require.Equal(t, 4, m.Pools()[0].Ready)

		// The reserve is 2 (0.3 claims/s × a refill latency of about 2.4 s,
		// rounded up, plus one): the third hand-out leaves 1.
		for range 2 {
			_, err := m.Create(context.Background(), SessionOptions{})
			require.NoError(t, err)
			synctest.Wait()
			assert.Equal(t, 0, m.Pools()[0].Starting, "the reserve holds: deferred")
		}
		_, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		synctest.Wait()
		st := m.Pools()[0]
		assert.Equal(t, 1, st.Ready)
		assert.Equal(t, 1, st.Starting, "only what the reserve lacks starts while claims are recent")

		// A fourth hand-out empties it: one more keeps the reserve covered.
		_, err = m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		synctest.Wait()
		assert.Equal(t, 2, m.Pools()[0].Starting)

		time.Sleep(refillQuiet)
		synctest.Wait()
		assert.Equal(t, 4, m.Pools()[0].Starting, "the rest once the claims stopped")
		time.Sleep(3 * time.Second)
		synctest.Wait()
		assert.Equal(t, 4, m.Pools()[0].Ready)
		assert.Equal(t, 8, rt.count(), "four handed out, four pooled: nothing more")
	})
}

// A sandbox is pooled only after its warm-up call answered; one whose
// warm-up fails (its container died) is removed and replaced after the
// backoff, never handed out.
func TestPoolWarmsUpBeforePooling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		rt.startWait = time.Second
		warm := &warmCall{tool: "echo", args: json.RawMessage(`{"text":"w","sleep_ms":500}`)}
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 1}}, warmUp: warm})
		time.Sleep(time.Second + 100*time.Millisecond)
		synctest.Wait()
		assert.Equal(t, PoolStat{Key: m.Pools()[0].Key, Image: "test-image", Size: 1, Min: 1, Max: 1, Starting: 1}, m.Pools()[0],
			"started, still warming up")
		rt.mu.Lock()
		var first string
		for id := range rt.boxes {
			first = id
		}
		rt.mu.Unlock()
		require.NotEmpty(t, first)
		rt.kill(first)
		synctest.Wait()
		assert.Equal(t, 0, m.Pools()[0].Ready, "a sandbox whose warm-up failed is not pooled")
		assert.Equal(t, 0, rt.count(), "and is removed")

		time.Sleep(time.Second) // the backoff after a failed start
		synctest.Wait()
		time.Sleep(time.Second + 500*time.Millisecond)
		synctest.Wait()
		require.Equal(t, 1, m.Pools()[0].Ready)
		s, err := m.Create(context.Background(), SessionOptions{})
		require.NoError(t, err)
		assert.NotEqual(t, first, s.ID())
		assert.Equal(t, "hi", echo(t, s, "hi"))
	})
}

// The default warm-up call names a tool the fake's toolset lacks: a
// toolset without it has nothing to warm, and the sandbox is pooled.
func TestPoolWarmUpWithoutTheToolPools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 2}}})
		synctest.Wait()
		require.Equal(t, defaultWarmUp, m.opts.warmUp)
		assert.Equal(t, 2, m.Pools()[0].Ready)
		assert.EqualValues(t, 2, rt.starts.Load(), "no start failed")
	})
}

// The reserve's arithmetic: while claims are recent, what brings ready and
// starting up to 1 + ⌈rate × refill latency⌉; everything once they stop.
func TestPoolRefillsArithmetic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		p := &pool{startCost: 2 * time.Second}
		n, wait := p.refillsLocked(now, 5)
		assert.Equal(t, 5, n, "no claim: all at once")
		assert.Equal(t, time.Hour, wait)

		for range 10 { // 1 claim/s × 2 s: reserve 3
			p.claims = appendClaim(p.claims, now)
		}
		p.ready = make([]pooled, 1)
		p.starting = 1
		n, wait = p.refillsLocked(now.Add(300*time.Millisecond), 5)
		assert.Equal(t, 1, n, "3 - 1 ready - 1 starting")
		assert.Equal(t, refillQuiet-300*time.Millisecond, wait, "looks again when the claims have stopped for refillQuiet")
		p.ready = make([]pooled, 4)
		n, _ = p.refillsLocked(now.Add(300*time.Millisecond), 5)
		assert.Zero(t, n, "the reserve holds: deferred")
		n, wait = p.refillsLocked(now.Add(refillQuiet), 5)
		assert.Equal(t, 5, n, "quiet: all at once")
		assert.Equal(t, time.Hour, wait)
		n, _ = p.refillsLocked(now.Add(demandWindow), 2)
		assert.Equal(t, 2, n)
		assert.Empty(t, p.claims, "claims older than the window are forgotten")
	})
}

// Claims wait for hand-outs to pause: hand-outs every 100 ms claim nothing
// until claimMaxWait after the first (then those queued), and the rest
// once they pause for claimQuiet. A claim still queued at Shutdown lands
// before Shutdown returns.
func TestClaimsWaitForAPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{{Size: 40}}, MaxConcurrentStarts: 40})
		synctest.Wait()
		pooled := func() (n int) {
			rt.mu.Lock()
			defer rt.mu.Unlock()
			for _, b := range rt.boxes {
				if b.pooled {
					n++
				}
			}
			return n
		}
		var got []*Session
		create := func() {
			s, err := m.Create(context.Background(), SessionOptions{})
			require.NoError(t, err)
			got = append(got, s)
		}
		start := time.Now()
		for time.Since(start) < claimMaxWait-claimQuiet {
			create()
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		n := len(got)
		ready := m.Pools()[0].Ready
		assert.Equal(t, ready+n, pooled(), "no claim while hand-outs go on")
		for range 5 {
			create()
			time.Sleep(100 * time.Millisecond)
			synctest.Wait()
		}
		assert.Less(t, pooled(), m.Pools()[0].Ready+len(got), "claimMaxWait: the queued claims ran")
		time.Sleep(claimQuiet)
		synctest.Wait()
		for _, s := range got {
			rt.mu.Lock()
			assert.False(t, rt.boxes[s.ID()].pooled, "claimed once hand-outs paused")
			rt.mu.Unlock()
		}

		// Queued at Shutdown (keeping sessions, as a restart does): claimed
		// before it returns.
		create()
		last := got[len(got)-1]
		require.NoError(t, m.Shutdown(context.Background(), true))
		rt.mu.Lock()
		assert.False(t, rt.boxes[last.ID()].pooled, "claimed at Shutdown")
		rt.mu.Unlock()
		rt.stopAll() // the kept sandboxes
	})
}

// A warm pool hands its sandboxes only to its own profile's creates: a
// profile with the same options, or a create naming no profile, starts
// cold. A shared pool serves any create of its options.
func TestPoolServesOnlyItsProfile(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rt := newFakeRuntime(t)
		lent := SessionOptions{Env: map[string]string{"L": "1"}}
		m := newTestManager(t, rt, ManagerOptions{Pools: []PoolOptions{
			{Profile: "warm", Size: 1},
			{Profile: "lender", Shared: true, Size: 1, Options: lent},
		}})
		synctest.Wait()
		require.Len(t, m.Pools(), 2)
		pooled := map[string]bool{}
		for _, p := range m.pools {
			p.mu.Lock()
			for _, r := range p.ready {
				pooled[r.s.ID()] = true
			}
			p.mu.Unlock()
		}
		require.Len(t, pooled, 2)
		create := func(o SessionOptions, profile string) *Session {
			t.Helper()
			s, err := m.CreateWith(context.Background(), o, CreateOptions{Profile: profile})
			require.NoError(t, err)
			return s
		}

		assert.False(t, pooled[create(SessionOptions{}, "cold").ID()], "another profile with the same options starts cold")
		assert.False(t, pooled[create(SessionOptions{}, "").ID()], "so does a create naming no profile")
		assert.True(t, pooled[create(SessionOptions{}, "warm").ID()], "the pool's own profile is served")
		assert.True(t, pooled[create(lent, "borrower").ID()], "a shared pool serves any profile of its options")
	})
}
