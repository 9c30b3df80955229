// Package api holds the end-to-end tests of sandboxd's APIs against a real
// Docker engine: MCP through the official Go SDK client, the WebSocket API
// through a bare gorilla client and the Go client, and the CLI against a
// `sandboxd serve` process. Sessions run the test image (sandboxd-test,
// built by images/build-test-image.sh when missing).
//
// Every container, volume and network of a run carries labelRun=<run id>;
// the suite fails if any is left at the end.
package api

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"
	"github.com/sandboxd/sandboxd/server/daemon"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/client"
	"go.uber.org/goleak"

	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server"
	"github.com/sandboxd/sandboxd/server/auth"
)

// labelRun scopes everything a run makes; the runtimes of this suite only
// see (adopt, reap) resources with it, so they never touch other runs.
const labelRun = "sandboxd.e2e-api.run"

// labelTest scopes one test's daemons (beside labelRun): a daemon adopts
// every live session of its scope when it starts, so daemons of tests
// running in parallel under one scope adopted each other's sandboxes and
// closed them when their own test ended (issue 23: TestMCPTransferTools'
// sandbox shut down, exit 0, in the middle of an upload under load). Two
// daemons of one test (a restart) share its scope, as a restart would.
const labelTest = "sandboxd.e2e-api.test"

var unsafeLabel = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// testScope is the value of labelTest for t's daemons: its top-level
// test's name.
func testScope(t *testing.T) string {
	name, _, _ := strings.Cut(t.Name(), "/")
	return unsafeLabel.ReplaceAllString(name, "_")
}

var (
	binary    string // static sandboxd binary (agent and CLI)
	testImage string
	runID     string
	engine    *client.Client
	diskDir   string // --disk-dir of every serve process (quota-bound volumes)
)

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e/api: skipped with -short")
		os.Exit(0)
	}
	code, err := setup(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e/api:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if os.Getenv("SANDBOXD_E2E_VERBOSE") == "" {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}
	var err error
	if engine, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation()); err != nil {
		return 0, err
	}
	defer engine.Close()
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	_, err = engine.Ping(pctx)
	pcancel()
	if err != nil {
		fmt.Println("e2e/api: skipped, no Docker engine:", err)
		return 0, nil
	}
	// Lower case letters and digits: runID goes into image tags, network
	// namespace and interface names, where a token's '-' or '_' may not
	// start a name (a tag of "-V3JH..." failed a build).
	runID = strings.ToLower(rand.Text()[:12])
	tmp, err := os.MkdirTemp("", "sandboxd-e2e-api-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	diskDir = filepath.Join(tmp, "disks")
	if binary, err = testenv.BuildBinary(ctx, tmp); err != nil {
		return 0, err
	}
	if testImage, err = testenv.EnsureTestImage(ctx, engine); err != nil {
		return 0, err
	}

	before := goleak.IgnoreCurrent() // the engine client's idle connections, etc.
	code := m.Run()

	if left := testenv.Leftovers(context.Background(), engine, labelRun, runID); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e/api: resources left behind: %s\n", strings.Join(left, ", "))
		code = 1
	}
	if left := testenv.DiskLeftovers(diskDir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e/api: disks left behind: %s\n", strings.Join(left, ", "))
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(before,
			// Idle keep-alive connections, matched anywhere in the stack
			// (not runtime_pollWait: that hides leaked socket readers).
			goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop")); err != nil {
			fmt.Fprintln(os.Stderr, "e2e/api: goroutine leak:", err)
			code = 1
		}
	}
	return code, nil
}

// containers counts this run's session containers.
func containers(t *testing.T) int {
	t.Helper()
	return len(runContainers(t))
}

// runContainers lists this run's session containers that exist. Docker
// 20.10 can keep a ghost in its list: in under-load run 3 of issue 23 a
// container whose shim died 0.8 s after its start stayed listed as
// "Removal In Progress" for over an hour while inspect and rm answered
// "No such container" and its folder was gone; it failed every later
// test's check. A container the engine says does not exist is not left
// behind, so one that inspect does not find is not counted.
func runContainers(t *testing.T) []container.Summary {
	t.Helper()
	f := filters.NewArgs(filters.Arg("label", labelRun+"="+runID), filters.Arg("label", sandbox.LabelManaged+"=true"))
	ctrs, err := engine.ContainerList(context.Background(), container.ListOptions{All: true, Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	exist := ctrs[:0]
	for _, c := range ctrs {
		if testenv.Ghost(context.Background(), engine, c.ID) {
			continue
		}
		exist = append(exist, c)
	}
	return exist
}

// waitNoContainers waits up to 2 min for the run's containers to be gone
// (a session's end is announced before its removal finishes).
func waitNoContainers(t *testing.T, what string) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Minute); containers(t) != 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d containers left: %s: %s", containers(t), what, leftContainers(t))
		}
	}
}

// leftContainers says which of the run's containers are left, with their
// state and the test scope that made them: the count is of the whole run,
// so one container the engine never finishes removing fails every later
// test's check (under-load run 3 of issue 23: "Removal In Progress" for
// 20 min; it was an engine ghost, see runContainers), and only its labels
// say whose it is.
func leftContainers(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, c := range runContainers(t) {
		fmt.Fprintf(&b, "\n  %s %v %s (%s) scope %q session %q created %s",
			c.ID[:12], c.Names, c.State, c.Status, c.Labels[labelTest], c.Labels[sandbox.LabelSession],
			c.Labels[sandbox.LabelCreated])
	}
	return b.String()
}

// apiServer is an in-process server over a real Docker runtime.
type apiServer struct {
	*server.Server
	http    *httptest.Server
	token   string
	base    string // http://127.0.0.1:port
	ws      string // ws://127.0.0.1:port/v1/ws
	manager *sandbox.Manager
}

// startServer starts a server whose sessions (and MCP sessions) run the
// test image; it is shut down, closing every session, when the test ends.
func startServer(t *testing.T) *apiServer {
	t.Helper()
	return startServerWith(t, nil)
}

// startServerWith is startServer with options changed by set (nil: none),
// e.g. a short MCPSessionTimeout.
func startServerWith(t *testing.T, set func(*server.Options)) *apiServer {
	t.Helper()
	return startServerIn(t, testScope(t), set)
}

// startServerIn is startServerWith in a scope of its own (labelTest=scope),
// for a test that runs a second server beside its first: two servers of one
// scope refuse each other (the scope lock).
func startServerIn(t *testing.T, scope string, set func(*server.Options)) *apiServer {
	t.Helper()
	d := newDaemon(t, func(c *daemon.Config) { c.ServerHook = set; c.Labels[labelTest] = scope })
	hs := httptest.NewServer(d.Handler())
	s := &apiServer{Server: d.Server, http: hs, token: d.Token, base: hs.URL, ws: "ws" + strings.TrimPrefix(hs.URL, "http") + "/v1/ws", manager: d.Manager}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := d.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v\nthe server's goroutines:\n%s", err, testenv.Goroutines("sandboxd/server/", "sandboxd/client."))
		}
		hs.CloseClientConnections()
		hs.Close()
	})
	return s
}

// newDaemon assembles an in-process daemon as `sandboxd serve` does
// (package daemon: the direct path to the agent on, in a state folder of
// the test's), for the test image, scoped by the run's label, without a
// disk quota; adjust (may be nil) changes its configuration first.
func newDaemon(t *testing.T, adjust func(*daemon.Config)) *daemon.Daemon {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := daemon.New(ctx, daemonConfig(t, adjust))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// daemonConfig is the config newDaemon starts a daemon with.
func daemonConfig(t *testing.T, adjust func(*daemon.Config)) daemon.Config {
	t.Helper()
	c := daemon.Defaults()
	c.StateDir, c.AgentBinary, c.Logger, c.Token = t.TempDir(), binary, slog.Default(), auth.NewToken()
	c.Image, c.MCPImage = testImage, testImage
	c.Labels = daemon.KeyValues{labelRun: runID, labelTest: testScope(t)}
	c.DiskBackend = daemon.DiskNone
	if adjust != nil {
		adjust(&c)
	}
	return c
}

// waitUntil polls cond until it holds, failing the test after limit (a bound
// on a hang, not a figure).
func waitUntil(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
