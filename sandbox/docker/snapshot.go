package docker

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/client"

	"github.com/sandboxd/sandboxd/sandbox"
)

// Snapshots (decision 0052). A snapshot is one image of the engine's: the
// layers of the session's image, the container's root changes (the
// engine's commit), and one layer sandboxd writes with the session's
// volumes (/workspace, HOME, the editable paths) at their paths, each
// folder marked opaque so nothing of the image's own content there shows
// through. The image is loaded untagged (docker load of a manifest whose
// other layers the engine has already) and tagged last: the tag is the
// mark of a complete snapshot, so one cut off half-way is an untagged
// labelled image, which PruneSnapshots removes. A fork is a session of
// that image: its volumes are seeded from it like any image's.

// snapshotRepo is the repository of snapshot images; the tag is the id.
const snapshotRepo = sandbox.SnapshotRepo

// snapshotTimeout bounds one snapshot (a 1 GB workspace streams twice).
const snapshotTimeout = 15 * time.Minute

// whOpaque is the marker of an opaque folder in a layer (AUFS form, as
// the engine's own layers carry it).
const whOpaqueMarker = ".wh..wh..opq"

// SnapshotTmpDir is where the runtime of scope writes a snapshot's volumes
// layer before the engine loads it (<id>.tar, removed after; what a
// killed daemon left is removed by the next one's PruneSnapshots).
func SnapshotTmpDir(scope string) string {
	return filepath.Join(os.TempDir(), "sandboxd-snapshot-"+scope)
}

func (r *Runtime) snapshotTmpDir() string { return SnapshotTmpDir(ScopeOf(r.opts.Labels)) }

// snapshotRef is the reference of a complete snapshot's image.
func (r *Runtime) snapshotRef(id string) string {
	return snapshotRepo + "/" + ScopeOf(r.opts.Labels) + ":" + id
}

// sandboxContainer finds the session's own container (not a sidecar or a
// helper).
func (r *Runtime) sandboxContainer(ctx context.Context, id string) (string, error) {
	ctrs, err := r.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: r.filter(id)})
	if err != nil {
		return "", fmt.Errorf("listing containers: %w", err)
	}
	for _, c := range ctrs {
		if c.Labels[sandbox.LabelSidecar] == "" && c.Labels[LabelHelper] == "" {
			return c.ID, nil
		}
	}
	return "", fmt.Errorf("session %s: %w", id, sandbox.ErrNotFound)
}

// Snapshot takes a snapshot of a running session (see above).
func (r *Runtime) Snapshot(ctx context.Context, spec sandbox.SnapshotSpec) (_ sandbox.Snapshot, err error) {
	ctx, cancel := context.WithTimeout(ctx, snapshotTimeout)
	defer cancel()
	r.snapshotting.Store(spec.ID, true)
	defer r.snapshotting.Delete(spec.ID)
	ctrID, err := r.sandboxContainer(ctx, spec.SessionID)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	info, err := r.cli.ContainerInspect(ctx, ctrID)
	if err != nil {
		return sandbox.Snapshot{}, fmt.Errorf("inspecting the container: %w", err)
	}
	if info.State == nil || !info.State.Running {
		return sandbox.Snapshot{}, fmt.Errorf("session %s: its container is not running", spec.SessionID)
	}
	base, err := r.cli.ImageInspect(ctx, info.Image)
	if err != nil {
		return sandbox.Snapshot{}, fmt.Errorf("inspecting the session's image: %w", err)
	}
	labels := r.labels(spec.Labels)
	// A layer of its own first, so what is cut off here is found.
	dir := r.snapshotTmpDir()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return sandbox.Snapshot{}, err
	}
	f, err := os.OpenFile(filepath.Join(dir, spec.ID+".tar"), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
		_ = os.Remove(dir) // when no other snapshot is in the making
	}()
	h := sha256.New()
	n, err := r.writeVolumesLayer(ctx, ctrID, info, spec.Options, io.MultiWriter(f, h))
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	volumes := "sha256:" + hex.EncodeToString(h.Sum(nil))

	// The root changes: the engine's commit, untagged and labelled (a
	// crash leaves a labelled dangling image for PruneSnapshots).
	committed, err := r.cli.ContainerCommit(ctx, ctrID, container.CommitOptions{
		Pause: true, Config: &container.Config{Labels: labels},
	})
	if err != nil {
		return sandbox.Snapshot{}, fmt.Errorf("committing the container: %w", err)
	}
	defer func() {
		// The snapshot holds the commit's layers itself (the layer store
		// counts them); the commit's image goes.
		rctx, cancel := r.call(context.WithoutCancel(ctx))
		defer cancel()
		if _, rerr := r.cli.ImageRemove(rctx, committed.ID, image.RemoveOptions{Force: true}); rerr != nil && !isNotFound(rerr) {
			r.log.Warn("removing a snapshot's commit", "image", committed.ID, "err", rerr)
		}
	}()
	top, err := r.cli.ImageInspect(ctx, committed.ID)
	if err != nil {
		return sandbox.Snapshot{}, fmt.Errorf("inspecting the commit: %w", err)
	}
	cfg := snapshotConfig(base, labels)
	created := time.Now().UTC()
	cfgJSON, err := json.Marshal(map[string]any{
		"architecture": top.Architecture,
		"os":           top.Os,
		"created":      created,
		"config":       cfg,
		"rootfs": map[string]any{
			"type":     "layers",
			"diff_ids": append(slices.Clone(top.RootFS.Layers), volumes),
		},
	})
	if err != nil {
		return sandbox.Snapshot{}, err
	}
	sum := sha256.Sum256(cfgJSON)
	imageID := "sha256:" + hex.EncodeToString(sum[:])
	if err := r.loadSnapshot(ctx, cfgJSON, len(top.RootFS.Layers), f, n); err != nil {
		return sandbox.Snapshot{}, err
	}
	// Complete: the tag is the last thing written.
	if err := r.cli.ImageTag(ctx, imageID, r.snapshotRef(spec.ID)); err != nil {
		_, _ = r.cli.ImageRemove(context.WithoutCancel(ctx), imageID, image.RemoveOptions{Force: true})
		return sandbox.Snapshot{}, fmt.Errorf("tagging the snapshot: %w", err)
	}
	img, err := r.cli.ImageInspect(ctx, imageID)
	if err != nil {
		return sandbox.Snapshot{}, fmt.Errorf("inspecting the snapshot: %w", err)
	}
	snap, ok := r.snapshotOf(img.RepoTags, img.Config.Labels, img.Size)
	if !ok {
		return sandbox.Snapshot{}, errors.New("the snapshot's image lacks its labels")
	}
	return snap, nil
}

// snapshotConfig is the image config of a snapshot: the session image's
// own (its user, environment, entrypoint and working directory, not the
// sandbox's), with the session image's labels and the snapshot's.
func snapshotConfig(base image.InspectResponse, labels map[string]string) *container.Config {
	cfg := &container.Config{}
	if base.Config != nil {
		c := base.Config
		cfg = &container.Config{
			User: c.User, Env: c.Env, Entrypoint: c.Entrypoint, Cmd: c.Cmd, WorkingDir: c.WorkingDir,
			Volumes: c.Volumes, StopSignal: c.StopSignal, Shell: c.Shell,
			Labels: maps.Clone(c.Labels),
		}
	}
	if cfg.Labels == nil {
		cfg.Labels = map[string]string{}
	}
	maps.Copy(cfg.Labels, labels)
	// What only a session's container carries must not pass on to the
	// sessions of the image (a fork's own labels replace the rest).
	for _, k := range []string{sandbox.LabelPool, sandbox.LabelSession, LabelSeccomp, LabelHelper, sandbox.LabelSidecar} {
		delete(cfg.Labels, k)
	}
	return cfg
}

// snapshotTargets are the session's folders that are mounts of their own
// (the workspace, HOME, the editable paths), outermost first, without
// those inside another (its archive has them).
func snapshotTargets(info container.InspectResponse, o sandbox.SessionOptions) []string {
	want := []string{sandbox.WorkspaceDir}
	want = append(want, o.EditablePaths...)
	if info.Config != nil {
		for _, kv := range info.Config.Env {
			if v, ok := strings.CutPrefix(kv, "HOME="); ok {
				want = append(want, v)
			}
		}
	}
	if h, ok := o.Env["HOME"]; ok {
		want = append(want, h)
	}
	var mounted []string
	for _, m := range info.Mounts {
		if m.Type != mount.TypeVolume && m.Type != mount.TypeBind {
			continue
		}
		if slices.Contains(want, m.Destination) && !slices.Contains(mounted, m.Destination) {
			mounted = append(mounted, m.Destination)
		}
	}
	slices.SortFunc(mounted, func(a, b string) int { return len(a) - len(b) })
	var out []string
	for _, d := range mounted {
		if !slices.ContainsFunc(out, func(o string) bool { return sandbox.Within(d, o) }) {
			out = append(out, d)
		}
	}
	return out
}

// writeVolumesLayer writes the layer of the session's volumes to w: each
// folder as the engine archives it from the container, at its path, marked
// opaque. It returns the layer's size.
func (r *Runtime) writeVolumesLayer(ctx context.Context, ctrID string, info container.InspectResponse, o sandbox.SessionOptions, w io.Writer) (int64, error) {
	cw := &countWriter{w: w}
	tw := tar.NewWriter(cw)
	for _, dir := range snapshotTargets(info, o) {
		if err := r.archiveInto(ctx, tw, ctrID, dir); err != nil {
			return 0, fmt.Errorf("archiving %s: %w", dir, err)
		}
	}
	if err := tw.Close(); err != nil {
		return 0, err
	}
	return cw.n, nil
}

// archiveInto copies the container's folder dir into tw at its path.
func (r *Runtime) archiveInto(ctx context.Context, tw *tar.Writer, ctrID, dir string) error {
	rc, _, err := r.cli.CopyFromContainer(ctx, ctrID, dir)
	if err != nil {
		return err
	}
	defer rc.Close()
	parent := strings.TrimPrefix(path.Dir(dir), "/")
	base := path.Base(dir)
	tr := tar.NewReader(rc)
	rootSeen := false
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name, ok := snapshotEntryName(parent, base, hdr.Name)
		if !ok {
			continue
		}
		hdr.Name = name
		if hdr.Typeflag == tar.TypeLink {
			link, ok := snapshotEntryName(parent, base, hdr.Linkname)
			if !ok {
				continue
			}
			hdr.Linkname = link
		}
		hdr.Format = tar.FormatPAX
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return err
			}
		}
		if !rootSeen && hdr.Typeflag == tar.TypeDir {
			rootSeen = true
			// Opaque: the image's own content of the folder (what the
			// session deleted) must not show through.
			if err := tw.WriteHeader(&tar.Header{
				Name: path.Join(strings.TrimSuffix(name, "/"), whOpaqueMarker), Typeflag: tar.TypeReg,
				Mode: 0o600, ModTime: hdr.ModTime, Format: tar.FormatPAX,
			}); err != nil {
				return err
			}
		}
	}
	if !rootSeen {
		return errors.New("the engine's archive has no folder")
	}
	return nil
}

// snapshotEntryName maps an entry of the engine's archive of parent/base
// (named base/...) to its name in the layer; false for an entry outside
// base, or named like a layer's marker (a file called .wh.x cannot be
// carried in a layer: it would delete x).
func snapshotEntryName(parent, base, name string) (string, bool) {
	clean := path.Clean(name)
	if clean != base && !strings.HasPrefix(clean, base+"/") {
		return "", false
	}
	for _, part := range strings.Split(clean, "/") {
		if strings.HasPrefix(part, ".wh.") || part == ".." {
			return "", false
		}
	}
	out := path.Join(parent, clean)
	if strings.HasSuffix(name, "/") {
		out += "/"
	}
	return out, true
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// loadSnapshot loads the snapshot's image: a docker-save archive with its
// config and the volumes layer (layer of n bytes in f); the layers below
// it are the engine's already (the session image's and the commit's), so
// the manifest names them without their content.
func (r *Runtime) loadSnapshot(ctx context.Context, cfgJSON []byte, below int, f *os.File, n int64) error {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	layers := make([]string, below+1)
	for i := range below {
		layers[i] = fmt.Sprintf("present/%d.tar", i)
	}
	layers[below] = "volumes/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": nil, "Layers": layers}})
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := writeFile(tw, "config.json", cfgJSON)
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: "volumes/", Typeflag: tar.TypeDir, Mode: 0o755})
		}
		if err == nil {
			err = tw.WriteHeader(&tar.Header{Name: layers[below], Typeflag: tar.TypeReg, Mode: 0o644, Size: n})
		}
		if err == nil {
			_, err = io.CopyN(tw, f, n)
		}
		if err == nil {
			err = writeFile(tw, "manifest.json", manifest)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	resp, err := r.cli.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err != nil {
		pr.CloseWithError(err)
		return fmt.Errorf("loading the snapshot's image: %w", err)
	}
	defer resp.Body.Close()
	return loadErr(resp.Body)
}

// loadErr reads the engine's answer to a load, a stream of JSON messages,
// to its end: the error one carries, if any.
func loadErr(body io.Reader) error {
	dec := json.NewDecoder(io.LimitReader(body, 1<<20))
	for {
		var m struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the engine's answer to the load: %w", err)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return fmt.Errorf("loading the snapshot's image: %s", m.ErrorDetail.Message)
		}
		if m.Error != "" {
			return fmt.Errorf("loading the snapshot's image: %s", m.Error)
		}
	}
}

func writeFile(tw *tar.Writer, name string, b []byte) error {
	if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(b))}); err != nil {
		return err
	}
	_, err := tw.Write(b)
	return err
}

// snapshotFilter selects the runtime's snapshot images.
func (r *Runtime) snapshotFilter() filters.Args {
	f := filters.NewArgs(filters.Arg("label", sandbox.LabelManaged+"=true"),
		filters.Arg("label", LabelScope+"="+ScopeOf(r.opts.Labels)),
		filters.Arg("label", sandbox.LabelSnapshot))
	for k, v := range r.opts.Labels {
		f.Add("label", k+"="+v)
	}
	return f
}

// snapshotOf reads a snapshot back from its image; false unless it is
// complete (tagged with its reference) and its labels are whole.
func (r *Runtime) snapshotOf(tags []string, labels map[string]string, size int64) (sandbox.Snapshot, bool) {
	sid := labels[sandbox.LabelSnapshot]
	ref := r.snapshotRef(sid)
	if sid == "" || !slices.Contains(tags, ref) {
		return sandbox.Snapshot{}, false
	}
	opts, err := sandbox.DecodeOptions(labels[sandbox.LabelOptions])
	if err != nil {
		return sandbox.Snapshot{}, false
	}
	opts.Image = ref
	s := sandbox.Snapshot{
		ID: sid, Name: labels[sandbox.LabelSnapshotName], SessionID: labels[sandbox.LabelSnapshotSession],
		Image: ref, Options: opts, Size: size,
	}
	s.Created, _ = time.Parse(time.RFC3339Nano, labels[sandbox.LabelSnapshotCreated])
	s.Expires, _ = time.Parse(time.RFC3339Nano, labels[sandbox.LabelSnapshotExpires])
	return s, true
}

// Snapshots lists the complete snapshots of the runtime's scope.
func (r *Runtime) Snapshots(ctx context.Context) ([]sandbox.Snapshot, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	imgs, err := r.cli.ImageList(cctx, image.ListOptions{Filters: r.snapshotFilter()})
	if err != nil {
		return nil, fmt.Errorf("listing snapshot images: %w", err)
	}
	var out []sandbox.Snapshot
	for _, img := range imgs {
		if s, ok := r.snapshotOf(img.RepoTags, img.Labels, img.Size); ok {
			out = append(out, s)
		}
	}
	return out, nil
}

// DeleteSnapshot untags a snapshot and removes its image unless a session
// still runs from it (then PruneSnapshots removes it once none does).
func (r *Runtime) DeleteSnapshot(ctx context.Context, id string) error {
	cctx, cancel := r.call(ctx)
	defer cancel()
	_, err := r.cli.ImageRemove(cctx, r.snapshotRef(id), image.RemoveOptions{Force: true, PruneChildren: true})
	if err != nil && !isNotFound(err) {
		return err
	}
	return r.PruneSnapshots(ctx)
}

// PruneSnapshots removes the runtime's labelled snapshot images that are
// not complete: half-made ones (and their commits), deleted ones. One a
// container still uses stays until it is gone.
func (r *Runtime) PruneSnapshots(ctx context.Context) error {
	cctx, cancel := r.call(ctx)
	defer cancel()
	imgs, err := r.cli.ImageList(cctx, image.ListOptions{All: true, Filters: r.snapshotFilter()})
	if err != nil {
		return fmt.Errorf("listing snapshot images: %w", err)
	}
	var errs []error
	if ents, err := os.ReadDir(r.snapshotTmpDir()); err == nil {
		for _, e := range ents {
			if _, busy := r.snapshotting.Load(strings.TrimSuffix(e.Name(), ".tar")); !busy {
				if err := os.Remove(filepath.Join(r.snapshotTmpDir(), e.Name())); err != nil {
					errs = append(errs, err)
				}
			}
		}
		_ = os.Remove(r.snapshotTmpDir()) // when nothing is in the making
	}
	for _, img := range imgs {
		if _, ok := r.snapshotOf(img.RepoTags, img.Labels, img.Size); ok {
			continue
		}
		if _, busy := r.snapshotting.Load(img.Labels[sandbox.LabelSnapshot]); busy {
			continue // in the making
		}
		_, err := r.cli.ImageRemove(cctx, img.ID, image.RemoveOptions{PruneChildren: true})
		switch {
		case err == nil:
			r.log.Info("removed the image of an incomplete or deleted snapshot", "image", img.ID, "snapshot", img.Labels[sandbox.LabelSnapshot])
		case isNotFound(err), cerrdefs.IsConflict(err):
			// Gone, or a container still runs from it: a later prune.
		default:
			errs = append(errs, fmt.Errorf("removing image %s: %w", img.ID, err))
		}
	}
	return errors.Join(errs...)
}

var _ sandbox.SnapshotRuntime = (*Runtime)(nil)
