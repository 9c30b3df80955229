package sidecar

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/tools"
)

// serverSession is the fake's one connected server session.
func serverSession(t *testing.T, f *fakeSidecars) *mcp.ServerSession {
	t.Helper()
	f.mu.Lock()
	srv := f.srv
	f.mu.Unlock()
	for ss := range srv.Sessions() {
		return ss
	}
	t.Fatal("no server session")
	return nil
}

// A server that floods sandboxd with requests (M8) is answered at first
// (ping; the rest refused at once: e2e's evilmcp sends them), then cut off: its connection closed, its
// calls saying why, and restarted as a server that went down.
func TestSidecarRequestFloodIsCutOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := &fakeSidecars{}
		set, cancel := newTestSidecars(t, f)
		defer cancel()
		defer set.Close()
		require.NoError(t, set.StartEager(context.Background()))
		ss := serverSession(t, f)
		ctx := context.Background()
		require.NoError(t, ss.Ping(ctx, nil), "a ping is answered")

		var wg sync.WaitGroup
		for range 200 {
			wg.Go(func() { _ = ss.Ping(ctx, nil) })
		}
		wg.Wait()
		synctest.Wait()
		c, _ := set.route("fake__count")
		obs, err := c.call(ctx, "fake__count", nil)
		require.NoError(t, err)
		assert.True(t, obs.IsError)
		assert.Contains(t, obs.Text(), "requests faster than 10 a second")
		assert.Contains(t, obs.Text(), "restart 1 of 3")
	})
}

// A flood of notifications/tools/list_changed (M7) re-reads the tools at
// most once a second: one in flight, one pending.
func TestSidecarListChangedIsCoalesced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var lists atomic.Int64
		f := &fakeSidecars{setup: func(srv *mcp.Server) {
			srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
				return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
					if method == "tools/list" {
						lists.Add(1)
						time.Sleep(300 * time.Millisecond) // a slow server: re-reads overlap the flood
					}
					return next(ctx, method, req)
				}
			})
		}}
		set, cancel := newTestSidecars(t, f)
		defer cancel()
		defer set.Close()
		require.NoError(t, set.StartEager(context.Background()))
		before := lists.Load()
		c, _ := set.route("fake__count")
		began := time.Now()
		for i := range 5000 { // what the client's ToolListChangedHandler does for each
			c.relist()
			if i%500 == 0 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		synctest.Wait()
		time.Sleep(5 * time.Second)
		synctest.Wait()
		n := lists.Load() - before
		secs := time.Since(began).Seconds()
		t.Logf("5,000 list_changed over %.1f s (fake): %d re-reads", secs, n)
		assert.GreaterOrEqual(t, n, int64(1), "a change is re-read")
		assert.LessOrEqual(t, float64(n), secs+1, "at most one re-read a second (and the first)")
	})
}

// The list limits (M5, M6): too many tools, too big a tool, too many
// pages: the server does not start, and the error says which limit.
func TestSidecarToolListLimits(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*mcp.Server)
		want  string
	}{
		{"too many tools", func(srv *mcp.Server) {
			for i := range MaxTools {
				srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("t%d", i), InputSchema: map[string]any{"type": "object"}}, nil)
			}
		}, "more than 1000 tools, the limit"},
		{"too big a tool", func(srv *mcp.Server) {
			srv.AddTool(&mcp.Tool{Name: "huge", Description: strings.Repeat("d", MaxToolBytes), InputSchema: map[string]any{"type": "object"}}, nil)
		}, `its tool "huge" is 65`},
		{"too many bytes", func(srv *mcp.Server) {
			for i := range 100 {
				srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("t%d", i), Description: strings.Repeat("d", 60<<10), InputSchema: map[string]any{"type": "object"}}, nil)
			}
		}, "more than 4 MiB of JSON together, the limit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f := &fakeSidecars{setup: tc.setup}
				set, cancel := newTestSidecars(t, f)
				defer cancel()
				defer set.Close()
				err := set.StartEager(context.Background())
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.want)
			})
		})
	}
	t.Run("endless pages", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var pages atomic.Int64
			f := &fakeSidecars{setup: func(srv *mcp.Server) {
				srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
					return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
						if method != "tools/list" {
							return next(ctx, method, req)
						}
						n := pages.Add(1)
						return &mcp.ListToolsResult{Tools: []*mcp.Tool{{Name: fmt.Sprintf("p%d", n), InputSchema: map[string]any{"type": "object"}}},
							NextCursor: fmt.Sprint(n)}, nil
					}
				})
			}}
			set, cancel := newTestSidecars(t, f)
			defer cancel()
			defer set.Close()
			err := set.StartEager(context.Background())
			require.Error(t, err)
			assert.Contains(t, err.Error(), "more than 100 pages, the limit")
			assert.Equal(t, int64(MaxPages), pages.Load())
		})
	})
}

// Results past the limits (M12, K12) are cut, saying so.
func TestBoundResult(t *testing.T) {
	long := strings.Repeat("a", 20000) + "MIDDLE" + strings.Repeat("é", 20000)
	obs := boundResult("s", &tools.Observation{Content: []tools.Content{
		{Type: "text", Text: "first "}, {Type: "text", Text: long}, {Type: "text", Text: " last"},
	}})
	text := obs.Text()
	assert.True(t, strings.HasPrefix(text, "first aaa"))
	assert.Contains(t, text, "éé last")
	assert.NotContains(t, text, "MIDDLE")
	assert.Contains(t, text, "[...]")
	assert.Contains(t, text, `mcp server "s"'s result was cut: its text was 40017 characters: the middle was cut to keep 30000`)
	body, _, found := strings.Cut(text, "\n[sandboxd:")
	require.True(t, found)
	assert.Equal(t, MaxResultChars+len("\n[...]\n"), utf8.RuneCountInString(body))
	assert.True(t, utf8.ValidString(text))

	small := &tools.Observation{Content: []tools.Content{{Type: "text", Text: "ok"}}, Structured: map[string]any{"a": 1.0}}
	assert.Equal(t, small, boundResult("s", small), "within the limits: unchanged")

	var deep any = "x"
	for range 100 {
		deep = []any{deep}
	}
	obs = boundResult("s", &tools.Observation{Content: []tools.Content{{Type: "text", Text: "deep"}}, Structured: map[string]any{"v": deep}})
	assert.Nil(t, obs.Structured)
	assert.Contains(t, obs.Text(), "its structured content is left out: it is nested deeper than 64 levels")

	obs = boundResult("s", &tools.Observation{Content: []tools.Content{
		{Type: "image", Data: make([]byte, MaxResultBinary), MIMEType: "image/png"}, {Type: "text", Text: "t"},
		{Type: "audio", Data: []byte{1}, MIMEType: "audio/wav"}}})
	require.Len(t, obs.Content, 2)
	assert.Equal(t, "t", obs.Content[0].Text)
	assert.Contains(t, obs.Text(), "its images and audio (8 MiB) are left out")
}

// An HTTP sidecar's JSON reply past the message limit becomes a JSON-RPC
// error for the call's id, read no further (M13); another body ends in an
// error there; an event stream is the SDK's to bound, event by event.
func TestLimitedBodies(t *testing.T) {
	big := strings.Repeat("x", MaxMessage+1)
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
		case "/plain":
			w.Header().Set("Content-Type", "text/plain")
		case "/small":
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":7,"result":{}}`)
			return
		case "/endless": // JSON without a length that never ends
			w.Header().Set("Content-Type", "application/json")
			chunk := []byte(strings.Repeat("y", 1<<20))
			for r.Context().Err() == nil && sent.Load() < 1<<30 {
				n, err := w.Write(chunk)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
			return
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		}
		_, _ = io.WriteString(w, big)
	}))
	defer srv.Close()
	hc := &http.Client{Transport: limitedBodies{http.DefaultTransport}}
	post := func(path string) (string, error) {
		resp, err := hc.Post(srv.URL+path, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":7,"method":"tools/call"}`))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	const want = `{"error":{"code":-32603,"message":"sandboxd: the server's reply is `
	body, err := post("/json")
	require.NoError(t, err)
	assert.JSONEq(t, want+`16 MiB, more than the limit of 16 MiB a message; it was not read"},"id":7,"jsonrpc":"2.0"}`, body)
	body, err = post("/endless")
	require.NoError(t, err)
	assert.JSONEq(t, want+`more than the limit of 16 MiB a message; it was not read"},"id":7,"jsonrpc":"2.0"}`, body)
	assert.Less(t, sent.Load(), int64(64<<20), "the sender was stopped soon after the limit")
	body, err = post("/small")
	require.NoError(t, err)
	assert.JSONEq(t, `{"jsonrpc":"2.0","id":7,"result":{}}`, body)
	body, err = post("/plain")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "its HTTP reply is more than the limit of 16 MiB a message")
	assert.Len(t, body, MaxMessage)
	body, err = post("/sse")
	require.NoError(t, err)
	assert.Len(t, body, len(big))
}

// A sidecar call that is never answered ends at the call deadline (M14),
// saying so; a cancelled one returns at once.
func TestSidecarCallDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		f := &fakeSidecars{setup: func(srv *mcp.Server) {
			mcp.AddTool(srv, &mcp.Tool{Name: "hang"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
				<-release // never answers, even when cancelled, until the test ends
				return nil, nil, context.Canceled
			})
		}}
		set, cancel := newTestSidecars(t, f)
		defer cancel()
		defer set.Close()
		defer close(release)
		require.NoError(t, set.StartEager(context.Background()))
		c, _ := set.route("fake__hang")
		began := time.Now()
		obs, err := c.call(context.Background(), "fake__hang", nil)
		require.NoError(t, err)
		assert.Equal(t, CallTimeout, time.Since(began))
		assert.True(t, obs.IsError)
		assert.Contains(t, obs.Text(), `mcp server "fake" did not answer fake__hang within 10m0s, the deadline of a sidecar call`)

		ctx, stop := context.WithTimeout(context.Background(), time.Second)
		defer stop()
		began = time.Now()
		_, err = c.call(ctx, "fake__hang", nil)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.LessOrEqual(t, time.Since(began), time.Second+cancelGrace)
		assert.Equal(t, "1", callText(t, set, "fake__count"), "the sidecar still answers")
	})
}
