package agent

import (
	"bytes"
	"os"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSpareThreadsFollowPidsLimit(t *testing.T) {
	for limit, want := range map[int]int{0: 16, 4096: 16, 512: 16, 128: 16, 64: 8, 32: 4, 8: 2} {
		assert.Equal(t, want, spareThreads(limit), "pids limit %d", limit)
	}
}

// The reserved threads exist at once and stay (as idle threads) after the
// reservation returns.
func TestReserveThreadsLeavesThreads(t *testing.T) {
	before := osThreads(t)
	n := before + 8
	require.Equal(t, n, reserveThreads(n))
	assert.GreaterOrEqual(t, osThreads(t), n)
}

func osThreads(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status:", err)
	}
	_, rest, ok := bytes.Cut(b, []byte("\nThreads:"))
	require.True(t, ok)
	line, _, _ := bytes.Cut(rest, []byte("\n"))
	n, err := strconv.Atoi(string(bytes.TrimSpace(line)))
	require.NoError(t, err)
	return n
}
