package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/wsproto"
)

// HTTP and SSE sidecars killed from outside (docker kill) get the stdio
// ones' fault handling (issue 23): the next call fails at once with the
// documented text (down; its stderr's end; restart N of 3; state lost),
// not a dial's "no route to host" seconds later, and the sidecar is
// restarted in a new container and answers again. Each is killed twice:
// the restarts count. "plain" is a streamable HTTP server with no event
// stream (evilmcp -attack none answers GET with 405), as many are: no
// connection of it ends when it dies, so only its container's exit tells;
// a call in flight when it is killed ends at once too.
func TestSidecarRestartHTTPAndSSE(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rig := startSidecarServe(ctx, t, "--allow-image", testImage, "--allow-image", "sandboxd-mcp-*")
	serve, c := rig.serve, rig.c

	sess, err := c.CreateSession(ctx, client.CreateOptions{Image: testImage, MCPServers: []wsproto.MCPServer{
		{Name: "plain", Image: evilImage, Args: []string{"-http", "0.0.0.0:8080", "-attack", "none"}, Transport: "http", Port: 8080, Path: "/"},
		{Name: "everything", Image: everythingImage, Args: []string{"-http", "0.0.0.0:8080"}, Transport: "http", Port: 8080, Path: "/"},
		{Name: "old", Image: "sandboxd-mcp-sse:latest", Args: []string{"-host", "0.0.0.0", "-port", "8081"}, Transport: "sse", Port: 8081, Path: "/greeter1"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ server, tool, arg, answer string }{
		{"plain", "plain__echo", "text", "%s"},
		{"everything", "everything__greet", "name", "Hi %s"},
		{"old", "old__greet1", "name", "Hi %s"},
	} {
		t.Run(tc.server, func(t *testing.T) {
			call := func(tool, arg string) (text string, isError bool) {
				t.Helper()
				obs, err := sess.Call(ctx, tool, map[string]any{tc.arg: arg}, nil)
				if err != nil {
					t.Fatalf("%s: %v\n%s", tool, err, serve.logs())
				}
				return obs.Text(), obs.IsError
			}
			if text, isErr := call(tc.tool, "before"); isErr || !strings.Contains(text, fmt.Sprintf(tc.answer, "before")) {
				t.Fatalf("%s before the kill: %s", tc.tool, text)
			}
			for n := 1; n <= 2; n++ {
				want := []string{`mcp server "` + tc.server + `" is down`, "its stderr ends with",
					fmt.Sprintf("restart %d of 3", n), "whatever state it held is lost"}
				if tc.server == "plain" {
					want = append(want, "its container exited")
				}
				check := func(what string, took time.Duration, text string, isErr bool) {
					t.Helper()
					t.Logf("kill %d: %s failed after %v: %s", n, what, took.Round(time.Millisecond), text)
					for _, w := range want {
						if !isErr || !strings.Contains(text, w) {
							t.Fatalf("kill %d: %s (after %v) lacks %q: is_error %v, %s", n, what, took, w, isErr, text)
						}
					}
				}
				old := runningSidecar(ctx, t, sess.ID, tc.server)
				var inFlight chan string
				if tc.server == "plain" && n == 1 { // a call that never answers, under way at the kill
					inFlight = make(chan string, 1)
					go func() {
						obs, err := sess.Call(ctx, "plain__hang", map[string]any{}, nil)
						if err != nil {
							inFlight <- "error: " + err.Error()
							return
						}
						inFlight <- obs.Text()
					}()
					time.Sleep(200 * time.Millisecond) // let it reach the server; a call yet to start fails the same
				}
				if err := engine.ContainerKill(ctx, old, "KILL"); err != nil {
					t.Fatal(err)
				}
				killed := time.Now()
				if inFlight != nil {
					select {
					case text := <-inFlight:
						check("the call in flight", time.Since(killed), text, true)
					case <-time.After(time.Minute): // a call's deadline is 10 min
						t.Fatalf("kill %d: the call in flight did not end", n)
					}
				}
				text, isErr := call(tc.tool, "after")
				check("the next call", time.Since(killed), text, isErr)
				// Poll with a bound far above the backoff (1 s, then 2 s)
				// plus a container's start: only a sidecar that never comes
				// back fails it.
				for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
					text, isErr = call(tc.tool, "again")
					if !isErr {
						break
					}
					if !strings.Contains(text, "is down") && !strings.Contains(text, "restarting") {
						t.Fatalf("kill %d: while restarting: %s", n, text)
					}
					if time.Now().After(deadline) {
						t.Fatalf("kill %d: the sidecar did not answer again: %s\n%s", n, text, serve.logs())
					}
				}
				t.Logf("kill %d: answered again after %v: %s", n, time.Since(killed).Round(time.Millisecond), text)
				if !strings.Contains(text, fmt.Sprintf(tc.answer, "again")) {
					t.Fatalf("kill %d: after the restart: %s", n, text)
				}
				if now := runningSidecar(ctx, t, sess.ID, tc.server); now == old {
					t.Fatalf("kill %d: the same container %s runs", n, old[:12])
				}
			}
		})
	}
	if err := sess.Close(ctx); err != nil {
		t.Fatal(err)
	}
	serve.stop(t)
	waitNoContainers(t, "after the restarted sidecars")
}

// runningSidecar is the id of the one running container of a session's
// sidecar.
func runningSidecar(ctx context.Context, t *testing.T, session, server string) string {
	t.Helper()
	var ids []string
	for _, ctr := range sidecarContainers(ctx, t, session) {
		if ctr.Labels[sandbox.LabelSidecar] == server && ctr.State == "running" {
			ids = append(ids, ctr.ID)
		}
	}
	if len(ids) != 1 {
		t.Fatalf("%d running containers of sidecar %s, want 1", len(ids), server)
	}
	return ids[0]
}
