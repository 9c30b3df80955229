package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/sandboxd/sandboxd/bench/dockerbench"
)

func init() {
	register(suite{
		name: "task",
		about: "sessions on a benchmark task image as an evaluation harness runs them: editable /testbed (10,000 files seeded, " +
			"owned by the session user) vs the engine's own volume copy, both modes vs `docker run` of the same image " +
			"(image: $SANDBOXD_TASK_IMAGE or sandboxd-task:latest; make task-image)",
		run: runTaskSuite,
	})
}

func runTaskSuite(ctx context.Context, e *env) ([]row, error) {
	bin, err := e.sandboxdBinary()
	if err != nil {
		return nil, err
	}
	image := os.Getenv("SANDBOXD_TASK_IMAGE")
	if image == "" {
		image = "sandboxd-task:latest"
	}
	r, err := dockerbench.RunTask(ctx, dockerbench.TaskConfig{
		Image:       image,
		AgentBinary: bin,
		Labels:      map[string]string{"sandboxd.bench.run": strconv.FormatInt(time.Now().UnixNano(), 36)},
		DiskDir:     filepath.Join(e.tmp, "disks"),
		DiskQuota:   10 << 30, // serve's default --disk-quota
		Cold:        e.n(5),
		Progress:    e.logf,
	})
	if err != nil {
		return nil, fmt.Errorf("task suite (is the engine up and %s built? make task-image): %w", image, err)
	}
	quota := "10 GiB disk quota, as serve"
	if !r.Quota {
		quota = "no disk quota: the daemon cannot make one here"
	}
	seedT, seedMet := ratioAtMost(1.5)
	return []row{
		{scenario: fmt.Sprintf("task: session ready, editable /testbed (%d entries seeded, owned by the session user)", r.Files), s: sampleOf(r.Seeded),
			baseline: "docker run --rm --network none -v /testbed IMAGE true (the engine's copy into a fresh volume)", base: sampleOf(r.DockerRunVolume),
			target: seedT, met: seedMet},
		{scenario: "task: session ready, hardened (editable /testbed and /opt/venv, " + quota + ")", s: sampleOf(r.Hardened),
			baseline: "docker run --rm --network none IMAGE true", base: sampleOf(r.DockerRun)},
		{scenario: "task: session ready, the image's user (root) and a writable root", s: sampleOf(r.ImageUser),
			baseline: "docker run --rm --network none IMAGE true", base: sampleOf(r.DockerRun)},
	}, nil
}
