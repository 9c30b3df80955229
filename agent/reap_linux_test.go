package agent

import (
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadPPid(t *testing.T) {
	pid, ppid, ok := readPPid(fmt.Sprintf("/proc/%d/stat", os.Getpid()))
	require.True(t, ok)
	assert.Equal(t, os.Getpid(), pid)
	assert.Equal(t, os.Getppid(), ppid)

	// comm may hold spaces and parentheses.
	f := t.TempDir() + "/stat"
	require.NoError(t, os.WriteFile(f, []byte("42 (a) b (c) S 7 42 42 0"), 0o600))
	pid, ppid, ok = readPPid(f)
	require.True(t, ok)
	assert.Equal(t, [2]int{42, 7}, [2]int{pid, ppid})
}

func TestDescends(t *testing.T) {
	parent := map[int]int{10: 1, 11: 10, 12: 11, 20: 1, 30: 31, 31: 30}
	assert.True(t, descends(11, 10, parent))
	assert.True(t, descends(12, 10, parent))
	assert.False(t, descends(20, 10, parent))
	assert.False(t, descends(30, 10, parent), "a pid loop in a racy snapshot ends")

	// An agent that is pid 1 (no init in front of it) has children too.
	asInit := map[int]int{1: 0, 5: 1, 6: 5}
	assert.True(t, descends(5, 1, asInit))
	assert.True(t, descends(6, 1, asInit))
}
