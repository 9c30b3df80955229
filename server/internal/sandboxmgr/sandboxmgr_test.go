package sandboxmgr

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/sandboxd/sandboxd/sandbox"
)

// noRuntime is an engine with nothing in it.
type noRuntime struct{}

var errNo = errors.New("not in this test")

func (noRuntime) Start(context.Context, sandbox.Spec) (io.ReadWriteCloser, error) { return nil, errNo }
func (noRuntime) Connect(context.Context, string) (io.ReadWriteCloser, error)     { return nil, errNo }
func (noRuntime) Claim(context.Context, string) error                             { return errNo }
func (noRuntime) Inspect(context.Context, string) (sandbox.Status, error) {
	return sandbox.Status{}, errNo
}
func (noRuntime) List(context.Context) ([]sandbox.Resource, error) { return nil, nil }
func (noRuntime) Remove(context.Context, string) error             { return nil }

// With no session, sandboxd_sessions still reports every live state, at 0.
func TestStatsReportZeroSessions(t *testing.T) {
	m, err := sandbox.NewManager(context.Background(), noRuntime{}, sandbox.ManagerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Shutdown(context.Background(), false) }()
	st := New(m).Stats()
	for _, state := range []string{"starting", "ready", "failed", "closing"} {
		if n, ok := st.SessionsByState[state]; !ok || n != 0 {
			t.Errorf("state %s: %d (reported: %v), want 0", state, n, ok)
		}
	}
}

// sandboxd_pool_target is what the pools aim at (their min with no
// demand); sandboxd_pool_size what they hold ready (none: starts fail here).
func TestStatsReportPoolTarget(t *testing.T) {
	m, err := sandbox.NewManager(context.Background(), noRuntime{}, sandbox.ManagerOptions{
		Logger: slog.New(slog.DiscardHandler),
		Pools:  []sandbox.PoolOptions{{Size: 2, Max: 5}, {Options: sandbox.SessionOptions{Env: map[string]string{"A": "1"}}, Size: 3}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = m.Shutdown(context.Background(), false) }()
	if st := New(m).Stats(); st.PoolTarget != 5 || st.PoolSize != 0 {
		t.Errorf("pool target %d, ready %d: want 5 (2 + 3) and 0", st.PoolTarget, st.PoolSize)
	}
}
