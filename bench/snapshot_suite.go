package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandboxd/sandboxd/client"
	"github.com/sandboxd/sandboxd/sandbox"
	"github.com/sandboxd/sandboxd/server/daemon"
)

func init() {
	register(suite{
		name: "snapshot",
		about: "session.snapshot time and session.fork x8 / x32 wall time for a workspace diff of 10 MB, 100 MB and 1 GB, " +
			"vs the same number of cold session.creates in the same run (decision 0052); disk used per fork. " +
			"SANDBOXD_BENCH_SNAPSHOT_MB limits the sizes (comma-separated MB)",
		run: runSnapshotSuite,
	})
}

func runSnapshotSuite(ctx context.Context, e *env) (_ []row, err error) {
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	scope, err := newRunScope()
	if err != nil {
		return nil, err
	}
	defer scope.end(&err, "snapshot suite")
	ip, err := startInProcess(ctx, "snapshot", su.bin, su.image, su.quiet, scope.labels(), 2*time.Minute, func(c *daemon.Config) {
		c.MaxStarts = 8
		c.MaxSessions = 100
	})
	if err != nil {
		return nil, err
	}
	defer ip.stop()
	c, err := client.Dial(ctx, ip.ws, ip.token, client.Options{})
	if err != nil {
		return nil, err
	}
	defer func() { _ = c.Close() }()

	sizes := []int{10, 100, 1000}
	if v := os.Getenv("SANDBOXD_BENCH_SNAPSHOT_MB"); v != "" {
		sizes = nil
		for _, f := range strings.Split(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("SANDBOXD_BENCH_SNAPSHOT_MB: %q is not a size in MB", f)
			}
			sizes = append(sizes, n)
		}
	}
	var rows []row
	t2, met2 := ratioAtMost(2)
	for _, mb := range sizes {
		parent, err := c.CreateSession(ctx, client.CreateOptions{})
		if err != nil {
			return nil, err
		}
		// Incompressible data in files of 10 MB, as a build tree would be.
		cmd := fmt.Sprintf("mkdir -p /workspace/data && for i in $(seq 1 %d); do head -c %d /dev/urandom > /workspace/data/f$i; done; du -sm /workspace/data", (mb+9)/10, min(mb, 10)<<20)
		if _, err := benchCall(ctx, parent, cmd); err != nil {
			return nil, err
		}
		start := time.Now()
		snap, err := parent.Snapshot(ctx, client.SnapshotOptions{})
		if err != nil {
			return nil, err
		}
		took := time.Since(start)
		e.logf("snapshot of %d MB: %v (image %d MB)", mb, took.Round(time.Millisecond), snap.SizeBytes>>20)
		rows = append(rows, row{scenario: fmt.Sprintf("session.snapshot, %d MB workspace diff", mb), s: sampleOfDurations([]time.Duration{took})})

		counts := []int{8, 32}
		if mb >= 1000 {
			counts = []int{8} // 32 GB of forks: beyond this bench's disk budget
		}
		for _, n := range counts {
			// The baseline first: n cold creates at once, then n forks.
			cold, coldSessions, err := parallelCreates(ctx, c, n)
			if err != nil {
				return nil, err
			}
			closeAll(ctx, coldSessions)
			fstart := time.Now()
			f, err := c.Fork(ctx, client.ForkOptions{Snapshot: snap.SnapshotID, Count: n})
			if err != nil {
				return nil, err
			}
			forked := time.Since(fstart)
			if err := f.Err(); err != nil {
				closeAll(ctx, f.Sessions)
				return nil, err
			}
			perFork, derr := forkDisk(ctx, scope, f.Sessions[0].ID)
			if derr != nil {
				e.logf("disk per fork: %v", derr)
			}
			e.logf("fork x%d of %d MB: %v; %d cold creates: %v; disk per fork %d MB", n, mb, forked.Round(time.Millisecond), n, cold.Round(time.Millisecond), perFork>>20)
			closeAll(ctx, f.Sessions)
			r := row{
				scenario: fmt.Sprintf("session.fork x%d, %d MB (wall; disk per fork %d MB)", n, mb, perFork>>20),
				s:        sampleOfDurations([]time.Duration{forked}),
				baseline: fmt.Sprintf("%d cold session.create at once", n), base: sampleOfDurations([]time.Duration{cold}),
			}
			if mb == 100 && n == 8 {
				r.target, r.met = t2, met2
			}
			rows = append(rows, r)
		}
		if mb == 100 {
			r, err := warmForks(ctx, e, c, snap.SnapshotID, 8)
			if err != nil {
				return nil, err
			}
			rows = append(rows, r)
		}
		if err := parent.Close(ctx); err != nil {
			return nil, err
		}
		if err := c.DeleteSnapshot(ctx, snap.SnapshotID); err != nil {
			return nil, err
		}
	}
	return rows, nil
}

// benchCall runs a terminal command in s with a generous timeout.
func benchCall(ctx context.Context, s *client.Session, cmd string) (string, error) {
	obs, err := s.Call(ctx, "terminal", map[string]any{"command": cmd, "timeout": 600}, nil)
	if err != nil {
		return "", err
	}
	if obs.IsError {
		return "", errors.New(obs.Text())
	}
	return obs.Text(), nil
}

// parallelCreates creates n sessions at once and returns the wall time.
func parallelCreates(ctx context.Context, c *client.Client, n int) (time.Duration, []*client.Session, error) {
	out := make([]*client.Session, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Go(func() { out[i], errs[i] = c.CreateSession(ctx, client.CreateOptions{}) })
	}
	wg.Wait()
	d := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		closeAll(ctx, out)
		return 0, nil, err
	}
	return d, out, nil
}

func closeAll(ctx context.Context, ss []*client.Session) {
	var wg sync.WaitGroup
	for _, s := range ss {
		if s != nil {
			wg.Go(func() { _ = s.Close(ctx) })
		}
	}
	wg.Wait()
}

// forkDisk is what one fork's volumes hold on the host's disk (du of
// their mount points; the layers it shares with the snapshot are not
// counted: they are the snapshot's).
func forkDisk(ctx context.Context, scope *runScope, id string) (int64, error) {
	vols, err := scope.cli.VolumeList(ctx, volume.ListOptions{Filters: filters.NewArgs(filters.Arg("label", sandbox.LabelSession+"="+id))})
	if err != nil {
		return 0, err
	}
	var total int64
	for _, v := range vols.Volumes {
		out, err := exec.CommandContext(ctx, "du", "-s", "--block-size=1", v.Mountpoint).Output()
		if err != nil {
			return total, fmt.Errorf("du %s: %w", v.Mountpoint, err)
		}
		f := strings.Fields(string(out))
		if len(f) > 0 {
			n, _ := strconv.ParseInt(f[0], 10, 64)
			total += n
		}
	}
	return total, nil
}

// warmForks times n forks handed out of the snapshot's warm pool of n
// (snapshot.warm), once it is ready.
func warmForks(ctx context.Context, e *env, c *client.Client, snap string, n int) (row, error) {
	if err := c.WarmSnapshot(ctx, snap, n); err != nil {
		return row{}, err
	}
	deadline := time.Now().Add(5 * time.Minute)
	for {
		all, err := c.Snapshots(ctx)
		if err != nil {
			return row{}, err
		}
		if len(all) > 0 && all[0].WarmReady == n {
			break
		}
		if time.Now().After(deadline) {
			return row{}, fmt.Errorf("the warm pool of %s did not fill in 5 min", snap)
		}
		time.Sleep(200 * time.Millisecond)
	}
	start := time.Now()
	f, err := c.Fork(ctx, client.ForkOptions{Snapshot: snap, Count: n})
	if err != nil {
		return row{}, err
	}
	took := time.Since(start)
	closeAll(ctx, f.Sessions)
	if err := f.Err(); err != nil {
		return row{}, err
	}
	if err := c.WarmSnapshot(ctx, snap, 0); err != nil {
		return row{}, err
	}
	e.logf("fork x%d out of a warm pool: %v", n, took.Round(time.Millisecond))
	return row{scenario: fmt.Sprintf("session.fork x%d out of the snapshot's warm pool (snapshot.warm %d)", n, n), s: sampleOfDurations([]time.Duration{took})}, nil
}
