package api

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandboxd/sandboxd/server/auth"
)

// The operator token never appears in what serve, run and shell print
// (logs included), whether it comes from the token file or SANDBOXD_TOKEN;
// session tokens never appear in serve's logs (at debug level).
// shell prints the session's own token, for attaching, in the form that
// keeps it off command lines (readable by every user in ps).
func TestCLINeverPrintsOperatorToken(t *testing.T) {
	state := t.TempDir()
	serve := startServe(t, state, "--log-level", "debug")
	token, err := auth.ReadTokenFile(filepath.Join(state, auth.TokenFileName))
	if err != nil {
		t.Fatal(err)
	}
	cli := func(env []string, stdin string, args ...string) (string, string) {
		t.Helper()
		cmd := exec.Command(binary, args...)
		cmd.Env = append(os.Environ(), env...)
		cmd.Stdin = strings.NewReader(stdin)
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		_ = cmd.Run()
		return out.String(), errOut.String()
	}
	var printed, sessionTokens []string
	for _, env := range [][]string{nil, {"SANDBOXD_TOKEN=" + token}} {
		out, errOut := cli(env, "", "run", "--server", serve.url, "--state-dir", state, "--", "echo", "ran")
		if !strings.Contains(out, "ran") {
			t.Fatalf("run: %q %q", out, errOut)
		}
		printed = append(printed, out, errOut)
		out, errOut = cli(env, "echo shelled\n", "shell", "--server", serve.url, "--state-dir", state)
		if !strings.Contains(out, "shelled") {
			t.Fatalf("shell: %q %q", out, errOut)
		}
		printed = append(printed, out, errOut)
		// The hint names the server when it is not the default one.
		hint := regexp.MustCompile(`attach from elsewhere: SANDBOXD_SESSION_TOKEN=(\S+) sandboxd shell --server ` + regexp.QuoteMeta(serve.url) + ` --session \S+\n`).FindStringSubmatch(errOut)
		if hint == nil {
			t.Fatalf("shell's attach hint: %q", errOut)
		}
		sessionTokens = append(sessionTokens, hint[1])
	}
	// A failing run (wrong server) reports without the token either.
	_, errOut := cli([]string{"SANDBOXD_TOKEN=" + token}, "", "run", "--server", "ws://127.0.0.1:1/v1/ws", "--", "true")
	printed = append(printed, errOut)
	serve.stop(t)
	printed = append(printed, serve.logs())
	for _, p := range printed {
		if strings.Contains(p, token) {
			t.Fatalf("the operator token was printed:\n%s", p)
		}
	}
	for _, st := range sessionTokens {
		if strings.Contains(serve.logs(), st) {
			t.Fatalf("serve logged a session token:\n%s", serve.logs())
		}
	}
}
