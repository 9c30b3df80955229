package docker

import (
	"cmp"
	"context"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox"
)

// LabelImageKind marks the images sandboxd's own scripts build (images/):
// their /workspace and HOME belong to 1000:1000, the image's USER.
const LabelImageKind = "sandboxd.image.kind"

// imageFacts is what a start needs to know of the session's image.
type imageFacts struct {
	id   string // image ID, so the ownership helper runs exactly this image
	home string // HOME of the image's environment; "" when it sets none
	path string // PATH of the image's environment; "" when it sets none
	user string // the image's USER
	ours bool   // built by sandboxd's scripts (LabelImageKind)
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
		f.ours = c.Labels[LabelImageKind] != ""
	}
	return f, nil
}

// layout is where a session's volumes go and what its container needs
// besides its options: worked out from the options and the image, before
// anything is created.
type layout struct {
	// home is the mount point of the home volume; "" when HOME lies in
	// /workspace or /tmp (writable already) or the session set an unusable
	// HOME itself.
	home string
	// setHome: HOME=home goes into the container's environment (the image
	// names no usable one and the session none).
	setHome bool
	// fix lists the volume mount points whose root the ownership fix hands
	// to the session user before the container is created; empty when no
	// fix is needed. Those volumes were seeded by the fix's helper, so the
	// container mounts them without the engine's copy-up (NoCopy), which
	// would otherwise reset the owner of an empty volume to the image's.
	fix []string
	// path is the PATH to set in the container's environment; "" leaves
	// the image's. A session with skills gets $HOME/.local/bin first: the
	// per-session folder where skill installers put programs.
	path string
}

// planLayout decides the home volume and the ownership fix.
//
// HOME is the session's Env HOME if set, else the image's; an image whose
// HOME is missing or unusable gets FallbackHome, set in the environment.
//
// The engine seeds a new volume with the image's folder at its mount point:
// content, owner and mode. An image of sandboxd's own (LabelImageKind) that
// runs as the session user has /workspace and HOME owned by that user, so
// nothing more is needed. Any other image (a user's, a benchmark task's),
// another session user, or a home folder the image lacks gets the volume
// roots handed to the session user (see fixOwnership). A tmpfs volume
// (Limits.Disk) is created owned by the session user and needs no fix.
func planLayout(o sandbox.SessionOptions, img imageFacts) (l layout) {
	defer func() {
		if len(o.Skills) > 0 {
			l.path = skillsPATH(o, img, l)
		}
	}()
	if h, set := o.Env["HOME"]; set {
		if homeUsable(h) && !homeWritable(h) {
			l.home = h
		}
	} else if homeUsable(img.home) {
		if !homeWritable(img.home) {
			l.home = img.home
		}
	} else {
		l.home, l.setHome = sandbox.FallbackHome, true
	}
	if o.Limits.Disk != 0 {
		return l
	}
	uid, gid, _ := sandbox.ParseUser(o.User)
	seeded := img.ours && imageRunsAs(img.user, uid, gid)
	if !seeded {
		l.fix = append(l.fix, sandbox.WorkspaceDir)
	}
	if l.home != "" && (!seeded || l.home != img.home) {
		l.fix = append(l.fix, l.home)
	}
	return l
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

// systemDirs are top-level folders that are no home: a volume there would
// copy, say, all of /usr for every session and hand its root to the user.
var systemDirs = map[string]bool{
	"/bin": true, "/boot": true, "/etc": true, "/lib": true, "/lib32": true, "/lib64": true,
	"/libx32": true, "/sbin": true, "/usr": true, "/var": true, "/run": true, "/home": true,
}

// homeUsable reports whether h can be a home directory: absolute, clean,
// not the root or a top-level system folder, and clear of the kernel's and
// sandboxd's own folders.
func homeUsable(h string) bool {
	if h == "" || !path.IsAbs(h) || path.Clean(h) != h || h == "/" || systemDirs[h] {
		return false
	}
	for _, bad := range []string{"/proc", "/sys", "/dev", sandbox.AgentDir, sandbox.RunDir} {
		if within(h, bad) {
			return false
		}
	}
	return true
}

// homeWritable reports whether h lies on a mount that is writable already.
func homeWritable(h string) bool { return within(h, sandbox.WorkspaceDir) || within(h, "/tmp") }

func within(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// imageRunsAs reports whether an image's USER is numerically uid:gid. A
// name, or a uid alone (whose group comes from the image's /etc/group), is
// not resolved without running the image, so it counts as another user.
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
