package api

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/tools/applypatch"
	"github.com/sandboxd/sandboxd/tools/shell"
)

// toolCaller calls a tool of one sandbox and returns its structured output
// (as JSON), whether it is an error, and its text.
type toolCaller func(ctx context.Context, t *testing.T, name string, args map[string]any) (json.RawMessage, bool, string)

func mcpCaller(cs *mcp.ClientSession) toolCaller {
	return func(ctx context.Context, t *testing.T, name string, args map[string]any) (json.RawMessage, bool, string) {
		t.Helper()
		res, text := callResult(ctx, t, cs, name, args)
		b, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		return b, res.IsError, text
	}
}

func wsCaller(s *client.Session) toolCaller {
	return func(ctx context.Context, t *testing.T, name string, args map[string]any) (json.RawMessage, bool, string) {
		t.Helper()
		obs, err := s.Call(ctx, name, args, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		b, err := json.Marshal(obs.Structured)
		if err != nil {
			t.Fatal(err)
		}
		return b, obs.IsError, obs.Text()
	}
}

func runShell(ctx context.Context, t *testing.T, call toolCaller, args map[string]any) shell.Output {
	t.Helper()
	raw, isErr, text := call(ctx, t, shell.Name, args)
	if isErr {
		t.Fatalf("shell %v: %s", args, text)
	}
	var out shell.Output
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("shell output %s: %v", raw, err)
	}
	return out
}

func exitCode(t *testing.T, r shell.CommandOutput) int {
	t.Helper()
	if r.Outcome.Type != shell.OutcomeExit || r.Outcome.ExitCode == nil {
		t.Fatalf("outcome %+v, want an exit", r.Outcome)
	}
	return *r.Outcome.ExitCode
}

func runPatch(ctx context.Context, t *testing.T, call toolCaller, args map[string]any) (applypatch.Output, bool) {
	t.Helper()
	raw, isErr, text := call(ctx, t, applypatch.Name, args)
	var out applypatch.Output
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatalf("apply_patch output %s (%s): %v", raw, text, err)
	}
	return out, isErr
}

// treeSums is every file under the working directory with its sha256 and
// mode, read by the sandbox's own tools.
func treeSums(ctx context.Context, t *testing.T, call toolCaller) string {
	t.Helper()
	out := runShell(ctx, t, call, map[string]any{"commands": []string{
		"find . -type f -exec sha256sum {} + | sort; find . -exec stat -c '%n %a' {} + | sort",
	}})
	if exitCode(t, out.Output[0]) != 0 || out.Output[0].Stderr != "" {
		t.Fatalf("tree sums: %+v", out.Output[0])
	}
	return out.Output[0].Stdout
}

// openaiScenario is the acceptance run against one sandbox of the
// openai tool set, through one API.
func openaiScenario(ctx context.Context, t *testing.T, call toolCaller) {
	// A multi-command call with a timeout in the middle: the commands
	// before it ran, the one after it did not, stdout and stderr apart.
	out := runShell(ctx, t, call, map[string]any{
		"commands":   []string{"mkdir -p proj && cd proj && echo out; echo err >&2", "echo partial; sleep 30", "touch not-run"},
		"timeout_ms": 1500,
	})
	if len(out.Output) != 2 {
		t.Fatalf("%d entries, want 2 (none after the timeout): %+v", len(out.Output), out.Output)
	}
	if r := out.Output[0]; r.Stdout != "out\n" || r.Stderr != "err\n" || exitCode(t, r) != 0 {
		t.Fatalf("first command: %+v", r)
	}
	if r := out.Output[1]; r.Outcome.Type != shell.OutcomeTimeout || r.Stdout != "partial\n" {
		t.Fatalf("second command: %+v", r)
	}
	// cwd persisted (cd proj), the third command never ran, the shell is free.
	out = runShell(ctx, t, call, map[string]any{"commands": []string{"pwd; ls", "sh -c 'exit 4'"}})
	if r := out.Output[0]; r.Stdout != "/workspace/proj\n" || exitCode(t, r) != 0 {
		t.Fatalf("after the timeout: %+v", r)
	}
	if exitCode(t, out.Output[1]) != 4 {
		t.Fatalf("exit 4: %+v", out.Output[1])
	}
	// max_output_length: 0 keeps nothing, 5 keeps five characters.
	out = runShell(ctx, t, call, map[string]any{"commands": []string{"echo 0123456789; echo e >&2"}, "max_output_length": 0})
	if r := out.Output[0]; r.Stdout != "" || r.Stderr != "" || exitCode(t, r) != 0 || out.MaxOutputLength == nil || *out.MaxOutputLength != 0 {
		t.Fatalf("max_output_length 0: %+v", out)
	}
	out = runShell(ctx, t, call, map[string]any{"commands": []string{"echo 0123456789; echo e >&2"}, "max_output_length": 5})
	if r := out.Output[0]; r.Stdout != "01234" || r.Stderr != "" {
		t.Fatalf("max_output_length 5: %+v", r)
	}

	// apply_patch: create, update, move, delete (paths relative to /workspace).
	for _, step := range []struct {
		op   map[string]any
		want string
	}{
		{map[string]any{"type": "create_file", "path": "proj/a.py", "diff": "+def f():\n+    return 1\n"}, "Created proj/a.py"},
		{map[string]any{"type": "update_file", "path": "proj/a.py", "diff": "@@ def f():\n-    return 1\n+    return 2\n"}, "Updated proj/a.py (1 hunk)"},
		{map[string]any{"type": "update_file", "path": "proj/a.py", "move_to": "proj/pkg/b.py", "diff": ""}, "Updated proj/a.py -> proj/pkg/b.py (0 hunks)"},
		{map[string]any{"type": "create_file", "path": "proj/gone.txt", "diff": "+bye\n"}, "Created proj/gone.txt"},
		{map[string]any{"type": "delete_file", "path": "proj/gone.txt"}, "Deleted proj/gone.txt"},
	} {
		res, isErr := runPatch(ctx, t, call, map[string]any{"operation": step.op})
		if isErr || res.Status != applypatch.StatusCompleted || res.Output != step.want {
			t.Fatalf("%v: %+v", step.op, res)
		}
	}
	out = runShell(ctx, t, call, map[string]any{"commands": []string{"cat pkg/b.py; ls"}})
	if got := out.Output[0].Stdout; got != "def f():\n    return 2\npkg\n" {
		t.Fatalf("after the operations: %q", got)
	}

	// A failed patch of several files leaves the tree byte-identical.
	before := treeSums(ctx, t, call)
	res, isErr := runPatch(ctx, t, call, map[string]any{"patch": `*** Begin Patch
*** Add File: proj/new/c.txt
+c
*** Delete File: proj/pkg/b.py
*** Update File: proj/pkg/missing-context.py
@@
-nothing
+here
*** End Patch`})
	if !isErr || res.Status != applypatch.StatusFailed || !strings.Contains(res.Output, "does not exist") {
		t.Fatalf("a patch on a missing file: %+v", res)
	}
	if after := treeSums(ctx, t, call); after != before {
		t.Fatalf("a failed patch changed the tree:\nbefore\n%s\nafter\n%s", before, after)
	}
	runShell(ctx, t, call, map[string]any{"commands": []string{"printf 'x = 1\\r\\ny = 2\\r\\n' > pkg/crlf.py"}})
	before = treeSums(ctx, t, call)
	res, isErr = runPatch(ctx, t, call, map[string]any{"patch": `*** Begin Patch
*** Add File: proj/new/c.txt
+c
*** Delete File: proj/pkg/b.py
*** Update File: proj/pkg/crlf.py
@@
 x = 1
-y = 3
+y = 4
*** End Patch`})
	if !isErr || res.Status != applypatch.StatusFailed || !strings.Contains(res.Output, "proj/pkg/crlf.py: hunk 1: Invalid Context") || !strings.Contains(res.Output, "\nx = 1\ny = 3") {
		t.Fatalf("failed patch: %+v", res)
	}
	if after := treeSums(ctx, t, call); after != before {
		t.Fatalf("a failed patch changed the tree:\nbefore\n%s\nafter\n%s", before, after)
	}
	// The same patch, right: every file changes, CRLF kept.
	res, isErr = runPatch(ctx, t, call, map[string]any{"patch": `*** Begin Patch
*** Add File: proj/new/c.txt
+c
*** Delete File: proj/pkg/b.py
*** Update File: proj/pkg/crlf.py
@@
 x = 1
-y = 2
+y = 4
*** End Patch`})
	if isErr || res.Status != applypatch.StatusCompleted || len(res.Files) != 3 {
		t.Fatalf("patch: %+v", res)
	}
	out = runShell(ctx, t, call, map[string]any{"commands": []string{"tr '\\r' R < pkg/crlf.py; cat new/c.txt; ls pkg"}})
	if got := out.Output[0].Stdout; got != "x = 1R\ny = 4R\nc\ncrlf.py\n" {
		t.Fatalf("after the patch: %q", got)
	}
	// Absolute paths outside the working directory are refused.
	if res, isErr := runPatch(ctx, t, call, map[string]any{"operation": map[string]any{"type": "create_file", "path": "/tmp/x", "diff": "+x\n"}}); !isErr || !strings.Contains(res.Output, "NEVER ABSOLUTE") {
		t.Fatalf("absolute path: %+v", res)
	}
}

// openaiConfig is a config whose profile "openai" serves the openai tool
// set and "both" both sets.
func openaiConfig(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf("profiles:\n  openai:\n    image: %[1]s\n    tool_set: openai\n  both:\n    image: %[1]s\n    tool_set: both\n", testImage)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// OpenAI's shell and apply_patch contracts through a real MCP client on
// /mcp/openai (a profile with tool_set: openai) and through the WebSocket
// client (session.create with tool_set), on real sandboxes; the default
// endpoint keeps today's four tools, and "both" shares the shell and the
// undo history between the two contracts.
func TestOpenAIToolSets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	state := t.TempDir()
	serve := startServe(t, state, "--config", openaiConfig(t))
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	base := "http" + strings.TrimSuffix(strings.TrimPrefix(serve.url, "ws"), "/v1/ws")

	toolNames := func(cs *mcp.ClientSession) []string {
		res, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, tl := range res.Tools {
			names = append(names, tl.Name)
		}
		return names
	}
	def, err := mcpConnectPath(ctx, base, "/mcp", token, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	if got := toolNames(def); !slices.Equal(got, []string{"terminal", "file_editor", "grep", "glob"}) {
		t.Fatalf("/mcp lists %v, want today's four", got)
	}
	_ = def.Close()

	t.Run("mcp", func(t *testing.T) {
		cs, err := mcpConnectPath(ctx, base, "/mcp/openai", token, "2025-11-25")
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		if got := toolNames(cs); !slices.Equal(got, []string{"shell", "apply_patch", "grep", "glob"}) {
			t.Fatalf("/mcp/openai lists %v", got)
		}
		openaiScenario(ctx, t, mcpCaller(cs))
	})

	c, err := client.Dial(ctx, serve.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Run("websocket", func(t *testing.T) {
		s, err := c.CreateSession(ctx, client.CreateOptions{ToolSet: "openai"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		var names []string
		for _, d := range s.Tools {
			names = append(names, d.Name)
		}
		if !slices.Equal(names, []string{"shell", "apply_patch", "grep", "glob"}) {
			t.Fatalf("session.create tools %v", names)
		}
		openaiScenario(ctx, t, wsCaller(s))

		// The typed calls of the Go client.
		out, err := s.Shell(ctx, shell.Action{Commands: []string{"cd /workspace && echo typed"}})
		if err != nil || len(out.Output) != 1 || out.Output[0].Stdout != "typed\n" {
			t.Fatalf("Shell: %+v %v", out, err)
		}
		diff := "+typed\n"
		res, err := s.ApplyPatch(ctx, applypatch.Operation{Type: applypatch.OpCreate, Path: "typed.txt", Diff: &diff})
		if err != nil || res.Status != applypatch.StatusCompleted {
			t.Fatalf("ApplyPatch: %+v %v", res, err)
		}
		res, err = s.ApplyPatchText(ctx, "*** Begin Patch\n*** Update File: typed.txt\n@@\n-typed\n+retyped\n*** End Patch\n")
		if err != nil || res.Status != applypatch.StatusCompleted {
			t.Fatalf("ApplyPatchText: %+v %v", res, err)
		}
		res, err = s.ApplyPatchText(ctx, "*** Begin Patch\n*** Update File: typed.txt\n@@\n-absent\n+x\n*** End Patch\n")
		if err != nil || res.Status != applypatch.StatusFailed || !strings.Contains(res.Output, "Invalid Context") {
			t.Fatalf("ApplyPatchText, failing: %+v %v", res, err)
		}
		if _, err := s.Shell(ctx, shell.Action{}); err == nil {
			t.Fatal("Shell without commands: no error")
		}
		if _, err := c.CreateSession(ctx, client.CreateOptions{ToolSet: "codex"}); err == nil || !strings.Contains(err.Error(), "tool_set") {
			t.Fatalf("tool_set codex: %v", err)
		}
	})

	t.Run("both", func(t *testing.T) {
		s, err := c.CreateSession(ctx, client.CreateOptions{Profile: "both"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close(ctx)
		var names []string
		for _, d := range s.Tools {
			names = append(names, d.Name)
		}
		if !slices.Equal(names, []string{"terminal", "shell", "file_editor", "apply_patch", "grep", "glob"}) {
			t.Fatalf("both: tools %v", names)
		}
		call := wsCaller(s)
		// One shell: the terminal's cd is the shell tool's cwd.
		if _, isErr, text := call(ctx, t, "terminal", map[string]any{"command": "mkdir -p /workspace/d && cd /workspace/d && echo hi > f.txt"}); isErr {
			t.Fatal(text)
		}
		if out := runShell(ctx, t, call, map[string]any{"commands": []string{"pwd"}}); out.Output[0].Stdout != "/workspace/d\n" {
			t.Fatalf("shell's cwd: %+v", out)
		}
		// One undo history: file_editor undoes apply_patch's edit.
		if res, isErr := runPatch(ctx, t, call, map[string]any{"operation": map[string]any{"type": "update_file", "path": "d/f.txt", "diff": "@@\n-hi\n+ho\n"}}); isErr {
			t.Fatalf("%+v", res)
		}
		if _, isErr, text := call(ctx, t, "file_editor", map[string]any{"command": "undo_edit", "path": "/workspace/d/f.txt"}); isErr {
			t.Fatal(text)
		}
		if out := runShell(ctx, t, call, map[string]any{"commands": []string{"cat f.txt"}}); out.Output[0].Stdout != "hi\n" {
			t.Fatalf("after undo_edit: %+v", out)
		}
	})
}
