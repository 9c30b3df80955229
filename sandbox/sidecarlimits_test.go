package sandbox

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
		defer set.close()
		require.NoError(t, set.startEager(context.Background()))
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
		defer set.close()
		require.NoError(t, set.startEager(context.Background()))
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
			for i := range SidecarMaxTools {
				srv.AddTool(&mcp.Tool{Name: fmt.Sprintf("t%d", i), InputSchema: map[string]any{"type": "object"}}, nil)
			}
		}, "more than 1000 tools, the limit"},
		{"too big a tool", func(srv *mcp.Server) {
			srv.AddTool(&mcp.Tool{Name: "huge", Description: strings.Repeat("d", SidecarMaxToolBytes), InputSchema: map[string]any{"type": "object"}}, nil)
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
				defer set.close()
				err := set.startEager(context.Background())
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
			defer set.close()
			err := set.startEager(context.Background())
			require.Error(t, err)
			assert.Contains(t, err.Error(), "more than 100 pages, the limit")
			assert.Equal(t, int64(SidecarMaxPages), pages.Load())
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
	assert.Equal(t, SidecarMaxResultChars+len("\n[...]\n"), utf8.RuneCountInString(body))
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
		{Type: "image", Data: make([]byte, SidecarMaxResultBinary), MIMEType: "image/png"}, {Type: "text", Text: "t"},
		{Type: "audio", Data: []byte{1}, MIMEType: "audio/wav"}}})
	require.Len(t, obs.Content, 2)
	assert.Equal(t, "t", obs.Content[0].Text)
	assert.Contains(t, obs.Text(), "its images and audio (8 MiB) are left out")
}

// An HTTP sidecar's reply body ends in an error past the message limit
// (M13); an event stream is the SDK's to bound, event by event.
func TestLimitedBodies(t *testing.T) {
	big := strings.Repeat("x", SidecarMaxMessage+1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/sse":
			w.Header().Set("Content-Type", "text/event-stream")
		case "/chunked": // no Content-Length
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, big[:1<<20])
			w.(http.Flusher).Flush()
		default:
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", fmt.Sprint(len(big)))
		}
		_, _ = io.WriteString(w, big)
	}))
	defer srv.Close()
	hc := &http.Client{Transport: limitedBodies{http.DefaultTransport}}
	get := func(path string) (int, error) {
		resp, err := hc.Get(srv.URL + path)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return len(b), err
	}
	_, err := get("/json")
	require.Error(t, err, "a body with a Content-Length over the limit")
	assert.Contains(t, err.Error(), "its HTTP reply is 16 MiB, more than the limit of 16 MiB a message")
	n, err := get("/chunked")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "its HTTP reply is more than the limit of 16 MiB a message")
	assert.Equal(t, SidecarMaxMessage, n)
	n, err = get("/sse")
	require.NoError(t, err)
	assert.Equal(t, len(big), n)
}
