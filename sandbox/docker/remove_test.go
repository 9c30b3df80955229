package docker

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// removalEngine answers container removals from answers, in turn (the last
// repeats), and every inspection with 404.
func removalEngine(t *testing.T, answers ...func(http.ResponseWriter)) (*Runtime, *atomic.Int32) {
	t.Helper()
	var removes atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		switch {
		case req.Method == http.MethodDelete && strings.Contains(req.URL.Path, "/containers/"):
			n := int(removes.Add(1)) - 1
			answers[min(n, len(answers)-1)](w)
		case req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/json"):
			http.Error(w, `{"message":"No such container: c1"}`, http.StatusNotFound)
		default:
			http.Error(w, `{"message":"unexpected"}`, http.StatusTeapot)
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+strings.TrimPrefix(srv.URL, "http://")), client.WithVersion("1.41"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return &Runtime{cli: cli, log: slog.New(slog.DiscardHandler), removeBackoff: time.Nanosecond}, &removes
}

func answer(code int, msg string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if code == http.StatusNoContent {
			w.WriteHeader(code)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"message":"` + msg + `"}`))
	}
}

const notRunning = "Could not kill running container c1, cannot remove - Container c1 is not running"

func TestRemoveContainerRetriesAContainerThatExitedDuringTheKill(t *testing.T) {
	r, removes := removalEngine(t, answer(http.StatusInternalServerError, notRunning), answer(http.StatusNoContent, ""))
	require.NoError(t, r.removeContainer(t.Context(), "c1"))
	assert.Equal(t, int32(2), removes.Load())
}

func TestRemoveContainerGivesUpAfterItsAttempts(t *testing.T) {
	r, removes := removalEngine(t, answer(http.StatusInternalServerError, notRunning))
	err := r.removeContainer(t.Context(), "c1")
	require.ErrorContains(t, err, "is not running")
	assert.Equal(t, int32(removeAttempts), removes.Load())
}

func TestRemoveContainerWaitsOutARemovalInProgress(t *testing.T) {
	r, removes := removalEngine(t, answer(http.StatusConflict, "removal of container c1 is already in progress"))
	require.NoError(t, r.removeContainer(t.Context(), "c1"))
	assert.Equal(t, int32(1), removes.Load(), "a removal in progress is waited for, not repeated")
}

func TestRemoveContainerStopsWhenItsContextEnds(t *testing.T) {
	r, removes := removalEngine(t, answer(http.StatusInternalServerError, notRunning))
	r.removeBackoff = time.Hour
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	require.ErrorContains(t, r.removeContainer(ctx, "c1"), "context canceled")
	assert.LessOrEqual(t, removes.Load(), int32(1), "no try after the context ended")
}

// closedEngine is an engine with one session's workspace volume and this
// runtime's agent volume, and no containers; it records the volumes
// removed.
func closedEngine(t *testing.T) (*Runtime, func() []string) {
	t.Helper()
	var mu sync.Mutex
	var removed []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/containers/json"),
			req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/networks"):
			_, _ = w.Write([]byte(`[]`))
		case req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/volumes"):
			if strings.Contains(req.URL.Query().Get("filters"), LabelAgent) {
				_, _ = w.Write([]byte(`{"Volumes":[{"Name":"sandboxd-agent-default-0123456789abcdef","Labels":{}}]}`))
				return
			}
			_, _ = w.Write([]byte(`{"Volumes":[{"Name":"sandboxd-s1-workspace","Labels":{}}]}`))
		case req.Method == http.MethodDelete && strings.Contains(req.URL.Path, "/volumes/"):
			mu.Lock()
			removed = append(removed, req.URL.Path[strings.LastIndex(req.URL.Path, "/")+1:])
			mu.Unlock()
			w.WriteHeader(http.StatusNoContent)
		default:
			http.Error(w, `{"message":"unexpected"}`, http.StatusTeapot)
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+strings.TrimPrefix(srv.URL, "http://")), client.WithVersion("1.41"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	r := &Runtime{cli: cli, log: slog.New(slog.DiscardHandler), opts: Options{CallTimeout: time.Minute},
		agent: &agentBinary{sum: strings.Repeat("0123456789abcdef", 4), scope: "default"}}
	return r, func() []string { mu.Lock(); defer mu.Unlock(); return slices.Clone(removed) }
}

// Issue 24: a session removed after the runtime closed (a shutdown whose
// time ran out while removals ran) removes the shared agent volume, which
// the close found still mounted; before the close, a removal leaves it to
// the sessions that still use it.
func TestRemoveAfterClosePrunesTheAgentVolume(t *testing.T) {
	r, removed := closedEngine(t)
	require.NoError(t, r.Remove(t.Context(), "s1"))
	assert.Equal(t, []string{"sandboxd-s1-workspace"}, removed(), "while the runtime is open, the agent volume is shared")

	r, removed = closedEngine(t)
	r.pruneAtClose()
	assert.Equal(t, []string{"sandboxd-agent-default-0123456789abcdef"}, removed(), "the close's own prune")
	require.NoError(t, r.Remove(t.Context(), "s1"))
	assert.Equal(t, []string{"sandboxd-agent-default-0123456789abcdef", "sandboxd-s1-workspace", "sandboxd-agent-default-0123456789abcdef"}, removed(),
		"a removal after the close prunes again")
}
