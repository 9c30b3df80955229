package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
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
	sized, err := runTaskSizes(ctx, e, bin)
	if err != nil {
		return nil, err
	}
	return append(sized, []row{
		{scenario: fmt.Sprintf("task: session ready, editable /testbed (%d entries seeded, owned by the session user)", r.Files), s: sampleOf(r.Seeded),
			baseline: "docker run --rm --network none -v /testbed IMAGE true (the engine's copy into a fresh volume)", base: sampleOf(r.DockerRunVolume),
			target: seedT, met: seedMet},
		{scenario: "task: session ready, hardened (editable /testbed and /opt/venv, " + quota + ")", s: sampleOf(r.Hardened),
			baseline: "docker run --rm --network none IMAGE true", base: sampleOf(r.DockerRun)},
		{scenario: "task: session ready, the image's user (root) and a writable root", s: sampleOf(r.ImageUser),
			baseline: "docker run --rm --network none IMAGE true", base: sampleOf(r.DockerRun)},
	}...), nil
}

// taskSizes are the task images of the size rows (issue 24): /testbed and
// /opt/venv (1,682 entries) together about 2,000 and 30,000 entries,
// built from images/task by images/build-task-image.sh (skipped when
// current) with SANDBOXD_TASK_FILES files in /testbed.
var taskSizes = []struct {
	label, image string
	files        int
	target       float64 // ready p50 at most this many times docker run's
}{
	{"2k", "sandboxd-task-2k:latest", 300, 1.5},
	{"30k", "sandboxd-task-30k:latest", 28000, 2},
}

// runTaskSizes gives the size rows: a cold session with /testbed and
// /opt/venv editable on each image against `docker run --rm IMAGE true`
// of it in the same run, the host disk a fresh session holds in the row.
func runTaskSizes(ctx context.Context, e *env, bin string) ([]row, error) {
	images := make([]string, len(taskSizes))
	for i, ts := range taskSizes {
		images[i] = ts.image
		e.logf("building %s (%d files in /testbed) unless current", ts.image, ts.files)
		cmd := exec.CommandContext(ctx, filepath.Join("images", "build-task-image.sh"))
		cmd.Env = append(os.Environ(), "SANDBOXD_TASK_IMAGE="+ts.image, "SANDBOXD_TASK_FILES="+strconv.Itoa(ts.files))
		cmd.Stdout, cmd.Stderr = e.log, e.log
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("building %s (run from the repository's root): %w", ts.image, err)
		}
	}
	reps, err := dockerbench.RunTaskSizes(ctx, dockerbench.TaskSizesConfig{
		Images:      images,
		AgentBinary: bin,
		Labels:      map[string]string{"sandboxd.bench.run": strconv.FormatInt(time.Now().UnixNano(), 36)},
		DiskDir:     filepath.Join(e.tmp, "disks"),
		DiskQuota:   10 << 30, // serve's default --disk-quota
		Cold:        e.n(5),
		Progress:    e.logf,
	})
	if err != nil {
		return nil, fmt.Errorf("task size rows: %w", err)
	}
	var rows []row
	for i, r := range reps {
		route := "seeded by overlay"
		if !r.Overlay {
			route = "copied (no overlay here: " + r.Why + ")"
		}
		quota := "10 GiB quota"
		if !r.Quota {
			quota = "no quota"
		}
		t, met := ratioAtMost(taskSizes[i].target)
		rows = append(rows, row{
			scenario: fmt.Sprintf("task %s: session ready, editable /testbed and /opt/venv (%d entries, %s, %s; host disk of a fresh session %.1f MiB)",
				taskSizes[i].label, r.Entries, route, quota, float64(r.DiskBytes)/(1<<20)),
			s: sampleOf(r.Ready), baseline: "docker run --rm --network none IMAGE true", base: sampleOf(r.DockerRun),
			target: t, met: met,
		})
	}
	return rows, nil
}
