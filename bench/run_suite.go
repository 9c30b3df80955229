package main

import (
	"bytes"
	"context"
	"crypto/md5"
	"fmt"
	"hash"
	"os"
	"os/exec"
	"strconv"
	"time"
)

func init() {
	register(suite{
		name: "run",
		about: "`sandboxd run -- seq 1 5000000` (38.9 MB) through an in-process server, md5-checked, vs " +
			"`docker run --rm IMAGE seq 1 5000000` in the same run, alternated (image: $SANDBOXD_TEST_IMAGE or sandboxd-test:latest)",
		run:   runRunSuite,
		named: true,
	})
}

const runSeqN = 5000000

func runRunSuite(ctx context.Context, e *env) ([]row, error) {
	su, err := e.setup()
	if err != nil {
		return nil, err
	}
	bin, image := su.bin, su.image
	ip, err := startInProcess(ctx, "run", bin, image, su.quiet, runLabels(), time.Minute, nil)
	if err != nil {
		return nil, err
	}
	defer ip.stop()

	var want bytes.Buffer
	for i := 1; i <= runSeqN; i++ {
		want.WriteString(strconv.Itoa(i))
		want.WriteByte('\n')
	}
	wantSum := md5.Sum(want.Bytes())
	// timed runs cmd with its stdout hashed; a sum other than seq's fails.
	timed := func(name string, cmd *exec.Cmd) (time.Duration, error) {
		h := md5.New()
		var errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = h, &errOut
		start := time.Now()
		if err := cmd.Run(); err != nil {
			return 0, fmt.Errorf("%s: %w: %s", name, err, errOut.String())
		}
		d := time.Since(start)
		if got := sumOf(h); got != wantSum {
			return 0, fmt.Errorf("%s: md5 %x, want %x (seq 1 %d): not byte-exact", name, got, wantSum, runSeqN)
		}
		return d, nil
	}
	n := max(3, int(3*e.iterations))
	var viaRun, viaDocker []time.Duration
	for i := range n {
		d, err := timed("docker run", exec.CommandContext(ctx, "docker", "run", "--rm", image, "seq", "1", strconv.Itoa(runSeqN)))
		if err != nil {
			return nil, err
		}
		viaDocker = append(viaDocker, d)
		cmd := exec.CommandContext(ctx, bin, "run", "--server", ip.ws, "--", "seq", "1", strconv.Itoa(runSeqN))
		cmd.Env = append(os.Environ(), "SANDBOXD_TOKEN="+ip.token)
		r, err := timed("sandboxd run", cmd)
		if err != nil {
			return nil, err
		}
		viaRun = append(viaRun, r)
		e.logf("run %d/%d: docker run %v, sandboxd run %v (md5 equal)", i+1, n, d.Round(time.Millisecond), r.Round(time.Millisecond))
	}
	t, met := ratioAtMost(2)
	return []row{{
		scenario: fmt.Sprintf("sandboxd run -- seq 1 %d (md5-equal, session create and close included)", runSeqN), s: sampleOfDurations(viaRun),
		baseline: "docker run --rm IMAGE seq 1 5000000", base: sampleOfDurations(viaDocker), target: t, met: met,
	}}, nil
}

func sumOf(h hash.Hash) (s [md5.Size]byte) {
	copy(s[:], h.Sum(nil))
	return s
}
