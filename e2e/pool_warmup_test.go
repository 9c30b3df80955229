package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// A pooled sandbox was warmed before it was pooled (decision 0037): its
// shell has run one command before the client's first (the terminal's
// command counter is one ahead of a cold session's), and the warm-up left
// nothing the session can see: no file in the workspace, no history.
func TestWarmPoolSandboxIsWarmedWithoutTrace(t *testing.T) {
	t.Parallel()
	m := newManager(t, newRuntime(t), sandbox.ManagerOptions{Pools: []sandbox.PoolOptions{{Size: 1}}})
	require.Eventually(t, func() bool { return m.Pools()[0].Ready == 1 }, time.Minute, 20*time.Millisecond)

	pooled, err := m.Create(ctxT(t), sandbox.SessionOptions{})
	require.NoError(t, err)
	require.Equal(t, 0, m.Pools()[0].Ready, "handed out from the pool")
	cold, err := m.Create(ctxT(t), sandbox.SessionOptions{Env: map[string]string{"COLD": "1"}})
	require.NoError(t, err)

	const probe = "echo seq=$__sbx_seq; ls -A /workspace | wc -l; history | wc -l"
	fields := func(s *sandbox.Session) []string {
		out := sh(t, s, probe)
		f := strings.Fields(out)
		require.GreaterOrEqual(t, len(f), 3, "output %q", out)
		return f[:3]
	}
	p, c := fields(pooled), fields(cold)
	assert.NotEqual(t, c[0], p[0], "the pooled shell ran the warm-up before the first command")
	var pn, cn int
	_, err = fmt.Sscanf(p[0], "seq=%d", &pn)
	require.NoError(t, err)
	_, err = fmt.Sscanf(c[0], "seq=%d", &cn)
	require.NoError(t, err)
	assert.Equal(t, cn+1, pn, "exactly one warm-up command")
	assert.Equal(t, []string{"0", "0"}, p[1:], "no file in the workspace, no history")
	assert.Equal(t, c[1:], p[1:], "as in a cold session")
	require.NoError(t, cold.Close(ctxT(t)))
	require.NoError(t, pooled.Close(ctxT(t)))
}
