package main

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path"
	"strings"
	"time"
)

// dockerLabel marks the baseline's containers (docker ps --filter
// label=sandboxd.harness finds any a killed run left).
const dockerLabel = "sandboxd.harness"

// dockerBackend is the baseline: the same work with `docker run` and
// `docker exec` of the same image, as a harness without sandboxd does it
// (the image's own user, root for SWE-bench images, a writable root,
// no network). It needs the docker CLI and the engine sandboxd uses.
type dockerBackend struct{}

func (dockerBackend) open(ctx context.Context, in *instance) (box, error) {
	out, err := docker(ctx, nil, "run", "-d", "--rm", "--init", "--network", "none", "--label", dockerLabel+"=1", in.Image, "sleep", "infinity")
	if err != nil {
		return nil, err
	}
	return &dockerBox{id: strings.TrimSpace(string(out))}, nil
}

type dockerBox struct{ id string }

func (b *dockerBox) put(ctx context.Context, name string, data []byte) error {
	_, err := docker(ctx, data, "exec", "-i", b.id, "sh", "-c", `mkdir -p "$1" && cat > "$1/$2"`, "sh", workDir, name)
	return err
}

func (b *dockerBox) run(ctx context.Context, command string, timeout time.Duration) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "exec", "-w", "/testbed", b.id, "bash", "-c", command)
	var out bytes.Buffer
	w := &headWriter{w: &out, n: 64 << 10}
	cmd.Stdout, cmd.Stderr = w, w
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case ctx.Err() != nil:
		return 0, "", fmt.Errorf("still running after %s (-timeout)", timeout)
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), nil
	case err != nil:
		return 0, "", err
	}
	return 0, out.String(), nil
}

// headWriter keeps the first n bytes written and drops the rest (enough
// for the exit message of git apply; the log is read as a file).
type headWriter struct {
	w io.Writer
	n int
}

func (t *headWriter) Write(p []byte) (int, error) {
	if k := min(len(p), t.n); k > 0 {
		t.n -= k
		if _, err := t.w.Write(p[:k]); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

func (b *dockerBox) get(ctx context.Context, name string) ([]byte, error) {
	out, err := docker(ctx, nil, "exec", b.id, "cat", path.Join(workDir, name))
	if err == nil && len(out) > maxLog {
		err = fmt.Errorf("%s is over %d bytes", name, maxLog)
	}
	return out, err
}

func (b *dockerBox) close(ctx context.Context) error {
	_, err := docker(ctx, nil, "rm", "-f", b.id)
	return err
}

// docker runs the docker CLI with stdin (may be nil) and returns its
// stdout, at most maxLog+1 bytes. An error carries the end of stderr.
func docker(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &limitedWriter{w: &stdout, n: maxLog + 1}
	cmd.Stderr = &limitedWriter{w: &stderr, n: 64 << 10}
	err := cmd.Run()
	if err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return nil, errors.New("the docker CLI is not on PATH")
		}
		return stdout.Bytes(), fmt.Errorf("docker %s: %w: %s", args[0], err, lastLine(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// ensureImages builds, with `docker build`, the instance images the engine
// lacks: base_image with the instance's image.diff committed in /testbed
// (the Dockerfile beside this file). Instances without base_image use
// their image as it is. With build false it checks nothing: the images
// are on sandboxd's engine (which may be another machine's) or a create
// says which one is missing.
func ensureImages(ctx context.Context, instances []*instance, build bool, logf func(string, ...any)) error {
	if !build {
		return nil
	}
	if _, err := exec.LookPath("docker"); err != nil {
		return errors.New("the docker CLI is not on PATH: it builds the instance images (-build); " +
			"pass -build=false when they are on sandboxd's engine already")
	}
	dockerfile, err := builtin.ReadFile("Dockerfile")
	if err != nil {
		return err
	}
	done := map[string]bool{}
	for _, in := range instances {
		if in.BaseImage == "" || done[in.Image] {
			continue
		}
		done[in.Image] = true
		if _, err := docker(ctx, nil, "image", "inspect", "--format", "{{.Id}}", in.Image); err == nil {
			continue
		}
		if _, err := docker(ctx, nil, "image", "inspect", "--format", "{{.Id}}", in.BaseImage); err != nil {
			return fmt.Errorf("instance %s: the base image %s is missing (make task-image): %w", in.ID, in.BaseImage, err)
		}
		logf("building %s (%s with %s's image.diff)", in.Image, in.BaseImage, in.ID)
		var ctxTar bytes.Buffer
		tw := tar.NewWriter(&ctxTar)
		for name, data := range map[string][]byte{"Dockerfile": dockerfile, "image.diff": in.imageDiff} {
			if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
				return err
			}
			if _, err := io.Copy(tw, bytes.NewReader(data)); err != nil {
				return err
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		if _, err := docker(ctx, ctxTar.Bytes(), "build", "-q", "--network", "none", "-t", in.Image, "--build-arg", "BASE_IMAGE="+in.BaseImage, "-"); err != nil {
			return fmt.Errorf("instance %s: building %s: %w", in.ID, in.Image, err)
		}
	}
	return nil
}
