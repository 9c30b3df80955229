package docker

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox"
)

// LabelImageKind marks the images sandboxd's own scripts build (images/):
// their /workspace and HOME belong to the image's USER, 1000:1000 (a task
// image, kind "task", runs as root and is trusted for nothing).
const LabelImageKind = "sandboxd.image.kind"

// imageFacts is what a start needs to know of the session's image.
type imageFacts struct {
	id      string // image ID, so the seeding helper runs exactly this image
	home    string // HOME of the image's environment; "" when it sets none
	path    string // PATH of the image's environment; "" when it sets none
	user    string // the image's USER ("" is root)
	workdir string // the image's WORKDIR; "" when it sets none
	ours    bool   // built by sandboxd's scripts (LabelImageKind)
	// command is its ENTRYPOINT + CMD (imageCommand, inspect.go).
	command []string
	// layers are the image's layer folders on this host, topmost first,
	// when the runtime seeds by overlay and the engine's storage driver
	// can be stacked (overlay.go); nil: seeding copies (seed.go).
	layers []string
	// emptyWorkspace: with layers, the image's workspace folder is empty
	// or missing (emptyInLayers), of mode workspaceMode.
	emptyWorkspace bool
	workspaceMode  os.FileMode
}

// inspectImage reads the image's config. A missing image is the clear
// error a user needs ("build it or pull it").
func (r *Runtime) inspectImage(ctx context.Context, ref string) (imageFacts, error) {
	cctx, cancel := r.call(ctx)
	defer cancel()
	info, err := r.cli.ImageInspect(cctx, ref)
	if isNotFound(err) {
		return imageFacts{}, errImageMissing(ref, err)
	}
	if err != nil {
		return imageFacts{}, fmt.Errorf("inspecting image %q: %w", ref, err)
	}
	f := imageFacts{id: info.ID}
	if c := info.Config; c != nil {
		for _, kv := range c.Env {
			if v, ok := strings.CutPrefix(kv, "HOME="); ok {
				f.home = v
			}
			if v, ok := strings.CutPrefix(kv, "PATH="); ok {
				f.path = v
			}
		}
		f.user = c.User
		f.workdir = c.WorkingDir
		f.ours = c.Labels[LabelImageKind] != ""
		f.command = imageCommand(c.Entrypoint, c.Cmd)
	}
	if r.quota.overlayOn() {
		f.layers = overlayLayers(info.GraphDriver)
		if f.layers != nil {
			f.workspaceMode, f.emptyWorkspace = emptyInLayers(f.layers, strings.TrimPrefix(sandbox.WorkspaceDir, "/"))
		}
	}
	return f, nil
}

// seeding is how a volume of the session gets the image's content.
type seeding int

const (
	// seedEngine: the engine copies the image's folder (content, owners
	// and mode) into the empty volume when the container is created.
	seedEngine seeding = iota
	// seedOwned: sandboxd copies the image's folder in before the
	// container starts, every entry owned by the session user (seed.go);
	// the container mounts the volume without the engine's copy-up.
	seedOwned
	// seedNone: a tmpfs volume (Limits.Disk), empty and owned by the
	// session user through its mount options.
	seedNone
	// seedOverlay: what seedOwned gives, by an overlay of the image's
	// layers mounted by the daemon and bound into the container
	// (overlay.go, decision 0040); no engine volume.
	seedOverlay
)

// vol is one of the session's volumes: the workspace, the home folder, an
// editable path.
type vol struct {
	name   string // the engine's volume name
	target string // its mount point, the image's folder it is seeded from
	what   string // for messages: "workspace", "home", "editable path /testbed"
	seed   seeding
	// bind is the host folder bound at target (seedOverlay), set once
	// its overlay is mounted (mountOverlays).
	bind string
	// rootOnly: a seedOwned volume whose folder the image has empty: no
	// copy, its root handed to the session user with rootMode on the host
	// (handOverRoot).
	rootOnly bool
	rootMode os.FileMode
}

// layout is where a session's volumes go and what its container needs
// besides its options: worked out from the options and the image, before
// anything is created.
type layout struct {
	// uid and gid are the session user's: the options' User, or the
	// image's USER resolved (sandbox.UserImage).
	uid, gid int
	// cwd is the container's working directory: Cwd, the image's WORKDIR
	// (other than "/"), or the workspace.
	cwd string
	// home is the mount point of the home volume; "" when HOME lies in
	// /workspace, /tmp or an editable path (writable already), the
	// session runs as the image's user on a writable root (HOME is the
	// image's own), or the session set an unusable HOME itself.
	home string
	// setHome: HOME=home goes into the container's environment (the image
	// names no usable one and the session none).
	setHome bool
	// vols are the session's volumes, the workspace first.
	vols []vol
	// image is what the agent is told of the image (imageEnv, inspect.go).
	image imageFacts
	// path is the PATH to set in the container's environment; "" leaves
	// the image's. A session with skills gets $HOME/.local/bin first: the
	// per-session folder where skill installers put programs.
	path string
}

// owned lists the volumes sandboxd seeds by copying (seedOwned).
func (l layout) owned() []vol {
	var out []vol
	for _, v := range l.vols {
		if v.seed == seedOwned && !v.rootOnly {
			out = append(out, v)
		}
	}
	return out
}

// planLayout decides the working directory, the home volume and how each
// volume is seeded (decision 0028), for session id running as uid:gid.
//
// HOME is the session's Env HOME if set, else the image's; an image whose
// HOME is missing or unusable gets FallbackHome, set in the environment.
//
// One rule seeds every volume: it holds the image's content at its mount
// point, and in a hardened session (a numeric User) every entry of it is
// the session user's. The engine's own copy-up keeps the image's owners, so
// it is used only where they are right already: the workspace and HOME of
// an image of sandboxd's own (LabelImageKind) whose USER is the session
// user, and with sandbox.UserImage the editable paths (the image as its
// harness expects it, owners included). Everything else (a user's image, a
// benchmark task's, another session user, a folder the image lacks) is
// copied by sandboxd with the owners changed (seed.go). A tmpfs volume
// (Limits.Disk) is created owned by the session user and starts empty.
func planLayout(id string, o sandbox.SessionOptions, img imageFacts, uid, gid int) (layout, error) {
	l := layout{uid: uid, gid: gid, image: img}
	var err error
	if l.cwd, err = workingDir(o, img); err != nil {
		return layout{}, err
	}
	// The image as its harness expects it (its user, a writable root) has
	// its HOME where the image has it, in the container's own layer.
	asImage := o.User == sandbox.UserImage && o.WritableRootfs
	writable := func(h string) bool {
		if sandbox.Within(h, sandbox.WorkspaceDir) || sandbox.Within(h, "/tmp") || asImage {
			return true
		}
		for _, e := range o.EditablePaths {
			if sandbox.Within(h, e) {
				return true
			}
		}
		return false
	}
	if h, set := o.Env["HOME"]; set {
		if homeUsable(h) && !writable(h) {
			l.home = h
		}
	} else if homeUsable(img.home) {
		if !writable(img.home) {
			l.home = img.home
		}
	} else {
		l.home, l.setHome = sandbox.FallbackHome, true
	}

	tmpfs := o.Limits.Disk != 0
	theirs := img.ours && imageRunsAs(img.user, uid, gid)
	seed := func(engine bool) seeding {
		switch {
		case tmpfs:
			return seedNone
		case engine:
			return seedEngine
		}
		return seedOwned
	}
	// HOME and the editable paths are seeded by overlay where the runtime
	// can (img.layers); the workspace stays a volume of the engine's, which
	// the session's sidecars mount too.
	overlay := func(s seeding) seeding {
		if s == seedOwned && img.layers != nil {
			return seedOverlay
		}
		return s
	}
	ws := vol{name: workspaceVolume(id), target: sandbox.WorkspaceDir, what: "workspace", seed: seed(theirs)}
	// An image's empty workspace needs no copy, only its root handed
	// over; a quota filesystem's root is the session user's, 0755, already.
	if ws.seed == seedOwned && img.emptyWorkspace && (o.Limits.DiskQuota == 0 || img.workspaceMode == 0o755) {
		ws.rootOnly, ws.rootMode = true, img.workspaceMode
	}
	l.vols = append(l.vols, ws)
	if l.home != "" {
		l.vols = append(l.vols, vol{name: homeVolume(id), target: l.home, what: "home", seed: overlay(seed(theirs && l.home == img.home))})
	}
	// A HOME in an editable path has no volume of its own (it is writable
	// already); an editable path inside HOME is a volume over HOME's.
	for i, e := range o.EditablePaths {
		l.vols = append(l.vols, vol{name: editableVolume(id, i), target: e, what: "editable path " + e, seed: overlay(seed(o.User == sandbox.UserImage))})
	}
	if len(o.Skills) > 0 {
		l.path = skillsPATH(o, img, l)
	}
	return l, nil
}

// defaultPATH is the PATH of a process whose environment names none, as
// Docker sets it for a container whose image sets none.
const defaultPATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// skillsPATH is the PATH of a session with skills: HOME's .local/bin, then
// the session's PATH, else the image's, else the default.
func skillsPATH(o sandbox.SessionOptions, img imageFacts, l layout) string {
	home := img.home
	if h, set := o.Env["HOME"]; set {
		home = h
	} else if l.setHome {
		home = l.home
	}
	rest := cmp.Or(o.Env["PATH"], img.path, defaultPATH)
	if home == "" || !path.IsAbs(home) {
		return rest
	}
	return path.Join(home, ".local/bin") + ":" + rest
}

// workingDir is the container's working directory: the session's Cwd,
// else the image's WORKDIR when it names one other than "/", else the
// workspace. A WORKDIR in the kernel's or sandboxd's folders is refused as
// Validate refuses such a Cwd.
func workingDir(o sandbox.SessionOptions, img imageFacts) (string, error) {
	if o.Cwd != "" {
		return o.Cwd, nil
	}
	w := img.workdir
	if w == "" || w == "/" {
		return sandbox.WorkspaceDir, nil
	}
	w = path.Clean(w)
	if !path.IsAbs(w) {
		return "", &sandbox.OptionsError{Problems: []string{fmt.Sprintf("cwd: the image's WORKDIR %q is not an absolute path; set cwd", img.workdir)}}
	}
	if bad := sandbox.KernelDir(w); bad != "" {
		return "", &sandbox.OptionsError{Problems: []string{fmt.Sprintf("cwd: the image's WORKDIR %q is inside %s; set cwd", img.workdir, bad)}}
	}
	return w, nil
}

// homeUsable reports whether h can be a home directory: absolute, clean,
// not the root or a top-level system folder, and clear of the kernel's and
// sandboxd's own folders.
func homeUsable(h string) bool {
	return h != "" && path.IsAbs(h) && path.Clean(h) == h && !sandbox.IsSystemDir(h) &&
		sandbox.KernelDir(h) == "" && sandbox.SandboxdDir(h) == ""
}

// imageRunsAs reports whether an image's USER is numerically uid:gid. A
// name, or a uid alone (whose group comes from the image's /etc/passwd), is
// not resolved here, so it counts as another user.
func imageRunsAs(user string, uid, gid int) bool {
	u, g, hasGid := strings.Cut(user, ":")
	if !hasGid {
		return false
	}
	iu, err1 := strconv.Atoi(u)
	ig, err2 := strconv.Atoi(g)
	return err1 == nil && err2 == nil && iu == uid && ig == gid
}

// errImageMissing is the error for an image the engine does not have: what
// to do about it, matching sandbox.ErrImageNotFound.
func errImageMissing(ref string, err error) error {
	return fmt.Errorf("image %q is not on the engine (build it with images/build-default-image.sh, or pull it): %w (%v)", ref, sandbox.ErrImageNotFound, err)
}
