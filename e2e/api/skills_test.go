package api

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/server/auth"
)

// skillParam is a ## Parameters entry of a test skill.
const skillText = "\n## Parameters\n\n### text (required, positional position 0)\n\n**Type**: `str`\n\nThe text.\n"

// testSkills writes a root of skills whose scripts show what they got and
// whose installers count their runs, fail or hang.
func testSkills(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	write := func(rel, content string, mode os.FileMode) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	skill := func(path, front, params, script string) {
		name := filepath.Base(path)
		write(path+"/SKILL.md", "---\nname: "+name+"\ndescription: The "+name+" test skill.\n"+front+"---\n# "+name+"\n\nA test skill.\n"+params, 0o644)
		write(path+"/scripts/run.sh", "#!/bin/bash\n"+script, 0o755)
	}
	skill("touch-file", "", "\n## Parameters\n\n### name (required, positional position 0)\n\n**Type**: `str`\n\nThe file's name.\n",
		`printf 'made by skill\n' > "/workspace/$1" && echo "wrote $1"`)
	skill("echo-args", "", skillText+"\n### --mode (optional, named parameter)\n\n**Type**: `str`\n\nA mode.\n",
		`printf '[%s]\n' "$@"`)
	skill("count-install", "", skillText, `wc -l < "$HOME/install-count"`)
	write("count-install/deps/install.sh", "echo run >> \"$HOME/install-count\"\nsleep 1\n", 0o755)
	skill("bad-install", "", skillText, `echo never`)
	write("bad-install/deps/install.sh", "echo fetching deps\necho 'error: no network here' >&2\nexit 3\n", 0o755)
	skill("hang-install", "metadata:\n  sandboxd.install_timeout: 3s\n", skillText, `echo never`)
	write("hang-install/deps/install.sh", "echo waiting forever\nsleep 1000\n", 0o755)
	skill("json-out", "returns_json: true\n", skillText, `printf '{"ok":true,"got":"%s"}\n' "$1"`)
	skill("extra/not-selected", "", skillText, `echo should not be a tool`)
	return root
}

// skillsConfig has a profile with six skills of root (lazy installers) and
// one whose installer runs before the session is handed out.
func skillsConfig(t *testing.T, root string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	src := fmt.Sprintf(`skills_dirs: [%[2]s]
profiles:
  skilled:
    image: %[1]s
    skills: [touch-file, echo-args, count-install, bad-install, hang-install, json-out]
  eager:
    image: %[1]s
    skills: [count-install]
    skills_install: eager
`, testImage, root)
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func callResult(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return res, b.String()
}

func wantAll(t *testing.T, what, text string, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(text, s) {
			t.Fatalf("%s: %q lacks %q", what, text, s)
		}
	}
}

// Skills through a real MCP client and the WebSocket client, on a real
// sandbox: a profile's skills are tools beside load_skill (and only the
// selected ones), a skill's effect shows in /workspace, an argument is
// data and never shell, ten concurrent first calls run the installer once,
// a failing and a hanging installer give clear errors while the other
// skills work, returns_json is structured content, /skills is read-only,
// stateless clients see a profile's skill tools without a sandbox, and an
// eager profile's installer has run when the session is handed out.
func TestSkillsServe(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	state := t.TempDir()
	root := testSkills(t)
	serve := startServe(t, state, "--config", skillsConfig(t, root))
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	base := "http" + strings.TrimSuffix(strings.TrimPrefix(serve.url, "ws"), "/v1/ws")

	cs, err := mcpConnectPath(ctx, base, "/mcp/skilled", token, "2025-11-25")
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range list.Tools {
		tools[tl.Name] = tl
	}
	for _, want := range []string{"terminal", "file_editor", "load_skill", "touch-file", "echo-args", "count-install", "bad-install", "hang-install", "json-out"} {
		if tools[want] == nil {
			t.Fatalf("tools/list lacks %s: %v", want, names2(tools))
		}
	}
	for _, not := range []string{"not-selected", "run-tests", "repo-summary"} {
		if tools[not] != nil {
			t.Fatalf("tools/list has %s, which the profile does not select", not)
		}
	}
	if !strings.Contains(tools["load_skill"].Description, "touch-file") {
		t.Fatalf("load_skill's catalog lacks touch-file: %s", tools["load_skill"].Description)
	}

	// The effect of a skill, seen in /workspace by the terminal.
	_, out := callResult(ctx, t, cs, "touch-file", map[string]any{"name": "hello.txt"})
	wantAll(t, "touch-file", out, "wrote hello.txt")
	wantAll(t, "cat", mcpText(ctx, t, cs, "terminal", map[string]any{"command": "cat /workspace/hello.txt"}), "made by skill")

	// An argument is one argv element, never shell.
	res, out := callResult(ctx, t, cs, "echo-args", map[string]any{"text": "; rm -rf /workspace", "mode": "$(id)"})
	if res.IsError {
		t.Fatalf("echo-args: %s", out)
	}
	wantAll(t, "echo-args", out, "[; rm -rf /workspace]", "[--mode]", "[$(id)]")
	wantAll(t, "ls", mcpText(ctx, t, cs, "terminal", map[string]any{"command": "ls /workspace"}), "hello.txt")

	// Ten concurrent first calls: the installer runs once, all answer.
	var wg sync.WaitGroup
	errs := make(chan string, 10)
	for range 10 {
		wg.Go(func() {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "count-install", Arguments: map[string]any{"text": "x"}})
			switch {
			case err != nil:
				errs <- err.Error()
			case res.IsError:
				errs <- fmt.Sprintf("is_error: %v", res.Content)
			}
		})
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Errorf("count-install: %s", e)
	}
	wantAll(t, "install-count", mcpText(ctx, t, cs, "terminal", map[string]any{"command": `echo "runs=$(wc -l < $HOME/install-count)"`}), "runs=1")

	// A failing and a hanging installer: clear errors; the rest works.
	res, out = callResult(ctx, t, cs, "bad-install", map[string]any{"text": "x"})
	if !res.IsError {
		t.Fatalf("bad-install succeeded: %s", out)
	}
	wantAll(t, "bad-install", out, "bad-install", "deps/install.sh", "3", "error: no network here")
	res, out = callResult(ctx, t, cs, "hang-install", map[string]any{"text": "x"})
	if !res.IsError {
		t.Fatalf("hang-install succeeded: %s", out)
	}
	wantAll(t, "hang-install", out, "hang-install", "deps/install.sh", "timed out")
	res, out = callResult(ctx, t, cs, "json-out", map[string]any{"text": "fine"})
	if res.IsError {
		t.Fatalf("json-out after the failed installers: %s", out)
	}
	if sc, _ := res.StructuredContent.(map[string]any); sc["ok"] != true || sc["got"] != "fine" {
		t.Fatalf("json-out structured content: %#v", res.StructuredContent)
	}

	// load_skill, and /skills as the model sees it: the selected skills,
	// read-only.
	wantAll(t, "load_skill", mcpText(ctx, t, cs, "load_skill", map[string]any{"name": "touch-file"}), "A test skill.", "/skills/touch-file", "scripts/run.sh")
	got := mcpText(ctx, t, cs, "terminal", map[string]any{"command": `ls /skills; touch /skills/touch-file/x 2>&1; echo "exit=$?"`})
	wantAll(t, "/skills", got, "touch-file", "json-out", "Read-only file system", "exit=1")
	if strings.Contains(got, "extra") {
		t.Fatalf("/skills shows a skill the profile does not select: %s", got)
	}

	// Stateless MCP: the profile's skill tools, without a sandbox.
	modern, listed := statelessTools(ctx, t, base, "/mcp/skilled", token, "touch-file", "load_skill", "sandbox_open")
	defer modern.Close()
	wantAll(t, "stateless touch-file schema", string(mustMarshal(t, listed["touch-file"].InputSchema)), `"sandbox"`, `"name"`)

	// WebSocket: skills chosen by the request, an eager profile, and a
	// selection that matches nothing.
	c, err := client.Dial(ctx, serve.url, token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.CreateSession(ctx, client.CreateOptions{Skills: []string{"echo-args"}})
	if err != nil {
		t.Fatal(err)
	}
	defs, err := s.ToolsList(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	wsListed := string(mustMarshal(t, defs))
	wantAll(t, "ws tools.list", wsListed, `"echo-args"`, `"load_skill"`)
	if strings.Contains(wsListed, `"touch-file"`) {
		t.Fatalf("ws tools.list has an unselected skill: %s", wsListed)
	}
	obs, err := s.Call(ctx, "echo-args", map[string]any{"text": "a b"}, nil)
	if err != nil || obs.IsError {
		t.Fatalf("echo-args over WebSocket: %v %+v", err, obs)
	}
	wantAll(t, "echo-args over WebSocket", obs.Text(), "[a b]")
	_ = s.Close(ctx)

	e, err := c.CreateSession(ctx, client.CreateOptions{Profile: "eager"})
	if err != nil {
		t.Fatal(err)
	}
	obs, err = e.Call(ctx, "terminal", map[string]any{"command": `cat $HOME/install-count`}, nil)
	if err != nil || obs.IsError || strings.Count(obs.Text(), "run") != 1 {
		t.Fatalf("eager profile: the installer had not run once when the session was handed out: %v %+v", err, obs)
	}
	_ = e.Close(ctx)

	if _, err := c.CreateSession(ctx, client.CreateOptions{Skills: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), `"nope" selects no skill`) {
		t.Fatalf("a selection that matches nothing: %v", err)
	}

	_ = cs.Close()
	_ = modern.Close()
	serve.stop(t)
	waitNoContainers(t, "after serve with skills stopped")
}

// statelessTools connects a stateless (2026-07-28) client to path and
// lists its tools without opening a sandbox; each of want must be there.
func statelessTools(ctx context.Context, t *testing.T, base, path, token string, want ...string) (*mcp.ClientSession, map[string]*mcp.Tool) {
	t.Helper()
	cs, err := mcpConnectPath(ctx, base, path, token, "")
	if err != nil {
		t.Fatal(err)
	}
	list, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range list.Tools {
		tools[tl.Name] = tl
	}
	for _, w := range want {
		if tools[w] == nil {
			t.Fatalf("stateless tools/list on %s lacks %s: %v", path, w, names2(tools))
		}
	}
	return cs, tools
}

func names2(m map[string]*mcp.Tool) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	return out
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
