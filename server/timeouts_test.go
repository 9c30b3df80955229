package server_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/auth"
	"github.com/sandboxd/sandboxd/server/servertest"
)

// A client that announces a body and then trickles it (or stops) must not
// hold a connection for ever: on any route, authenticated or not, the
// server gives up after BodyReadTimeout and closes the connection.
func TestSlowBodyIsCut(t *testing.T) {
	t.Parallel()
	ts := servertest.Start(t, func(o *server.Options) { o.BodyReadTimeout = 300 * time.Millisecond })
	addr := strings.TrimPrefix(ts.Base, "http://")
	for _, tc := range []struct{ path, auth string }{
		{"/healthz", ""},
		{"/nope", ""},
		{"/mcp", ""},
		{"/mcp", "Authorization: Bearer " + ts.Token + "\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"},
		{"/metrics", "Authorization: Bearer " + ts.Token + "\r\n"},
	} {
		t.Run(tc.path, func(t *testing.T) {
			t.Parallel()
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\n%sContent-Length: 100000\r\n\r\n{\"jsonrpc\"", tc.path, tc.auth)
			start := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			_, err = io.Copy(io.Discard, c) // returns when the server closes
			if err != nil {
				t.Fatalf("the server kept a connection with a stalled body open for %v: %v", time.Since(start), err)
			}
		})
	}
}

// The body deadline ends with the body: a call that runs longer than it, on
// a response that streams longer than it, is not cut.
func TestBodyDeadlineLiftedAfterBody(t *testing.T) {
	t.Parallel()
	ts := servertest.Start(t, func(o *server.Options) { o.BodyReadTimeout = 200 * time.Millisecond })
	cs, err := mcpConnect(t, ts, ts.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sleep", Arguments: map[string]any{"ms": 800}})
	if err != nil || res.IsError {
		t.Fatalf("a call longer than the body deadline: %+v %v", res, err)
	}
}

// A unix socket path replaces a stale socket, never another file.
func TestUnixListenKeepsOtherFiles(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "precious")
	if err := os.WriteFile(file, []byte("data"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(server.Options{Backend: servertest.NewFakeBackend(), OperatorToken: auth.NewToken(), Listen: "unix:" + file})
	if err != nil {
		t.Fatal(err)
	}
	if ln, err := srv.Listen(); err == nil {
		ln.Close()
		t.Fatal("listened on a path that held a regular file")
	}
	if b, err := os.ReadFile(file); err != nil || string(b) != "data" {
		t.Fatalf("the file at the socket path is gone: %v", err)
	}
	// A stale socket is replaced.
	sock := filepath.Join(dir, "s.sock")
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	srv, err = server.New(server.Options{Backend: servertest.NewFakeBackend(), OperatorToken: auth.NewToken(), Listen: "unix:" + sock})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen()
	if err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	ln.Close()
	if st, err := os.Stat(sock); err == nil && st.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v", st.Mode().Perm())
	}
}
