package walk

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWalkHidden(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{
		"a.go": "", ".env": "", ".github/workflows/ci.yml": "", "src/.cache/x": "", "src/b.go": "",
		".git/config": "",
	})
	cases := []struct {
		name string
		opts Options
		want []string
	}{
		{"default skips hidden", Options{}, []string{"a.go", "src/b.go"}},
		{"hidden on keeps all but .git", Options{Hidden: true},
			[]string{".env", ".github/workflows/ci.yml", "a.go", "src/.cache/x", "src/b.go"}},
		{"keep named hidden", Options{KeepHidden: func(name string, _ bool) bool { return name == ".github" }},
			[]string{".github/workflows/ci.yml", "a.go", "src/b.go"}},
		{".git only when kept", Options{KeepHidden: func(name string, _ bool) bool { return name == ".git" }},
			[]string{".git/config", "a.go", "src/b.go"}},
		{"skip dir", Options{SkipDir: func(rel string) bool { return rel == "src" }}, []string{"a.go"}},
		{"one worker", Options{Workers: 1}, []string{"a.go", "src/b.go"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, collect(t, root, c.opts))
		})
	}
}

func TestWalkRootIsAlwaysWalked(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{".hidden/a": "", ".gitignore": "ignored/\n", "ignored/b": ""})
	assert.Equal(t, []string{"a"}, collect(t, filepath.Join(root, ".hidden"), Options{}))
	assert.Equal(t, []string{"b"}, collect(t, filepath.Join(root, "ignored"), Options{}))
}

func TestWalkKeepIgnored(t *testing.T) {
	root := t.TempDir()
	writeTree(t, root, map[string]string{".gitignore": ".env\nnode_modules/\n", ".env": "", "node_modules/x.js": "", "a": ""})
	got := collect(t, root, Options{
		KeepHidden:  func(name string, _ bool) bool { return name == ".env" },
		KeepIgnored: func(name string, _ bool) bool { return name == ".env" || name == "node_modules" },
	})
	assert.Equal(t, []string{".env", "a", "node_modules/x.js"}, got)
}

func TestWalkSymlinks(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	writeTree(t, root, map[string]string{"src/a.go": ""})
	writeTree(t, outside, map[string]string{"target.go": "", "dir/x.go": ""})
	require.NoError(t, os.Symlink("..", filepath.Join(root, "src", "loop")))
	require.NoError(t, os.Symlink(root, filepath.Join(root, "src", "self")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "target.go"), filepath.Join(root, "link.go")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "dir"), filepath.Join(root, "linkdir")))
	require.NoError(t, os.Symlink("missing", filepath.Join(root, "dangling")))
	require.NoError(t, os.Symlink("loopb", filepath.Join(root, "loopa")))
	require.NoError(t, os.Symlink("loopa", filepath.Join(root, "loopb")))

	var symlinked []string
	err := Walk(context.Background(), root, Options{Workers: 1}, func(_ int, e Entry) error {
		if e.Symlink {
			symlinked = append(symlinked, e.Rel)
			fi, err := e.Info()
			require.NoError(t, err)
			assert.True(t, fi.Mode().IsRegular())
		}
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, []string{"link.go"}, symlinked)
	// Directory symlinks (the loops included) are not followed.
	assert.Equal(t, []string{"link.go", "src/a.go"}, collect(t, root, Options{}))
}

func TestWalkBigDirectory(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := map[string]string{}
	var want []string
	for i := range 1000 {
		name := fmt.Sprintf("f%04d", i)
		files["big/"+name] = ""
		want = append(want, "big/"+name)
	}
	writeTree(t, root, files)
	for _, w := range []int{1, 2, 8} {
		assert.Equal(t, want, collect(t, root, Options{Workers: w}), "workers=%d", w)
	}
}

func TestWalkStops(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := map[string]string{}
	for i := range 50 {
		for j := range 20 {
			files[fmt.Sprintf("d%02d/f%02d", i, j)] = ""
		}
	}
	writeTree(t, root, files)

	t.Run("callback error", func(t *testing.T) {
		boom := errors.New("boom")
		var calls atomic.Int32
		err := Walk(context.Background(), root, Options{Workers: 4}, func(int, Entry) error {
			if calls.Add(1) == 10 {
				return boom
			}
			return nil
		})
		require.ErrorIs(t, err, boom)
		assert.Less(t, calls.Load(), int32(1000))
	})
	t.Run("context cancelled during the walk", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var calls atomic.Int32
		err := Walk(ctx, root, Options{Workers: 4}, func(int, Entry) error {
			if calls.Add(1) == 10 {
				cancel()
			}
			return nil
		})
		require.ErrorIs(t, err, context.Canceled)
		assert.Less(t, calls.Load(), int32(1000))
	})
	t.Run("context cancelled before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		err := Walk(ctx, root, Options{}, func(int, Entry) error { return nil })
		assert.ErrorIs(t, err, context.Canceled)
	})
	t.Run("missing root", func(t *testing.T) {
		err := Walk(context.Background(), filepath.Join(root, "nope"), Options{}, func(int, Entry) error { return nil })
		assert.ErrorIs(t, err, os.ErrNotExist)
	})
	t.Run("worker index in range", func(t *testing.T) {
		opts := Options{Workers: 3}
		var bad atomic.Int32
		require.NoError(t, Walk(context.Background(), root, opts, func(w int, _ Entry) error {
			if w < 0 || w >= opts.NumWorkers() {
				bad.Add(1)
			}
			return nil
		}))
		assert.Zero(t, bad.Load())
	})
}

func TestWalkUnreadableDirectory(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads every directory")
	}
	root := t.TempDir()
	writeTree(t, root, map[string]string{"locked/a": "", "b": ""})
	require.NoError(t, os.Chmod(filepath.Join(root, "locked"), 0))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(root, "locked"), 0o755) }) // so TempDir can remove it
	assert.Equal(t, []string{"b"}, collect(t, root, Options{}))
}

func TestSortNewestFirst(t *testing.T) {
	files := []Found{{"b", 1}, {"a", 1}, {"c", 3}, {"d", 2}}
	SortNewestFirst(files)
	assert.Equal(t, []Found{{"c", 3}, {"d", 2}, {"a", 1}, {"b", 1}}, files)
}

func TestResolve(t *testing.T) {
	home, err := os.UserHomeDir()
	require.NoError(t, err)
	cases := []struct{ base, in, want string }{
		{"/ws", "", "/ws"},
		{"/ws", "src", "/ws/src"},
		{"/ws", "./src/../lib/", "/ws/lib"},
		{"/ws", "/abs/x", "/abs/x"},
		{"/ws", "~", home},
		{"/ws", "~/p", filepath.Join(home, "p")},
		{"/ws", "~user", "/ws/~user"},
	}
	for _, c := range cases {
		assert.Equal(t, c.want, Resolve(c.base, c.in), c.in)
	}
}
