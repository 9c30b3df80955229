package docker

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
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
