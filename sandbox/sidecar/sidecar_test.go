package sidecar

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
)

// fakeSidecars runs each sidecar as an in-process go-sdk server over a pipe.
type fakeSidecars struct {
	// http makes its sidecars' conns as an HTTP sidecar's: a kill ends no
	// connection (a dead address answers nothing, and what is sent to it
	// is lost); only Conn.Exited tells.
	http bool

	mu     sync.Mutex
	starts int
	kill   func()      // kills the running server, as docker kill would its container
	srv    *mcp.Server // the running server
	total  atomic.Int64

	setup func(*mcp.Server) // adds to each server before it connects (when set)

	learned []tools.Definition // what Server.Learned was told last
}

const longTool = "a_tool_name_of_ninety_characters_that_no_model_api_accepts_as_it_is_written_by_its_server__"

func (f *fakeSidecars) StartSidecar(ctx context.Context, name string) (*Conn, error) {
	client, server := net.Pipe()
	srv := mcp.NewServer(&mcp.Implementation{Name: name}, nil)
	var count int // the server's state: lost with its "container"
	mcp.AddTool(srv, &mcp.Tool{Name: "count"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		count++
		f.total.Add(1)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(count)}}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: longTool}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "long ok"}}}, nil, nil
	})
	dead := make(chan struct{}) // closed by kill
	mcp.AddTool(srv, &mcp.Tool{Name: "hang"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		select { // never answers while the server lives
		case <-ctx.Done():
		case <-dead:
		}
		return nil, nil, errors.New("gone")
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "rich", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: true, StructuredContent: map[string]any{"k": "v"},
			Content: []mcp.Content{&mcp.TextContent{Text: "t"}, &mcp.ImageContent{Data: []byte{1, 2}, MIMEType: "image/png"}}}, nil, nil
	})
	if f.setup != nil {
		f.setup(srv)
	}
	served := server
	var blackhole chan struct{}
	if f.http {
		served, blackhole = relay(server)
	}
	ss, err := srv.Connect(context.Background(), &mcp.IOTransport{Reader: served, Writer: served}, nil)
	if err != nil {
		return nil, err
	}
	exited := make(chan struct{})

	f.mu.Lock()
	f.starts++
	f.kill = func() {
		if blackhole != nil {
			close(blackhole)
		}
		close(dead)
		_ = ss.Close()
		served.Close()
		close(exited)
	}
	f.srv = srv
	f.mu.Unlock()
	return &Conn{Stream: client, Stderr: func() string { return "fake stderr" }, Close: func() { client.Close() }, Exited: exited}, nil
}

// relay returns the server's end of a relay to near, the client's peer,
// and a channel whose closing makes the relay a dead address: from then
// on it drops what either side sends and closes nothing on the client's
// side. Its goroutines end when the client's end closes.
func relay(near net.Conn) (far net.Conn, blackhole chan struct{}) {
	far, mid := net.Pipe()
	blackhole = make(chan struct{})
	pass := func(dst, src net.Conn, closeDst bool) {
		if closeDst {
			defer dst.Close()
		}
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				return
			}
			select {
			case <-blackhole:
			default:
				_, _ = dst.Write(buf[:n])
			}
		}
	}
	go pass(mid, near, true)  // the client's requests; drained until it closes, then the server's end
	go pass(near, mid, false) // the server's answers; ends with the server, closing nothing
	return far, blackhole
}

func (f *fakeSidecars) learn(defs []tools.Definition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.learned = defs
}

// newTestSidecars is a set of one eager stdio server, "fake", as
// sandbox.MCPServer{Name: "fake"} resolves; cancel ends its life (the
// daemon's).
func newTestSidecars(t *testing.T, f *fakeSidecars) (*Set, context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv := Server{Name: "fake", Transport: Stdio, Eager: true, Learned: f.learn}
	if f.http {
		srv.Transport = HTTP
	}
	srv.Start = func(ctx context.Context) (*Conn, error) { return f.StartSidecar(ctx, srv.Name) }
	set := New(ctx, Options{Servers: []Server{srv}, Log: slog.New(slog.DiscardHandler), Closed: errors.New("session is closed")})
	return set, cancel
}

func callText(t *testing.T, set *Set, name string) string {
	t.Helper()
	c, ok := set.route(name)
	require.True(t, ok, name)
	obs, err := c.call(context.Background(), name, json.RawMessage(`{}`))
	require.NoError(t, err)
	return obs.Text()
}

// The tools of a sidecar as the session names them: prefixed, a 90-character
// name cut to 64 and still called by its original, annotations, results
// (text, image, structured content, isError) unchanged; one client session
// keeps the server's state; a clash with the sandbox's tools names both.
func TestSidecarTools(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSidecars{}
		set, cancel := newTestSidecars(t, f)
		defer cancel()
		defer set.Close()
		require.NoError(t, set.StartEager(context.Background()))
		defs, err := set.Tools(context.Background(), nil)
		require.NoError(t, err)
		byName := map[string]bool{}
		var long string
		for _, d := range defs {
			assert.Regexp(t, `^[A-Za-z0-9_-]{1,64}$`, d.Name)
			byName[d.Name] = true
			if strings.HasPrefix(d.Name, "fake__a_tool_name") {
				long = d.Name
			}
			if d.Name == "fake__rich" {
				assert.True(t, d.Annotations.ReadOnlyHint)
				assert.True(t, d.Annotations.OpenWorldHint, "MCP's default when unset")
			}
		}
		assert.True(t, byName["fake__count"] && byName["fake__rich"], "%v", byName)
		require.NotEmpty(t, long)
		assert.Len(t, long, 64)
		assert.Equal(t, "long ok", callText(t, set, long))

		for i := 1; i <= 20; i++ {
			assert.Equal(t, fmt.Sprint(i), callText(t, set, "fake__count"))
		}
		c, _ := set.route("fake__rich")
		obs, err := c.call(context.Background(), "fake__rich", nil)
		require.NoError(t, err)
		assert.True(t, obs.IsError)
		assert.Equal(t, map[string]any{"k": "v"}, obs.Structured)
		require.Len(t, obs.Content, 2)
		assert.Equal(t, "image", obs.Content[1].Type)
		assert.Equal(t, []byte{1, 2}, obs.Content[1].Data)

		_, err = set.Tools(context.Background(), []tools.Definition{{Name: "fake__count"}})
		require.Error(t, err)
		assert.Contains(t, err.Error(), `the sandbox's tool fake__count`)
		assert.Contains(t, err.Error(), `mcp server "fake"'s tool "count"`)
		assert.Equal(t, 1, f.starts)
	})
}

// A sidecar that dies: its calls fail at once saying so and that its state
// is lost; it is restarted after a backoff, bounded.
func TestSidecarRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSidecars{}
		set, cancel := newTestSidecars(t, f)
		defer cancel()
		defer set.Close()
		require.NoError(t, set.StartEager(context.Background()))
		assert.Equal(t, "1", callText(t, set, "fake__count"))
		assert.Equal(t, "2", callText(t, set, "fake__count"))

		f.kill()
		synctest.Wait() // the watcher saw the end; the restart waits for its backoff
		out := callText(t, set, "fake__count")
		assert.Contains(t, out, `mcp server "fake" is down`)
		assert.Contains(t, out, "restart 1 of 3")
		assert.Contains(t, out, "state it held is lost")
		assert.Contains(t, out, "fake stderr")
		defs, err := set.Tools(context.Background(), nil)
		require.NoError(t, err, "a listing does not wait for the restart")
		assert.NotEmpty(t, defs)

		c, _ := set.route("fake__count")
		c.mu.Lock()
		wait := c.starting
		c.mu.Unlock()
		<-wait // the backoff passes (fake time) and the restart ends
		assert.Equal(t, "1", callText(t, set, "fake__count"), "a fresh server: its state was lost")
		assert.Equal(t, 2, f.starts)

		for range MaxRestarts {
			f.mu.Lock()
			kill := f.kill
			f.mu.Unlock()
			kill()
			synctest.Wait()
			c.mu.Lock()
			wait := c.starting
			c.mu.Unlock()
			if wait != nil {
				<-wait
			}
		}
		out = callText(t, set, "fake__count")
		assert.Contains(t, out, "which is the limit")
		assert.Equal(t, 1+MaxRestarts, f.starts)
	})
}

// An HTTP or SSE sidecar that dies ends no connection (a dead address
// answers nothing): it is found down by its container's exit
// (Conn.Exited), at once. A call in flight and the next fail saying so,
// with its stderr's end and that its state is lost (no fake time passes:
// no dial or deadline is waited for); it is restarted after 1, 2 and 4 s
// and answers again with a fresh state, three times at most.
func TestSidecarRestartHTTP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSidecars{http: true}
		set, cancel := newTestSidecars(t, f)
		defer cancel()
		defer set.Close()
		require.NoError(t, set.StartEager(context.Background()))
		c, _ := set.route("fake__count")
		for n := 1; n <= MaxRestarts+1; n++ {
			assert.Equal(t, "1", callText(t, set, "fake__count"))
			inFlight := make(chan string, 1)
			go func() {
				obs, err := c.call(context.Background(), "fake__hang", json.RawMessage(`{}`))
				if err != nil {
					inFlight <- err.Error()
					return
				}
				inFlight <- obs.Text()
			}()
			synctest.Wait() // the call waits for the server
			f.mu.Lock()
			kill := f.kill
			f.mu.Unlock()
			killed := time.Now()
			kill()
			synctest.Wait() // the watcher saw the exit; nothing waits on a clock but the backoff
			var hung string
			select {
			case hung = <-inFlight:
			default:
				t.Fatalf("kill %d: the call in flight still waits", n)
			}
			next := callText(t, set, "fake__count")
			for _, out := range []string{hung, next} {
				assert.Contains(t, out, `mcp server "fake" is down: its container exited; its stderr ends with: fake stderr`)
				if n > MaxRestarts {
					assert.Contains(t, out, "which is the limit")
				} else {
					assert.Contains(t, out, fmt.Sprintf("sandboxd restarts it (restart %d of 3) and whatever state it held is lost", n))
				}
			}
			c.mu.Lock()
			wait := c.starting
			c.mu.Unlock()
			if n > MaxRestarts {
				assert.Nil(t, wait, "no restart past the limit")
				break
			}
			<-wait
			assert.Equal(t, restartBackoff<<(n-1), time.Since(killed), "kill %d: the backoff", n)
		}
		assert.Equal(t, 1+MaxRestarts, f.starts)
		assert.Contains(t, callText(t, set, "fake__count"), "which is the limit")
	})
}

// A server's notifications/tools/list_changed: the list is read again, the
// session's watchers are told, Learned is told the new tools (the manager's
// cache: its version changes); a restart whose server lists other tools (the added one is gone) is told
// too; a stopped watch is not.
func TestSidecarToolsChanged(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSidecars{}
		set, cancel := newTestSidecars(t, f)
		defer cancel()
		defer set.Close()
		require.NoError(t, set.StartEager(context.Background()))
		told := make(chan struct{}, 4)
		stop := set.Watch(func() { told <- struct{}{} })
		awaitTold := func(what string) {
			t.Helper()
			select {
			case <-told:
			case <-time.After(time.Minute): // fake time: passes only if nothing else can run
				t.Fatalf("the watcher was not told of %s", what)
			}
		}
		var other atomic.Int64
		stopOther := set.Watch(func() { other.Add(1) })
		stopOther()

		f.mu.Lock()
		srv := f.srv
		f.mu.Unlock()
		mcp.AddTool(srv, &mcp.Tool{Name: "added"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "new"}}}, nil, nil
		})
		awaitTold("the added tool") // the SDK sends list_changed 10 ms (fake) after the change
		assert.Zero(t, other.Load(), "a stopped watch is not told")
		f.mu.Lock()
		learned := f.learned
		f.mu.Unlock()
		assert.True(t, slicesContainsName(learned, "fake__added"), "Learned is told the new list")
		assert.Equal(t, "new", callText(t, set, "fake__added"))
		defs, err := set.Tools(context.Background(), nil)
		require.NoError(t, err)
		assert.True(t, slicesContainsName(defs, "fake__added"))

		f.kill()
		synctest.Wait()
		c, _ := set.route("fake__count")
		c.mu.Lock()
		wait := c.starting
		c.mu.Unlock()
		<-wait // the restart: a fresh server without the added tool
		awaitTold("a restart with other tools")
		synctest.Wait()
		assert.Empty(t, told, "told once each time")
		defs, err = set.Tools(context.Background(), nil)
		require.NoError(t, err)
		assert.False(t, slicesContainsName(defs, "fake__added"))
		stop()
	})
}

func slicesContainsName(defs []tools.Definition, name string) bool {
	for _, d := range defs {
		if d.Name == name {
			return true
		}
	}
	return false
}

var _ io.ReadWriteCloser = net.Conn(nil)
