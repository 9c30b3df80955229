//go:build unix

package skills

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fifoRoot is a root with a valid skill "ok" and a folder "fifo" whose
// SKILL.md is a FIFO no one writes to. Its cleanup opens the FIFO for
// writing, which releases a reader blocked in open (the bug this guards
// against), so that a failing test ends instead of leaking a goroutine.
func fifoRoot(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	writeSkill(t, root, "ok")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "fifo"), 0o755))
	fifo := filepath.Join(root, "fifo", SkillFile)
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	t.Cleanup(func() {
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			_ = f.Close()
		}
	})
	return root
}

// within runs f and fails the test if it has not returned after d: the
// loader must never block on a file (a blocked open ignores SIGTERM).
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s still blocked after %v (a FIFO named %s)", what, d, SkillFile)
	}
}

// TestLoadSkipsFIFO (K8): a FIFO named SKILL.md is skipped with its reason,
// the other skills load, and nothing blocks.
func TestLoadSkipsFIFO(t *testing.T) {
	root := fifoRoot(t)
	var loaded []*Skill
	var skipped []Skipped
	within(t, 10*time.Second, "Load", func() { loaded, skipped = Load(root, "r") })
	assert.Equal(t, []string{"ok"}, paths(loaded))
	require.Len(t, skipped, 1)
	assert.Equal(t, "fifo", skipped[0].Path)
	assert.Contains(t, skipped[0].Reason, "not a regular file")

	within(t, 10*time.Second, "NewLibrary", func() { loaded = NewLibrary(Root{Dir: root}).Skills() })
	assert.Contains(t, paths(loaded), "ok")
}

// TestValidateFIFO (K8): the strict validator reports the FIFO, without
// blocking on it.
func TestValidateFIFO(t *testing.T) {
	root := fifoRoot(t)
	var problems []Problem
	within(t, 10*time.Second, "Validate", func() { problems = Validate(root) })
	require.NotEmpty(t, problems)
	assert.Contains(t, problems[0].String(), "not a regular file")
}
