package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/mount"

	"github.com/sandboxd/sandboxd/sandbox"
)

// The direct path (decision 0035): per session a folder of the daemon's,
// <DirectDir>/<scope>/<session id>, mounted read-only at sandbox.DirectDir.
// The folders above it are 0700 and the daemon's: no other user of the host
// reaches the sockets, and a sandbox sees its own folder only. The folder is
// 0711 (the session user may pass through it, not list it) and holds, only
// while a direct path is being set up, one socket of a random name (0666:
// whichever user the sandbox runs as may connect; the token decides).

// setupDirect makes this runtime's folder of session folders, or says why
// there is none.
func (r *Runtime) setupDirect(local bool) {
	switch {
	case r.opts.DirectDir == "":
		r.directErr = errors.New("no DirectDir")
		return
	case !local:
		r.directErr = errors.New("the engine is not on a local unix socket: a host folder cannot be mounted")
	}
	dir := filepath.Join(r.opts.DirectDir, ScopeOf(r.opts.Labels))
	if err := privateDir(r.opts.DirectDir); err != nil {
		r.directErr = errors.Join(r.directErr, err)
		return
	}
	if err := privateDir(dir); err != nil {
		r.directErr = errors.Join(r.directErr, err)
		return
	}
	r.directDir = dir // Remove and List find folders of earlier runs
	if r.opts.NoDirect {
		r.directErr = errors.Join(r.directErr, errors.New("turned off (NoDirect)"))
	}
}

// privateDir makes dir (and its parents) if missing and makes sure it is a
// directory, not a symlink, of mode 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("direct path folder: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("direct path folder: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("direct path folder %s: a %v, not a directory", dir, fi.Mode().Type())
	}
	if fi.Mode().Perm() != 0o700 {
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("direct path folder: %w", err)
		}
	}
	return nil
}

// DirectOn says whether new sessions get a direct path, and why not.
func (r *Runtime) DirectOn() (bool, error) { return r.directErr == nil, r.directErr }

// DirectFolder is the host folder of a session's direct path ("" when this
// runtime keeps none).
func (r *Runtime) DirectFolder(sessionID string) string {
	if r.directDir == "" || !validID(sessionID) {
		return ""
	}
	return filepath.Join(r.directDir, sessionID)
}

// validID: a session id names a folder: no separator, no dot names.
func validID(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, `/\`) && len(id) <= 128
}

// directMount makes the session's folder and returns its mount; none (and
// no error) when the direct path is off.
func (r *Runtime) directMount(sessionID string) ([]mount.Mount, error) {
	if r.directErr != nil {
		return nil, nil
	}
	dir := r.DirectFolder(sessionID)
	if dir == "" {
		return nil, fmt.Errorf("direct path: invalid session id %q", sessionID)
	}
	if err := os.Mkdir(dir, 0o711); err != nil {
		return nil, fmt.Errorf("direct path folder: %w", err)
	}
	if err := os.Chmod(dir, 0o711); err != nil { // the umask may have taken the x bits
		return nil, fmt.Errorf("direct path folder: %w", err)
	}
	return []mount.Mount{{
		Type: mount.TypeBind, Source: dir, Target: sandbox.DirectDir, ReadOnly: true,
		BindOptions: &mount.BindOptions{NonRecursive: true},
	}}, nil
}

// removeDirect removes a session's folder with what is left in it.
func (r *Runtime) removeDirect(sessionID string) error {
	dir := r.DirectFolder(sessionID)
	if dir == "" {
		return nil
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("removing the direct path folder: %w", err)
	}
	return nil
}

// listDirect reports the session folders (sandbox.KindDirect).
func (r *Runtime) listDirect() ([]sandbox.Resource, error) {
	if r.directDir == "" {
		return nil, nil
	}
	ents, err := os.ReadDir(r.directDir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("listing direct path folders: %w", err)
	}
	var out []sandbox.Resource
	for _, e := range ents {
		if !validID(e.Name()) {
			continue
		}
		out = append(out, sandbox.Resource{Kind: sandbox.KindDirect, ID: filepath.Join(r.directDir, e.Name()), Name: e.Name(), SessionID: e.Name()})
	}
	return out, nil
}

// directState is the direct path's line of the startup log.
func directState(err error) string {
	if err == nil {
		return "on"
	}
	return "off: " + err.Error()
}
