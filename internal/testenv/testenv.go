// Package testenv is what the real-Docker suites (e2e, e2e/api) and the
// benchmarks share to set themselves up: the static sandboxd binary, the
// test image, and the check that a run left nothing in the engine, or on
// the host (the backing files of quota-bound volumes and their loop
// devices).
package testenv

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/sandbox"
	sdocker "github.com/sandboxd/sandboxd/sandbox/docker"
)

// DefaultTestImage is the tiny image the suites run (images/build-test-image.sh).
const DefaultTestImage = "sandboxd-test:latest"

// RepoRoot is the directory of the sandboxd module.
func RepoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("locating the module: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("not inside the sandboxd module")
	}
	return filepath.Dir(mod), nil
}

// BuildBinary builds the static sandboxd binary (CGO off, as shipped: it is
// mounted into sandboxes as their agent) into dir, unless
// SANDBOXD_E2E_BINARY names a prebuilt one.
func BuildBinary(ctx context.Context, dir string) (string, error) {
	if p := os.Getenv("SANDBOXD_E2E_BINARY"); p != "" {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "sandboxd")
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", out, "./cmd/sandboxd")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the sandboxd binary: %v\n%s", err, b)
	}
	return out, nil
}

// EnsureTestImage returns the test image ($SANDBOXD_TEST_IMAGE or
// DefaultTestImage), building it with the project's script when the engine
// does not have it.
func EnsureTestImage(ctx context.Context, cli *client.Client) (string, error) {
	img := os.Getenv("SANDBOXD_TEST_IMAGE")
	if img == "" {
		img = DefaultTestImage
	}
	if _, err := cli.ImageInspect(ctx, img); err == nil {
		return img, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	cmd := exec.CommandContext(ctx, "bash", filepath.Join(root, "images", "build-test-image.sh"))
	cmd.Env = append(os.Environ(), "SANDBOXD_TEST_IMAGE="+img)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building test image %s: %v\n%s", img, err, b)
	}
	return img, nil
}

// Leftovers lists, and removes, every container, volume, network and image
// (snapshots, decision 0052) that carries the label key=value, and sandboxd's host firewall rules of their
// sessions or of sessions without a network: what a run left behind.
func Leftovers(ctx context.Context, cli *client.Client, key, value string) []string {
	f := filters.NewArgs(filters.Arg("label", key+"="+value))
	left := firewallLeftovers(ctx, cli, key, value)
	if ctrs, err := cli.ContainerList(ctx, container.ListOptions{All: true, Filters: f}); err == nil {
		for _, c := range ctrs {
			if Ghost(ctx, cli, c.ID) {
				continue
			}
			left = append(left, "container "+strings.Join(c.Names, ","))
			_ = cli.ContainerRemove(ctx, c.ID, container.RemoveOptions{Force: true})
		}
	} else {
		left = append(left, "listing containers: "+err.Error())
	}
	if vols, err := cli.VolumeList(ctx, volume.ListOptions{Filters: f}); err == nil {
		for _, v := range vols.Volumes {
			left = append(left, "volume "+v.Name)
			_ = cli.VolumeRemove(ctx, v.Name, true)
		}
	} else {
		left = append(left, "listing volumes: "+err.Error())
	}
	if nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: f}); err == nil {
		for _, n := range nets {
			left = append(left, "network "+n.Name)
			_ = cli.NetworkRemove(ctx, n.ID)
		}
	} else {
		left = append(left, "listing networks: "+err.Error())
	}
	if imgs, err := cli.ImageList(ctx, image.ListOptions{All: true, Filters: f}); err == nil {
		for _, img := range imgs {
			left = append(left, "image "+img.ID+" "+strings.Join(img.RepoTags, ","))
			_, _ = cli.ImageRemove(ctx, img.ID, image.RemoveOptions{Force: true, PruneChildren: true})
		}
	} else {
		left = append(left, "listing images: "+err.Error())
	}
	return left
}

// Ghost says whether a listed container does not exist: Docker 20.10
// sometimes lists a container "Removal In Progress", with no name, long
// after its removal (issue 23: twice in about ten under-load runs, each a
// sandbox whose shim died within a second of its start), while inspect
// and rm answer "No such container". sandboxd already counts that answer
// as removed; the leftover checks do too.
func Ghost(ctx context.Context, cli *client.Client, id string) bool {
	_, err := cli.ContainerInspect(ctx, id)
	return cerrdefs.IsNotFound(err)
}

// firewallLeftovers lists, and deletes, sandboxd's host firewall rules that
// a run left behind: those of a session whose network carries key=value (a
// leftover itself), and those of a session that has no network at all
// (whatever run made it). Rules of other runs' live sessions are theirs. A
// rule seen without a network is checked again, so a session another suite
// is removing right now does not count.
func firewallLeftovers(ctx context.Context, cli *client.Client, key, value string) []string {
	sessions := func(f filters.Args) (map[string]bool, error) {
		nets, err := cli.NetworkList(ctx, network.ListOptions{Filters: f})
		ids := map[string]bool{}
		for _, n := range nets {
			ids[n.Labels[sandbox.LabelSession]] = true
		}
		return ids, err
	}
	suspects := func() ([]sdocker.FirewallRule, error) {
		run, err := sessions(filters.NewArgs(filters.Arg("label", key+"="+value)))
		if err != nil {
			return nil, err
		}
		live, err := sessions(filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true")))
		if err != nil {
			return nil, err
		}
		var out []sdocker.FirewallRule
		for _, r := range sdocker.FirewallRules(ctx) {
			if run[r.SessionID] || !live[r.SessionID] {
				out = append(out, r)
			}
		}
		return out, nil
	}
	first, err := suspects()
	if err != nil || len(first) == 0 {
		if err != nil {
			return []string{"listing networks for the firewall check: " + err.Error()}
		}
		return nil
	}
	time.Sleep(time.Second)
	again, err := suspects()
	if err != nil {
		return []string{"listing networks for the firewall check: " + err.Error()}
	}
	var left []string
	for _, r := range again {
		if slices.ContainsFunc(first, func(f sdocker.FirewallRule) bool { return f.String() == r.String() }) {
			left = append(left, "firewall rule "+r.String())
			_ = r.Delete(ctx)
		}
	}
	return left
}

// DiskLeftovers lists, and removes, the files under dir (a runtime's
// DiskDir) and the loop devices backed by a file under it: what a run's
// quota-bound volumes left behind.
func DiskLeftovers(dir string) []string {
	var left []string
	for _, dev := range LoopsUnder(dir) {
		left = append(left, "loop device "+dev)
		_ = exec.Command("losetup", "-d", dev).Run()
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, "file "+p)
			_ = os.Remove(p)
		}
		return nil
	})
	return left
}

// LoopsUnder returns the loop devices whose backing file lies under dir
// (read from /sys/block/loop*/loop/backing_file).
func LoopsUnder(dir string) []string {
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if strings.HasPrefix(strings.TrimSpace(string(b)), dir+"/") {
			devs = append(devs, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(f))))
		}
	}
	return devs
}
