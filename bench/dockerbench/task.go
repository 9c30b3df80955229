package dockerbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
)

// TaskConfig of RunTask: sessions on a benchmark task image as an
// evaluation harness runs them (images/build-task-image.sh).
type TaskConfig struct {
	Image       string            // the task image (sandboxd-task:latest)
	AgentBinary string            // static sandboxd binary
	Labels      map[string]string // scope labels (see docker.Options.Labels)
	// DiskDir, if set and the daemon can make disk quotas here, makes the
	// hardened sessions' volumes quota-bound (DiskQuota), as serve does.
	DiskDir   string
	DiskQuota int64
	Cold      int // starts measured per scenario (default 5)
	Logger    *slog.Logger
	Progress  func(format string, args ...any)
}

// TaskReport is the result of RunTask. Every session figure is from create
// to "the agent answers", the session closed (and its volumes removed)
// after each.
type TaskReport struct {
	// DockerRun: docker run --rm --network none IMAGE true.
	DockerRun Stat
	// DockerRunVolume: docker run --rm --network none -v /testbed IMAGE
	// true: the engine's own copy of /testbed into a fresh volume.
	DockerRunVolume Stat
	// Seeded: editable_paths [/testbed], plain volumes: sandboxd's copy of
	// /testbed, owned by the session user.
	Seeded Stat
	// Hardened: editable_paths [/testbed, /opt/venv] with the disk quota
	// (Quota says whether it was on).
	Hardened Stat
	Quota    bool
	// ImageUser: user "image" and a writable root.
	ImageUser Stat
	// Files is how many entries the image has under /testbed.
	Files int
}

// RunTask measures, alternating so that drift hits all alike: the two
// docker run baselines and the three session scenarios.
func RunTask(ctx context.Context, cfg TaskConfig) (*TaskReport, error) {
	if cfg.Image == "" || cfg.AgentBinary == "" {
		return nil, fmt.Errorf("dockerbench: Image and AgentBinary are required")
	}
	setDefault(&cfg.Cold, 5)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string, ...any) {}
	}
	rt, err := sdocker.New(ctx, sdocker.Options{AgentBinary: cfg.AgentBinary, Labels: cfg.Labels, Logger: cfg.Logger, DiskDir: cfg.DiskDir})
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	defer func() {
		pctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := rt.Prune(pctx); err != nil { // the agent volume of the writable roots
			cfg.Logger.Warn("dockerbench: pruning", "err", err)
		}
	}()
	m, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{
		Defaults: sandbox.SessionOptions{Image: cfg.Image, IdleTimeout: sandbox.NoIdleTimeout}, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	defer shutdown(m, cfg.Logger)

	r := &TaskReport{Quota: cfg.DiskQuota > 0 && rt.DiskQuota() == nil}
	out, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", cfg.Image, "sh", "-c", "find /testbed | wc -l").Output()
	if err != nil {
		return nil, fmt.Errorf("counting /testbed in %s: %w", cfg.Image, err)
	}
	if _, err := fmt.Sscan(string(out), &r.Files); err != nil {
		return nil, fmt.Errorf("counting /testbed in %s: %q", cfg.Image, out)
	}
	hardened := sandbox.SessionOptions{EditablePaths: []string{"/testbed", "/opt/venv"}}
	if r.Quota {
		hardened.Limits.DiskQuota = cfg.DiskQuota
	}
	scenarios := []struct {
		what string
		into *[]time.Duration
		run  func() (time.Duration, error)
	}{
		{"docker run", new([]time.Duration), func() (time.Duration, error) { return dockerRun(ctx, cfg.Image) }},
		{"docker run -v /testbed", new([]time.Duration), func() (time.Duration, error) {
			return dockerRunArgs(ctx, "run", "--rm", "--network", "none", "-v", "/testbed", cfg.Image, "true")
		}},
		{"session, editable /testbed", new([]time.Duration), func() (time.Duration, error) {
			return sessionReady(ctx, m, sandbox.SessionOptions{EditablePaths: []string{"/testbed"}})
		}},
		{"session, hardened", new([]time.Duration), func() (time.Duration, error) { return sessionReady(ctx, m, hardened) }},
		{"session, image user", new([]time.Duration), func() (time.Duration, error) {
			return sessionReady(ctx, m, sandbox.SessionOptions{User: sandbox.UserImage, WritableRootfs: true})
		}},
	}
	cfg.Progress("task image %s (%d entries in /testbed): %d rounds of %d scenarios, quota %v", cfg.Image, r.Files, cfg.Cold, len(scenarios), r.Quota)
	for i := range cfg.Cold + 1 { // the first round warms the engine's caches and the agent volume
		for _, s := range scenarios {
			d, err := s.run()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.what, err)
			}
			if i > 0 {
				*s.into = append(*s.into, d)
			}
		}
	}
	r.DockerRun = stat("docker run --rm --network none IMAGE true", *scenarios[0].into)
	r.DockerRunVolume = stat("docker run --rm --network none -v /testbed IMAGE true", *scenarios[1].into)
	r.Seeded = stat("session ready, editable /testbed", *scenarios[2].into)
	r.Hardened = stat("session ready, hardened", *scenarios[3].into)
	r.ImageUser = stat("session ready, image user", *scenarios[4].into)
	return r, nil
}

// sessionReady times a create until the agent answers, then closes the
// session (not timed).
func sessionReady(ctx context.Context, m *sandbox.Manager, o sandbox.SessionOptions) (time.Duration, error) {
	start := time.Now()
	s, err := m.Create(ctx, o)
	if err != nil {
		return 0, err
	}
	d := time.Since(start)
	return d, s.Close(ctx)
}

// dockerRunArgs times one docker CLI command.
func dockerRunArgs(ctx context.Context, args ...string) (time.Duration, error) {
	start := time.Now()
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("docker %v: %w", args, err)
	}
	return time.Since(start), nil
}
