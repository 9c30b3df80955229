package dockerbench

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRun runs the measurements with few samples and logs the report. It
// needs a Docker engine and a static sandboxd binary:
//
//	SANDBOXD_BENCH_BINARY=bin/sandboxd go test -v -run TestRun ./bench/dockerbench
//
// SANDBOXD_BENCH_FULL=1 uses the full sample counts.
func TestRun(t *testing.T) {
	bin := os.Getenv("SANDBOXD_BENCH_BINARY")
	if testing.Short() || bin == "" {
		t.Skip("set SANDBOXD_BENCH_BINARY to a static sandboxd binary (and have Docker) to run")
	}
	image := os.Getenv("SANDBOXD_TEST_IMAGE")
	if image == "" {
		image = "sandboxd-test:latest"
	}
	cfg := Config{Image: image, AgentBinary: bin, Cold: 3, Warm: 5, Calls: 200, Execs: 10,
		Labels:   map[string]string{"sandboxd.bench.run": strconv.FormatInt(time.Now().UnixNano(), 36)},
		Progress: func(f string, a ...any) { t.Logf(f, a...) }}
	if os.Getenv("SANDBOXD_BENCH_FULL") != "" {
		cfg.Cold, cfg.Warm, cfg.Calls, cfg.Execs = 0, 0, 0, 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := Run(ctx, cfg)
	require.NoError(t, err)
	for _, s := range []Stat{r.DockerRun, r.ColdSession, r.WarmHandOut, r.Ping, r.ToolCall, r.DockerExec} {
		t.Logf("%-55s n=%-5d p50=%-10v p90=%-10v p99=%v", s.Name, s.N, s.P50, s.P90, s.P99)
	}
	t.Logf("cold ratio %.2fx (target <= 1.5), exec/call %.0fx (target >= 50)", r.ColdRatio(), r.ExecSpeedup())
}
