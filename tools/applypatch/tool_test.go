package applypatch

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/fileeditor"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// session builds apply_patch and file_editor sharing one executor, as the
// factory does with file_editor: true, in a fresh working directory.
func session(t *testing.T) (string, *tools.Toolset) {
	t.Helper()
	dir := t.TempDir()
	made, err := Factory(tools.Env{Workspace: dir, Dir: dir}, json.RawMessage(`{"file_editor": true}`))
	require.NoError(t, err)
	ts, err := tools.NewToolset(made...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ts.Close() })
	return dir, ts
}

func callTool(t *testing.T, ts *tools.Toolset, name string, args any) *tools.Observation {
	t.Helper()
	raw, err := json.Marshal(args)
	require.NoError(t, err)
	obs, err := ts.Call(context.Background(), name, raw)
	require.NoError(t, err)
	return obs
}

func patch(t *testing.T, ts *tools.Toolset, p string) *tools.Observation {
	t.Helper()
	return callTool(t, ts, Name, map[string]any{"patch": p})
}

func op(t *testing.T, ts *tools.Toolset, o map[string]any) *tools.Observation {
	t.Helper()
	return callTool(t, ts, Name, map[string]any{"operation": o})
}

func write(t *testing.T, dir, name, content string, mode fs.FileMode) {
	t.Helper()
	p := filepath.Join(dir, name)
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(content), mode))
	require.NoError(t, os.Chmod(p, mode))
}

func read(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name))
	require.NoError(t, err)
	return string(b)
}

// tree is every file under dir with the sha256 of its bytes and its mode.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	require.NoError(t, filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		require.NoError(t, err)
		fi, err := d.Info()
		require.NoError(t, err)
		if d.IsDir() {
			out = append(out, p+"/ "+fi.Mode().String())
			return nil
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		out = append(out, fmt.Sprintf("%s %s %x", p, fi.Mode(), sha256.Sum256(b)))
		return nil
	}))
	sort.Strings(out)
	return out
}

func status(t *testing.T, obs *tools.Observation) Output {
	t.Helper()
	out, ok := obs.Structured.(Output)
	require.True(t, ok, "structured output %T", obs.Structured)
	require.Equal(t, out.Output, obs.Text())
	return out
}

func TestOperationsCreateUpdateMoveDelete(t *testing.T) {
	dir, ts := session(t)
	obs := op(t, ts, map[string]any{"type": "create_file", "path": "pkg/new.txt", "diff": "+hello\n+world\n"})
	require.False(t, obs.IsError, obs.Text())
	require.Equal(t, StatusCompleted, status(t, obs).Status)
	require.Equal(t, "Created pkg/new.txt", obs.Text())
	require.Equal(t, "hello\nworld\n", read(t, dir, "pkg/new.txt"))

	obs = op(t, ts, map[string]any{"type": "update_file", "path": "pkg/new.txt", "diff": "@@\n hello\n-world\n+there\n"})
	require.False(t, obs.IsError, obs.Text())
	require.Equal(t, "Updated pkg/new.txt (1 hunk)", obs.Text())
	require.Equal(t, "hello\nthere\n", read(t, dir, "pkg/new.txt"))

	obs = op(t, ts, map[string]any{"type": "update_file", "path": "pkg/new.txt", "move_to": "moved/renamed.txt", "diff": "@@\n-hello\n+hi\n"})
	require.False(t, obs.IsError, obs.Text())
	require.Equal(t, "hi\nthere\n", read(t, dir, "moved/renamed.txt"))
	require.NoFileExists(t, filepath.Join(dir, "pkg/new.txt"))
	out := status(t, obs)
	require.Equal(t, filepath.Join(dir, "moved/renamed.txt"), out.Files[0].MoveTo)

	obs = op(t, ts, map[string]any{"type": "delete_file", "path": "moved/renamed.txt"})
	require.False(t, obs.IsError, obs.Text())
	require.Equal(t, "Deleted moved/renamed.txt", obs.Text())
	require.NoFileExists(t, filepath.Join(dir, "moved/renamed.txt"))
}

func TestEnvelopeSeveralFiles(t *testing.T) {
	dir, ts := session(t)
	write(t, dir, "src/app.py", "def greet():\n    print(\"Hi\")\n", 0o644)
	write(t, dir, "obsolete.txt", "old\n", 0o644)
	obs := patch(t, ts, `*** Begin Patch
*** Add File: hello.txt
+Hello world
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
-    print("Hi")
+    print("Hello, world!")
*** Delete File: obsolete.txt
*** End Patch`)
	require.False(t, obs.IsError, obs.Text())
	require.Equal(t, "Created hello.txt\nUpdated src/app.py -> src/main.py (1 hunk)\nDeleted obsolete.txt", obs.Text())
	require.Equal(t, "Hello world\n", read(t, dir, "hello.txt"))
	require.Equal(t, "def greet():\n    print(\"Hello, world!\")\n", read(t, dir, "src/main.py"))
	require.NoFileExists(t, filepath.Join(dir, "src/app.py"))
	require.NoFileExists(t, filepath.Join(dir, "obsolete.txt"))
}

func TestEnvelopeLastFileFailsNothingWritten(t *testing.T) {
	dir, ts := session(t)
	write(t, dir, "a.txt", "alpha\nbeta\n", 0o644)
	write(t, dir, "b.txt", "gamma\ndelta\n", 0o600)
	write(t, dir, "gone.txt", "bye\n", 0o644)
	before := tree(t, dir)
	obs := patch(t, ts, `*** Begin Patch
*** Add File: sub/dir/new.txt
+new
*** Update File: a.txt
@@
-alpha
+ALPHA
*** Delete File: gone.txt
*** Update File: b.txt
*** Move to: c.txt
@@
 gamma
-epsilon
+EPSILON
*** End Patch`)
	require.True(t, obs.IsError)
	out := status(t, obs)
	require.Equal(t, StatusFailed, out.Status)
	require.Empty(t, out.Files)
	require.Contains(t, obs.Text(), "b.txt: hunk 1: Invalid Context")
	require.Contains(t, obs.Text(), "\ngamma\nepsilon")
	require.Equal(t, before, tree(t, dir), "no file, directory or mode changed")
}

func TestFailedWriteRollsBack(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into read-only directories")
	}
	dir, ts := session(t)
	write(t, dir, "a.txt", "alpha\n", 0o644)
	write(t, dir, "ro/b.txt", "beta\n", 0o644)
	require.NoError(t, os.Chmod(filepath.Join(dir, "ro"), 0o555))
	t.Cleanup(func() { _ = os.Chmod(filepath.Join(dir, "ro"), 0o755) })
	before := tree(t, dir)
	obs := patch(t, ts, "*** Begin Patch\n*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n*** Delete File: ro/b.txt\n*** End Patch")
	require.True(t, obs.IsError, obs.Text())
	require.Contains(t, obs.Text(), "not writable")
	require.Equal(t, before, tree(t, dir))
}

func TestUndoEditRevertsPatchFileByFile(t *testing.T) {
	dir, ts := session(t)
	write(t, dir, "a.txt", "one\n", 0o644)
	write(t, dir, "b.txt", "two\n", 0o644)
	obs := patch(t, ts, "*** Begin Patch\n*** Update File: a.txt\n@@\n-one\n+ONE\n*** Update File: b.txt\n*** Move to: c.txt\n@@\n-two\n+TWO\n*** Add File: d.txt\n+four\n*** End Patch")
	require.False(t, obs.IsError, obs.Text())
	undo := func(name string) *tools.Observation {
		return callTool(t, ts, fileeditor.Name, map[string]any{"command": "undo_edit", "path": filepath.Join(dir, name)})
	}
	require.False(t, undo("a.txt").IsError)
	require.Equal(t, "one\n", read(t, dir, "a.txt"))
	require.Equal(t, "TWO\n", read(t, dir, "c.txt"), "other files stay patched")
	require.False(t, undo("b.txt").IsError, "the move's source comes back")
	require.Equal(t, "two\n", read(t, dir, "b.txt"))
	require.False(t, undo("c.txt").IsError, "the move's target goes")
	require.NoFileExists(t, filepath.Join(dir, "c.txt"))
	require.False(t, undo("d.txt").IsError)
	require.NoFileExists(t, filepath.Join(dir, "d.txt"))
	require.True(t, undo("a.txt").IsError, "one snapshot per file and patch")
}

func TestKeepsEncodingLineEndingsAndMode(t *testing.T) {
	dir, ts := session(t)
	// Latin-1 (é is 0xE9), CRLF, executable.
	write(t, dir, "run.sh", "#!/bin/sh\r\necho caf\xe9\r\nexit 0\r\n", 0o751)
	obs := patch(t, ts, "*** Begin Patch\n*** Update File: run.sh\n*** Move to: bin/run2.sh\n@@\n echo café\n-exit 0\n+exit 3\n*** End Patch")
	require.False(t, obs.IsError, obs.Text())
	require.Equal(t, "#!/bin/sh\r\necho caf\xe9\r\nexit 3\r\n", read(t, dir, "bin/run2.sh"))
	fi, err := os.Stat(filepath.Join(dir, "bin/run2.sh"))
	require.NoError(t, err)
	require.Equal(t, fs.FileMode(0o751), fi.Mode().Perm())
}

func TestPaths(t *testing.T) {
	dir, ts := session(t)
	write(t, dir, "a.txt", "x\n", 0o644)
	for _, p := range []string{"/etc/passwd", "../escape.txt", "a/../../x", "."} {
		obs := op(t, ts, map[string]any{"type": "create_file", "path": p, "diff": "+x\n"})
		require.True(t, obs.IsError, p)
		require.Contains(t, obs.Text(), "NEVER ABSOLUTE", p)
	}
	// An absolute path inside the working directory is taken.
	obs := op(t, ts, map[string]any{"type": "update_file", "path": filepath.Join(dir, "a.txt"), "diff": "@@\n-x\n+y\n"})
	require.False(t, obs.IsError, obs.Text())
	require.Equal(t, "y\n", read(t, dir, "a.txt"))
}

func TestRefusals(t *testing.T) {
	dir, ts := session(t)
	write(t, dir, "a.txt", "x\n", 0o644)
	write(t, dir, "b.txt", "y\n", 0o644)
	for _, tc := range []struct {
		args map[string]any
		want string
	}{
		{map[string]any{}, "Give operation"},
		{map[string]any{"patch": "*** Begin Patch\n*** Delete File: a.txt\n*** End Patch", "operation": map[string]any{"type": "delete_file", "path": "a.txt"}}, "not both"},
		{map[string]any{"patch": "nope"}, "Invalid patch"},
		{map[string]any{"operation": map[string]any{"type": "update_file", "path": "missing.txt", "diff": "@@\n+x\n"}}, "does not exist"},
		{map[string]any{"operation": map[string]any{"type": "delete_file", "path": "missing.txt"}}, "does not exist"},
		{map[string]any{"operation": map[string]any{"type": "update_file", "path": "a.txt", "move_to": "b.txt", "diff": "@@\n-x\n+z\n"}}, "already exists"},
		{map[string]any{"patch": "*** Begin Patch\n*** Delete File: a.txt\n*** Add File: a.txt\n+q\n*** End Patch"}, "touches"},
		{map[string]any{"operation": map[string]any{"type": "create_file", "path": "c.txt", "diff": "no plus\n"}}, "Invalid Add File Line"},
		{map[string]any{"operation": map[string]any{"type": "move_file", "path": "a.txt"}}, "Invalid arguments"},
	} {
		obs := callTool(t, ts, Name, tc.args)
		require.True(t, obs.IsError, "%v", tc.args)
		require.Contains(t, obs.Text(), tc.want, "%v", tc.args)
	}
	require.Equal(t, "x\n", read(t, dir, "a.txt"))
	require.Equal(t, "y\n", read(t, dir, "b.txt"))
}

func TestBinaryFileRefused(t *testing.T) {
	dir, ts := session(t)
	write(t, dir, "bin.dat", "\x00\x01\x02\x00", 0o644)
	obs := op(t, ts, map[string]any{"type": "update_file", "path": "bin.dat", "diff": "@@\n+x\n"})
	require.True(t, obs.IsError)
	require.Contains(t, obs.Text(), "binary")
	// Deleting one needs no decoding.
	obs = op(t, ts, map[string]any{"type": "delete_file", "path": "bin.dat"})
	require.False(t, obs.IsError, obs.Text())
}

func TestDefinition(t *testing.T) {
	d := Definition("/workspace")
	require.Equal(t, Name, d.Name)
	require.Contains(t, d.Description, "NEVER ABSOLUTE")
	require.Contains(t, d.Description, "/workspace")
	b, err := json.Marshal(d.InputSchema)
	require.NoError(t, err)
	require.Contains(t, string(b), `"create_file"`)
	_, err = Factory(tools.Env{Workspace: "relative"}, nil)
	require.Error(t, err)
	_, err = Factory(tools.Env{Workspace: "/w"}, json.RawMessage(`{"bogus": 1}`))
	require.Error(t, err)
}
