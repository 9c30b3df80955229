package dockerbench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

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

// TaskSizesConfig of RunTaskSizes: cold sessions on task images of
// different sizes, each against `docker run` of the same image.
type TaskSizesConfig struct {
	Images      []string          // task images (images/build-task-image.sh with SANDBOXD_TASK_FILES)
	AgentBinary string            // static sandboxd binary
	Labels      map[string]string // scope labels (see docker.Options.Labels)
	// DiskDir and DiskQuota as in TaskConfig: the sessions' volumes are
	// quota-bound as serve makes them, where the daemon can.
	DiskDir   string
	DiskQuota int64
	// Copy seeds by copying (docker.Options.NoOverlaySeed): the route of
	// decision 0028, for comparison.
	Copy     bool
	Cold     int // starts measured per image and scenario (default 5)
	Logger   *slog.Logger
	Progress func(format string, args ...any)
}

// TaskSizeReport is one image's result of RunTaskSizes.
type TaskSizeReport struct {
	Image string
	// Entries is how many entries /testbed and /opt/venv hold in the
	// image: what a session edits (its editable paths).
	Entries int
	// DockerRun: docker run --rm --network none IMAGE true.
	DockerRun Stat
	// Ready: a session with editable_paths [/testbed, /opt/venv], from
	// create to "the agent answers".
	Ready Stat
	// DiskBytes is the host disk a fresh session holds (p50 over the
	// sessions measured): its overlay folders, quota files and volumes,
	// blocks allocated.
	DiskBytes int64
	// Overlay says whether the sessions were seeded by overlay; if not,
	// Why says why they were copied.
	Overlay bool
	Why     string
	Quota   bool
}

// RunTaskSizes measures, per image and alternating: docker run of the
// image, and a session with its /testbed and /opt/venv editable (the disk
// it holds measured before it is closed).
func RunTaskSizes(ctx context.Context, cfg TaskSizesConfig) ([]TaskSizeReport, error) {
	if len(cfg.Images) == 0 || cfg.AgentBinary == "" {
		return nil, fmt.Errorf("dockerbench: Images and AgentBinary are required")
	}
	setDefault(&cfg.Cold, 5)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Progress == nil {
		cfg.Progress = func(string, ...any) {}
	}
	rt, err := sdocker.New(ctx, sdocker.Options{AgentBinary: cfg.AgentBinary, Labels: cfg.Labels, Logger: cfg.Logger,
		DiskDir: cfg.DiskDir, NoOverlaySeed: cfg.Copy})
	if err != nil {
		return nil, err
	}
	defer rt.Close()
	m, err := sandbox.NewManager(ctx, rt, sandbox.ManagerOptions{
		Defaults: sandbox.SessionOptions{IdleTimeout: sandbox.NoIdleTimeout}, Logger: cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	defer shutdown(m, cfg.Logger)
	quota := cfg.DiskQuota > 0 && rt.DiskQuota() == nil
	var out []TaskSizeReport
	for _, img := range cfg.Images {
		r := TaskSizeReport{Image: img, Quota: quota, Overlay: rt.OverlaySeeding() == nil}
		if err := rt.OverlaySeeding(); err != nil {
			r.Why = err.Error()
		}
		o := sandbox.SessionOptions{Image: img, EditablePaths: []string{"/testbed", "/opt/venv"}}
		if quota {
			o.Limits.DiskQuota = cfg.DiskQuota
		}
		cnt, err := exec.CommandContext(ctx, "docker", "run", "--rm", "--network", "none", img, "sh", "-c", "find /testbed /opt/venv | wc -l").Output()
		if err != nil {
			return nil, fmt.Errorf("counting /testbed and /opt/venv in %s: %w", img, err)
		}
		if _, err := fmt.Sscan(string(cnt), &r.Entries); err != nil {
			return nil, fmt.Errorf("counting /testbed and /opt/venv in %s: %q", img, cnt)
		}
		cfg.Progress("task image %s (%d entries in /testbed and /opt/venv): %d rounds, overlay %v, quota %v", img, r.Entries, cfg.Cold, r.Overlay, quota)
		var runs, ready []time.Duration
		var disks []int64
		for i := range cfg.Cold + 1 { // the first round warms the engine's caches
			d, err := dockerRun(ctx, img)
			if err != nil {
				return nil, err
			}
			start := time.Now()
			s, err := m.Create(ctx, o)
			if err != nil {
				return nil, fmt.Errorf("session on %s: %w", img, err)
			}
			took := time.Since(start)
			used, derr := sessionDisk(ctx, rt, s.ID())
			if err := s.Close(ctx); err != nil {
				return nil, err
			}
			if derr != nil {
				return nil, derr
			}
			if i > 0 {
				runs, ready, disks = append(runs, d), append(ready, took), append(disks, used)
			}
		}
		r.DockerRun = stat("docker run --rm --network none IMAGE true", runs)
		r.Ready = stat("session ready, editable /testbed and /opt/venv", ready)
		slices.Sort(disks)
		r.DiskBytes = disks[(len(disks)-1)/2]
		out = append(out, r)
	}
	return out, nil
}

// sessionDisk is the host disk that session id holds: blocks allocated to
// its files and folders in the runtime's disk directory (a quota
// filesystem's file holds what is on it; an overlay folder on the host's
// disk is counted without the overlay mounted in it) and to its engine
// volumes that have no quota file, each hard-linked file once.
func sessionDisk(ctx context.Context, rt *sdocker.Runtime, id string) (int64, error) {
	seen := map[[2]uint64]bool{}
	var total int64
	if dir := rt.DiskDir(); dir != "" {
		ents, err := os.ReadDir(dir)
		if err != nil {
			return 0, err
		}
		var top syscall.Stat_t
		if err := syscall.Stat(dir, &top); err != nil {
			return 0, err
		}
		for _, e := range ents {
			if !strings.Contains(e.Name(), id) {
				continue
			}
			n, err := duOneFS(filepath.Join(dir, e.Name()), top.Dev, seen)
			if err != nil {
				return 0, err
			}
			total += n
		}
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	vols, err := rt.Client().VolumeList(cctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+id))})
	if err != nil {
		return 0, err
	}
	for _, v := range vols.Volumes {
		if v.Labels[sdocker.LabelDiskFile] != "" || v.Mountpoint == "" {
			continue // counted with its file
		}
		var st syscall.Stat_t
		if err := syscall.Stat(v.Mountpoint, &st); err != nil {
			return 0, err
		}
		n, err := duOneFS(v.Mountpoint, st.Dev, seen)
		if err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

// duOneFS is du -x of root: the blocks of what lies under it on device
// dev (a quota filesystem mounted on an overlay folder is skipped: its
// file counts it).
func duOneFS(root string, dev uint64, seen map[[2]uint64]bool) (int64, error) {
	var total int64
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if st.Dev != dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		k := [2]uint64{st.Dev, st.Ino}
		if seen[k] {
			return nil
		}
		seen[k] = true
		total += st.Blocks * 512
		return nil
	})
	return total, err
}
