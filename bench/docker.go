package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/bench/dockerbench"
)

func init() {
	register(suite{
		name:  "docker",
		about: "sessions in real Docker sandboxes: cold start vs `docker run`, warm-pool hand-out, tool call vs `docker exec` (image: $SANDBOXD_TEST_IMAGE or sandboxd-test:latest)",
		run:   runDockerSuite,
	})
}

func runDockerSuite(ctx context.Context, e *env) ([]row, error) {
	bin, err := e.sandboxdBinary()
	if err != nil {
		return nil, err
	}
	image := os.Getenv("SANDBOXD_TEST_IMAGE")
	if image == "" {
		image = "sandboxd-test:latest"
	}
	r, err := dockerbench.Run(ctx, dockerbench.Config{
		Image:       image,
		AgentBinary: bin,
		Labels:      map[string]string{"sandboxd.bench.run": strconv.FormatInt(time.Now().UnixNano(), 36)},
		Cold:        e.n(10),
		Warm:        e.n(20),
		Calls:       e.n(2000),
		Execs:       e.n(50),
		Progress:    e.logf,
	})
	if err != nil {
		return nil, fmt.Errorf("docker suite (is the engine up and %s built? make test-image): %w", image, err)
	}
	coldT, coldMet := ratioAtMost(1.5)
	warmT, warmMet := p50Below(20 * time.Millisecond)
	callT, callMet := p50Below(time.Millisecond)
	return []row{
		{scenario: "docker: session ready, cold (create+attach+start+agent ping)", s: sampleOf(r.ColdSession),
			baseline: "docker run --rm --network none IMAGE true", base: sampleOf(r.DockerRun), target: coldT, met: coldMet},
		{scenario: "docker: session hand-out from the warm pool", s: sampleOf(r.WarmHandOut), target: warmT, met: warmMet},
		{scenario: "docker: ping through the container's stream", s: sampleOf(r.Ping)},
		{scenario: "docker: tool call through the container (file_editor view, 1 line)", s: sampleOf(r.ToolCall), target: callT, met: callMet},
		{scenario: "docker: tool call vs per-call exec", s: sampleOf(r.ToolCall),
			baseline: "docker exec true (create+start+wait, Go client)", base: sampleOf(r.DockerExec),
			target: "≥ 50x faster than baseline", met: func(r row) bool { return r.base.p50 >= 50*r.s.p50 }},
	}, nil
}

func sampleOf(s dockerbench.Stat) sample { return sample{n: s.N, p50: s.P50, p99: s.P99} }
