package e2e

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testenv"

	"github.com/docker/docker/client"
	"github.com/google/uuid"
	"go.uber.org/goleak"
)

// Suite-wide state, set up once by TestMain.
var (
	agentBinary string         // static sandboxd binary
	testImage   string         // image every session runs
	runID       string         // value of labelRun on everything this run makes
	docker      *client.Client // for inspecting and killing from outside
	diskDir     string         // every runtime's DiskDir (quota-bound volumes)
	directDir   string         // every runtime's DirectDir (the direct path's folders)
)

// labelRun scopes every resource of a run (runtimes add it and filter by it).
const labelRun = "sandboxd.e2e.run"

func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		fmt.Println("e2e: skipped with -short")
		os.Exit(0)
	}
	code, err := run(m)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(m *testing.M) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if os.Getenv("SANDBOXD_E2E_VERBOSE") == "" {
		slog.SetDefault(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	}
	var err error
	docker, err = client.NewClientWithOpts(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return 0, err
	}
	pctx, pcancel := context.WithTimeout(ctx, 10*time.Second)
	_, perr := docker.Ping(pctx)
	pcancel()
	if perr != nil {
		docker.Close()
		fmt.Println("e2e: skipped, no Docker engine:", perr)
		return 0, nil
	}
	runID = uuid.NewString()[:12]

	tmp, err := os.MkdirTemp("", "sandboxd-e2e-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	diskDir = filepath.Join(tmp, "disks")
	directDir = filepath.Join(tmp, "direct")
	if agentBinary, err = testenv.BuildBinary(ctx, tmp); err != nil {
		return 0, err
	}
	if testImage, err = testenv.EnsureTestImage(ctx, docker); err != nil {
		return 0, err
	}

	code := m.Run()

	// The checks at the end get a bound of their own: the one above is
	// spent once the tests ran longer than it (a loaded machine, image
	// builds), and a spent one reports every check as a leftover.
	ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Nothing of this run may be left, whatever the tests did.
	if left := testenv.Leftovers(ctx, docker, labelRun, runID); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: resources left behind: %s\n", strings.Join(left, ", "))
		code = 1
	}
	if left := testenv.DiskLeftovers(diskDir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: disks left behind: %s\n", strings.Join(left, ", "))
		code = 1
	}
	if left := directLeftovers(directDir); len(left) > 0 {
		fmt.Fprintf(os.Stderr, "e2e: direct path folders left behind: %s\n", strings.Join(left, ", "))
		code = 1
	}
	removeBuiltImages(ctx)
	docker.Close()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: goroutine leak:", err)
			code = 1
		}
	}
	return code, nil
}
