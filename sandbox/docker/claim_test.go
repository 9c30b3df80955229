package docker

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/client"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sandboxd/sandboxd/sandbox"
)

// claimEngine is a fake engine with one container, named name, of session
// s1; it records every request as "METHOD path?query".
func claimEngine(t *testing.T, name string) (*Runtime, func() []string) {
	t.Helper()
	var (
		mu  sync.Mutex
		got []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		mu.Lock()
		_, path, _ := strings.Cut(req.URL.Path, "/v1.41")
		got = append(got, req.Method+" "+path)
		mu.Unlock()
		switch {
		case req.Method == http.MethodPost && strings.HasSuffix(req.URL.Path, "/rename"):
			ref := strings.TrimSuffix(strings.TrimPrefix(path, "/containers/"), "/rename")
			if ref != name && ref != "c1" {
				answer(http.StatusNotFound, "No such container: "+ref)(w)
				return
			}
			name = req.URL.Query().Get("name")
			w.WriteHeader(http.StatusNoContent)
		case req.Method == http.MethodGet && strings.HasSuffix(req.URL.Path, "/containers/json"):
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`[{"Id":"c1","Names":["/` + name + `"],"Labels":{"` + sandbox.LabelSession + `":"s1"}}]`))
		default:
			answer(http.StatusTeapot, "unexpected")(w)
		}
	}))
	t.Cleanup(srv.Close)
	cli, err := client.NewClientWithOpts(client.WithHost("tcp://"+strings.TrimPrefix(srv.URL, "http://")), client.WithVersion("1.41"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = cli.Close() })
	return &Runtime{cli: cli, log: slog.New(slog.DiscardHandler), opts: Options{CallTimeout: time.Minute}}, func() []string { mu.Lock(); defer mu.Unlock(); return got }
}

func TestClaimRenamesByThePooledNameInOneCall(t *testing.T) {
	r, requests := claimEngine(t, "sandboxd-pool-s1")
	require.NoError(t, r.Claim(t.Context(), "s1"))
	assert.Equal(t, []string{"POST /containers/sandboxd-pool-s1/rename"}, requests(), "no listing")
}

func TestClaimOfAClaimedSandboxIsANoOp(t *testing.T) {
	r, requests := claimEngine(t, "sandboxd-s1")
	require.NoError(t, r.Claim(t.Context(), "s1"))
	assert.Equal(t, []string{"POST /containers/sandboxd-pool-s1/rename", "GET /containers/json"}, requests())
}
