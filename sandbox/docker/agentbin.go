package docker

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/volume"
	"github.com/google/uuid"

	"github.com/sandboxd/sandboxd/sandbox"
)

// LabelAgent marks the shared volume that holds a copied agent binary; its
// value is the binary's sha256.
const LabelAgent = "sandboxd.agent"

// agentBinary is the checked host file that becomes /.sandboxd/sandboxd.
type agentBinary struct {
	path  string
	size  int64
	sum   string // hex sha256
	scope string // the runtime's (ScopeOf): each runtime fills and prunes its own volume

	mu     sync.Mutex
	copied bool // the volume of sum is filled (copy mode)
	// closed: the runtime has closed (pruneAtClose) and its shared
	// volumes are due to go; a session removed after that removes them
	// itself (remove.go: pruneAfterClose).
	closed bool
}

// markClosed records that the runtime has closed.
func (a *agentBinary) markClosed() {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
}

// isClosed says whether the runtime has closed.
func (a *agentBinary) isClosed() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.closed
}

// checkAgentBinary refuses a file that cannot run in an arbitrary image: it
// must be a static ELF executable (no interpreter, no shared libraries).
func checkAgentBinary(path string) (*agentBinary, error) {
	abs, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("agent binary %s: %w", path, err)
	}
	abs, _ = filepath.Abs(abs)
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("agent binary: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("agent binary %s is not an executable file", abs)
	}
	f, err := elf.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("agent binary %s is not an ELF executable: %w", abs, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return nil, fmt.Errorf("agent binary %s is dynamically linked; build it with CGO_ENABLED=0 so it runs in any image", abs)
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		return nil, fmt.Errorf("agent binary %s needs shared libraries %v; build it with CGO_ENABLED=0", abs, libs)
	}
	h := sha256.New()
	rf, err := os.Open(abs)
	if err != nil {
		return nil, fmt.Errorf("agent binary: %w", err)
	}
	defer rf.Close()
	if _, err := io.Copy(h, rf); err != nil {
		return nil, fmt.Errorf("agent binary: reading %s: %w", abs, err)
	}
	return &agentBinary{path: abs, size: fi.Size(), sum: hex.EncodeToString(h.Sum(nil))}, nil
}

// volume is the runtime's shared volume holding a copied agent binary.
func (a *agentBinary) volume() string { return "sandboxd-agent-" + a.scope + "-" + a.sum[:16] }

// agentInVolume says whether a session's agent binary comes from the
// shared agent volume, mounted read-only over the whole of AgentDir: in
// copy mode, and for a writable root, where the session user (root with
// sandbox.UserImage) could otherwise move the folder that holds a
// file bind aside and put its own program where the daemon runs
// agent-proxy (decision 0028). A mount point cannot be moved.
func (r *Runtime) agentInVolume(o sandbox.SessionOptions) bool {
	return r.opts.CopyAgent || o.WritableRootfs
}

// agentMount is how the agent binary appears in a sandbox: a read-only bind
// of the host file, or a read-only shared volume filled once (agentInVolume).
func (r *Runtime) agentMount(o sandbox.SessionOptions) mount.Mount {
	if r.agentInVolume(o) {
		return mount.Mount{
			Type: mount.TypeVolume, Source: r.agent.volume(), Target: sandbox.AgentDir, ReadOnly: true,
			VolumeOptions: &mount.VolumeOptions{NoCopy: true},
		}
	}
	return mount.Mount{Type: mount.TypeBind, Source: r.agent.path, Target: sandbox.AgentPath, ReadOnly: true}
}

// ensureAgentVolume fills the shared agent volume once per runtime (copy
// mode). A remote engine cannot bind a path of this host, and a read-only
// root cannot be written, so the binary goes into a volume through a
// helper container that is never started: CopyToContainer into a volume
// works on a created container. The volume is named by the binary's hash,
// so a filled one is never rewritten under running sandboxes.
func (r *Runtime) ensureAgentVolume(ctx context.Context, image string) error {
	a := r.agent
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.copied {
		return nil
	}
	labels := r.labels(map[string]string{sandbox.LabelManaged: "true", LabelAgent: a.sum})
	cctx, cancel := r.call(ctx)
	defer cancel()
	if _, err := r.cli.VolumeCreate(cctx, volume.CreateOptions{Name: a.volume(), Labels: labels}); err != nil {
		return fmt.Errorf("creating agent volume %s: %w", a.volume(), err)
	}
	helper := "sandboxd-agentcopy-" + uuid.NewString()[:8]
	created, err := r.cli.ContainerCreate(cctx, &container.Config{
		Image: image, Entrypoint: []string{sandbox.AgentPath}, Labels: labels, User: "65534:65534",
	}, &container.HostConfig{
		NetworkMode: "none",
		Mounts:      []mount.Mount{{Type: mount.TypeVolume, Source: a.volume(), Target: sandbox.AgentDir, VolumeOptions: &mount.VolumeOptions{NoCopy: true}}},
	}, nil, nil, helper)
	if err != nil {
		return fmt.Errorf("creating agent copy helper: %w", err)
	}
	defer func() {
		rctx, cancel := r.call(context.WithoutCancel(ctx))
		defer cancel()
		if err := r.cli.ContainerRemove(rctx, created.ID, container.RemoveOptions{Force: true}); err != nil {
			r.log.Warn("removing agent copy helper", "container", helper, "err", err)
		}
	}()
	if st, err := r.cli.ContainerStatPath(cctx, created.ID, sandbox.AgentPath); err == nil && st.Size == a.size {
		a.copied = true
		return nil
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeAgentTar(pw, a)) }()
	err = r.cli.CopyToContainer(cctx, created.ID, sandbox.AgentDir, pr, container.CopyToContainerOptions{})
	pr.CloseWithError(err)
	if err != nil {
		return fmt.Errorf("copying the agent binary into volume %s: %w", a.volume(), err)
	}
	a.copied = true
	r.log.Info("agent binary copied into volume", "volume", a.volume(), "bytes", a.size)
	return nil
}

// pruneStaleAgentVolumes removes this runtime's agent volumes of other
// binaries (an upgraded daemon's predecessors) that no sandbox mounts any
// more; one still in use (an adopted session) stays for the next start.
// Best effort: a failure is logged.
func (r *Runtime) pruneStaleAgentVolumes(ctx context.Context) {
	f := r.filter("")
	f.Add("label", LabelAgent)
	vols, err := r.cli.VolumeList(ctx, volume.ListOptions{Filters: f})
	if err != nil {
		r.log.Warn("listing agent volumes", "err", err)
		return
	}
	for _, v := range vols.Volumes {
		if v.Labels[LabelAgent] == r.agent.sum {
			continue
		}
		if err := r.cli.VolumeRemove(ctx, v.Name, false); err != nil && !cerrdefs.IsConflict(err) && !isNotFound(err) {
			r.log.Warn("removing a stale agent volume", "volume", v.Name, "err", err)
		}
	}
}

// writeAgentTar writes a tar holding the agent binary as "sandboxd",
// root-owned and read/execute-only, so the session user cannot replace it.
func writeAgentTar(w io.Writer, a *agentBinary) error {
	f, err := os.Open(a.path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(sandbox.AgentPath), Mode: 0o555, Size: a.size, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.CopyN(tw, f, a.size); err != nil {
		return err
	}
	return tw.Close()
}
