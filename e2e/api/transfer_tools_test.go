package api

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/server/daemon"
)

// transferDaemon serves the profile "harness" with the transfer tools on,
// and the default profile without them.
func transferDaemon(t *testing.T) (base, token string) {
	t.Helper()
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("profiles:\n  harness:\n    transfer_tools: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, func(c *daemon.Config) { c.ConfigPath = config })
	hs := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.CloseClientConnections()
		hs.Close()
	})
	return hs.URL, d.Token
}

func mcpConnect(ctx context.Context, t *testing.T, url, token, version string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-harness", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: &http.Client{Transport: bearer{token, http.DefaultTransport}}, MaxRetries: -1,
	}, &mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// mcpTool calls a tool and returns its result, text and structured
// content; a protocol error fails the test.
func mcpTool(ctx context.Context, t *testing.T, cs *mcp.ClientSession, name string, args map[string]any) (*mcp.CallToolResult, string, map[string]any) {
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
	st, _ := res.StructuredContent.(map[string]any)
	return res, b.String(), st
}

func sha(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Issue 24: a harness over MCP puts a 5 MB binary in and gets a 1 MB log
// (made in the sandbox, far over the terminal's 30,000 characters) out
// whole, byte-exact, and a byte range of it; a tar goes in as a tree;
// hostile paths are refused with a clear message; a profile without
// transfer_tools has no such tools.
func TestMCPTransferTools(t *testing.T) {
	t.Parallel()
	// A bound on a hang: with -race at load 30 the test took 2 min.
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	base, token := transferDaemon(t)

	plain := mcpConnect(ctx, t, base+"/mcp", token, "2025-11-25")
	list, err := plain.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range list.Tools {
		if tool.Name == "upload" || tool.Name == "download" {
			t.Fatalf("/mcp (no transfer_tools) lists %s", tool.Name)
		}
	}

	cs := mcpConnect(ctx, t, base+"/mcp/harness", token, "2025-11-25")
	list, err = cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range list.Tools {
		names = append(names, tool.Name)
		if tool.Name == "download" && (tool.OutputSchema == nil || tool.Annotations == nil || !tool.Annotations.ReadOnlyHint) {
			t.Fatalf("download: output schema or annotations: %+v", tool)
		}
	}
	if !slices.Contains(names, "upload") || !slices.Contains(names, "download") {
		t.Fatalf("/mcp/harness lists %v", names)
	}
	term := func(cmd string) string {
		t.Helper()
		res, text, st := mcpTool(ctx, t, cs, "terminal", map[string]any{"command": cmd, "timeout": 120})
		if res.IsError || st["exit_code"] != float64(0) {
			t.Fatalf("%s: %s", cmd, text)
		}
		return text
	}

	// A 5 MB binary in, byte-exact, with its mode.
	bin := make([]byte, 5_000_000)
	_, _ = rand.Read(bin)
	start := time.Now()
	res, text, st := mcpTool(ctx, t, cs, "upload", map[string]any{"path": "/workspace/tools/blob.bin", "content_base64": base64.StdEncoding.EncodeToString(bin), "mode": "0755"})
	took := time.Since(start)
	if res.IsError {
		t.Fatalf("upload: %s", text)
	}
	if st["sha256"] != sha(bin) || st["bytes"] != float64(len(bin)) {
		t.Fatalf("upload result: %v", st)
	}
	if out := term("sha256sum /workspace/tools/blob.bin; stat -c '%a %s' /workspace/tools/blob.bin"); !strings.Contains(out, sha(bin)) || !strings.Contains(out, "755 5000000") {
		t.Fatalf("in the sandbox: %s", out)
	}
	t.Logf("upload of 5,000,000 random bytes (%d of base64): %v", base64.StdEncoding.EncodedLen(len(bin)), took)

	// A 1 MB log made in the sandbox out, whole and byte-exact.
	term("(seq 1 200000; head -c 300000 /dev/urandom; seq 1 200000) | head -c 1048576 > /workspace/run.log")
	inSandbox := strings.Fields(term("sha256sum /workspace/run.log"))[0]
	start = time.Now()
	res, text, st = mcpTool(ctx, t, cs, "download", map[string]any{"path": "/workspace/run.log"})
	took = time.Since(start)
	if res.IsError {
		t.Fatalf("download: %s", text)
	}
	log, err := base64.StdEncoding.DecodeString(st["content_base64"].(string))
	if err != nil {
		t.Fatal(err)
	}
	if len(log) != 1<<20 || sha(log) != inSandbox || st["sha256"] != inSandbox || st["eof"] != true || st["size"] != float64(1<<20) {
		t.Fatalf("download: %d bytes, sha256 %s (sandbox %s), result %v", len(log), sha(log), inSandbox, withoutContent(st))
	}
	t.Logf("download of a 1 MiB log: %v", took)

	// A byte range, and one that runs past the end.
	_, text, st = mcpTool(ctx, t, cs, "download", map[string]any{"path": "/workspace/run.log", "offset": 700_000, "length": 4096})
	part, _ := base64.StdEncoding.DecodeString(st["content_base64"].(string))
	if !bytes.Equal(part, log[700_000:704_096]) || st["eof"] != false || st["sha256"] != sha(log[700_000:704_096]) {
		t.Fatalf("range: %q %v", text, withoutContent(st))
	}
	_, _, st = mcpTool(ctx, t, cs, "download", map[string]any{"path": "/workspace/run.log", "offset": 1<<20 - 10, "length": 100})
	part, _ = base64.StdEncoding.DecodeString(st["content_base64"].(string))
	if !bytes.Equal(part, log[1<<20-10:]) || st["eof"] != true {
		t.Fatalf("range at the end: %v", withoutContent(st))
	}

	// A tar in, as a tree with its modes.
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, h := range []*tar.Header{
		{Name: "eval/", Typeflag: tar.TypeDir, Mode: 0o755},
		{Name: "eval/run.sh", Typeflag: tar.TypeReg, Mode: 0o755, Size: 20},
		{Name: "eval/patch.diff", Typeflag: tar.TypeReg, Mode: 0o644, Size: 5},
	} {
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		_, _ = tw.Write([]byte("#!/bin/sh\necho ran-ok\n")[:h.Size])
	}
	_ = tw.Close()
	res, text, _ = mcpTool(ctx, t, cs, "upload", map[string]any{"path": "/workspace/task", "tar_base64": base64.StdEncoding.EncodeToString(tb.Bytes())})
	if res.IsError {
		t.Fatalf("tar upload: %s", text)
	}
	if out := term("stat -c '%a %n' /workspace/task/eval/run.sh /workspace/task/eval/patch.diff"); !strings.Contains(out, "755 /workspace/task/eval/run.sh") || !strings.Contains(out, "644 /workspace/task/eval/patch.diff") {
		t.Fatalf("tar in the sandbox: %s", out)
	}

	// Hostile paths: refused, each with its reason; nothing outside changes.
	term("ln -s /etc /workspace/etc-link && ln -s /etc/passwd /workspace/pw && mkdir -p /workspace/d")
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"upload", map[string]any{"path": "/workspace/../etc/evil", "content_base64": "eA=="}, `contains ".."`},
		{"upload", map[string]any{"path": "workspace/x", "content_base64": "eA=="}, "relative"},
		{"upload", map[string]any{"path": "/etc/evil", "content_base64": "eA=="}, "not under"},
		{"upload", map[string]any{"path": "/workspace/etc-link/evil", "content_base64": "eA=="}, "symlink"},
		{"upload", map[string]any{"path": "/workspace/d", "content_base64": "eA=="}, "directory is in the way"},
		{"upload", map[string]any{"path": "/workspace", "tar_base64": evilTar(t, "../../etc/evil")}, "leads outside"},
		{"download", map[string]any{"path": "/etc/passwd"}, "not under"},
		{"download", map[string]any{"path": "/workspace/pw"}, "symbolic link"},
		{"download", map[string]any{"path": "/workspace/etc-link/passwd"}, "symlink"},
		{"download", map[string]any{"path": "/workspace/d"}, "is a directory"},
		{"download", map[string]any{"path": "/workspace/missing"}, "no such file"},
		{"download", map[string]any{"path": "/workspace/run.log", "offset": 2 << 20}, "past the end"},
	} {
		res, text, _ := mcpTool(ctx, t, cs, c.tool, c.args)
		if !res.IsError || !strings.Contains(text, c.want) {
			t.Errorf("%s %v: want an error with %q, got %v %q", c.tool, c.args, c.want, res.IsError, text)
		}
	}
	// Writing over a symlink replaces the link, never the file it names.
	res, text, _ = mcpTool(ctx, t, cs, "upload", map[string]any{"path": "/workspace/pw", "content_base64": base64.StdEncoding.EncodeToString([]byte("mine\n"))})
	if res.IsError {
		t.Fatalf("upload over a link: %s", text)
	}
	if out := term("test ! -L /workspace/pw && cat /workspace/pw && grep -c root /etc/passwd"); !strings.Contains(out, "mine\n1") {
		t.Fatalf("after an upload over a link: %s", out)
	}
}

// withoutContent is a download result without its bytes, for messages.
func withoutContent(st map[string]any) map[string]any {
	out := map[string]any{}
	for k, v := range st {
		if k != "content_base64" {
			out[k] = v
		}
	}
	return out
}

func evilTar(t *testing.T, name string) string {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: 1}); err != nil {
		t.Fatal(err)
	}
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

// The stateless revision (2026-07-28) serves the same tools with the
// sandbox's handle.
func TestMCPTransferToolsStateless(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	base, token := transferDaemon(t)
	cs := mcpConnect(ctx, t, base+"/mcp/harness", token, "2026-07-28")
	res, text, st := mcpTool(ctx, t, cs, "sandbox_open", map[string]any{})
	if res.IsError {
		t.Fatalf("sandbox_open: %s", text)
	}
	h := st["sandbox"]
	defer mcpTool(context.WithoutCancel(ctx), t, cs, "sandbox_close", map[string]any{"sandbox": h})
	data := make([]byte, 200_000)
	_, _ = rand.Read(data)
	res, text, _ = mcpTool(ctx, t, cs, "upload", map[string]any{"sandbox": h, "path": "/workspace/in.bin", "content_base64": base64.StdEncoding.EncodeToString(data)})
	if res.IsError {
		t.Fatalf("upload: %s", text)
	}
	res, text, st = mcpTool(ctx, t, cs, "download", map[string]any{"sandbox": h, "path": "/workspace/in.bin", "offset": 100_000})
	if res.IsError {
		t.Fatalf("download: %s", text)
	}
	got, _ := base64.StdEncoding.DecodeString(st["content_base64"].(string))
	if !bytes.Equal(got, data[100_000:]) {
		t.Fatalf("download: %d bytes, %v", len(got), withoutContent(st))
	}
}

// A task image's editable paths are transfer roots too: a test file goes
// straight into /testbed and a source file comes out of it; the image's
// read-only parts stay out of reach.
func TestMCPTransferToolsEditablePaths(t *testing.T) {
	t.Parallel()
	img := harnessTaskImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	config := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(config, []byte("profiles:\n  task:\n    image: "+img+"\n    editable_paths: [/testbed]\n    transfer_tools: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := newDaemon(t, func(c *daemon.Config) { c.ConfigPath = config })
	hs := httptest.NewServer(d.Handler())
	t.Cleanup(func() {
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer scancel()
		if err := d.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		hs.CloseClientConnections()
		hs.Close()
	})
	cs := mcpConnect(ctx, t, hs.URL+"/mcp/task", d.Token, "2025-11-25")
	test := []byte("import unittest\n\nclass T(unittest.TestCase):\n    def test_ok(self):\n        self.assertTrue(True)\n")
	res, text, _ := mcpTool(ctx, t, cs, "upload", map[string]any{"path": "/testbed/tests/test_uploaded.py", "content_base64": base64.StdEncoding.EncodeToString(test)})
	if res.IsError {
		t.Fatalf("upload into /testbed: %s", text)
	}
	_, text, st := mcpTool(ctx, t, cs, "terminal", map[string]any{"command": "stat -c '%u %a' /testbed/tests/test_uploaded.py && sha256sum /testbed/calc/stats.py", "timeout": 120})
	if st["exit_code"] != float64(0) || !strings.Contains(text, "1000 644") {
		t.Fatalf("in the sandbox: %s", text)
	}
	res, text, st = mcpTool(ctx, t, cs, "download", map[string]any{"path": "/testbed/calc/stats.py"})
	if res.IsError {
		t.Fatalf("download from /testbed: %s", text)
	}
	src, _ := base64.StdEncoding.DecodeString(st["content_base64"].(string))
	if !strings.Contains(string(src), "def mean(xs):") {
		t.Fatalf("stats.py: %q", src)
	}
	// /usr/local/bin (the grader) is the image's, read-only and no root.
	res, text, _ = mcpTool(ctx, t, cs, "upload", map[string]any{"path": "/usr/local/bin/run_tests.sh", "content_base64": "ZXhpdCAwCg=="})
	if !res.IsError || !strings.Contains(text, "not under") {
		t.Fatalf("upload over the grader: %v %s", res.IsError, text)
	}
}
