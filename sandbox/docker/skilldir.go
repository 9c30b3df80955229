package docker

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandboxd/sandboxd/sandbox"
)

// skillDir is a skill folder checked at create (decision 0039): opened
// under its skill root one component of its path at a time, never through
// a symbolic link, and each component a directory. The loader checked the
// folder at start; a root is a folder on the host that anyone allowed to
// write it can change since, and the engine follows a link in a bind's
// source. What the engine gets is the path that was checked, and check
// re-reads that path (runc resolves it when the container starts).
type skillDir struct {
	mount sandbox.SkillMount
	root  string        // the skill root: Source without Path
	infos []fs.FileInfo // the Lstat of each component of Path, in order
	dir   *os.Root      // the folder, opened; copy mode reads through it
}

// skillRefused is the error of a skill whose folder cannot be mounted: an
// options error, since the client can drop the skill, naming the skill and
// what is wrong (the host's paths stay in the daemon's log).
func skillRefused(skill, format string, args ...any) error {
	return &sandbox.OptionsError{Problems: []string{fmt.Sprintf("skills: skill %s cannot be mounted: ", skill) + fmt.Sprintf(format, args...)}}
}

// openSkillDir opens s.Source, which is <skill root>/<s.Path>, under its
// root: each component of Path must be a directory and not a symbolic
// link, by Lstat and again once opened (the same file).
func openSkillDir(s sandbox.SkillMount) (_ *skillDir, err error) {
	rel := filepath.FromSlash(s.Path)
	root, ok := strings.CutSuffix(filepath.Clean(s.Source), string(filepath.Separator)+rel)
	if !ok || root == "" || s.Path == "" {
		return nil, fmt.Errorf("skill %s: its folder %s is not <skill root>/%s", s.Path, s.Source, s.Path)
	}
	cur, err := os.OpenRoot(root) // the operator's root, as the loader opened it
	if err != nil {
		return nil, skillRefused(s.Path, "its skill root cannot be opened: %v", pathlessErr(err))
	}
	defer func() {
		if err != nil {
			_ = cur.Close()
		}
	}()
	d := &skillDir{mount: s, root: root}
	sofar := ""
	for _, name := range strings.Split(s.Path, "/") {
		sofar = path2(sofar, name)
		li, err := cur.Lstat(name)
		if err != nil {
			return nil, skillRefused(s.Path, "%s: %v", sofar, pathlessErr(err))
		}
		if err := wantDir(li); err != nil {
			return nil, skillRefused(s.Path, "%s %v under its skill root; the folder changed since the server loaded it", sofar, err)
		}
		next, err := cur.OpenRoot(name)
		if err != nil {
			return nil, skillRefused(s.Path, "%s: %v", sofar, pathlessErr(err))
		}
		_ = cur.Close()
		cur = next
		oi, err := cur.Stat(".")
		if err != nil {
			return nil, skillRefused(s.Path, "%s: %v", sofar, pathlessErr(err))
		}
		if !os.SameFile(li, oi) {
			return nil, skillRefused(s.Path, "%s changed while it was checked", sofar)
		}
		d.infos = append(d.infos, li)
	}
	d.dir = cur
	return d, nil
}

// check re-reads the path the engine is given, component by component with
// Lstat: each the same directory as when it was opened, none a link.
func (d *skillDir) check() error {
	p := d.root
	sofar := ""
	for i, name := range strings.Split(d.mount.Path, "/") {
		p = filepath.Join(p, name)
		sofar = path2(sofar, name)
		li, err := os.Lstat(p)
		if err != nil {
			return skillRefused(d.mount.Path, "%s: %v", sofar, pathlessErr(err))
		}
		if err := wantDir(li); err != nil {
			return skillRefused(d.mount.Path, "%s %v under its skill root; it changed while the sandbox was made", sofar, err)
		}
		if !os.SameFile(li, d.infos[i]) {
			return skillRefused(d.mount.Path, "%s was replaced while the sandbox was made", sofar)
		}
	}
	return nil
}

func (d *skillDir) close() {
	if d != nil && d.dir != nil {
		_ = d.dir.Close()
	}
}

// wantDir says why a component's Lstat is not a plain directory.
func wantDir(fi fs.FileInfo) error {
	switch m := fi.Mode(); {
	case m&fs.ModeSymlink != 0:
		return errors.New("is a symbolic link")
	case m.IsRegular():
		return errors.New("is a file, not a directory")
	case !m.IsDir():
		return fmt.Errorf("is not a directory (%s)", m.Type())
	}
	return nil
}

func path2(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// pathlessErr drops the host path of a *fs.PathError: the message names
// the skill, and a client need not learn where the operator keeps it.
func pathlessErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// skillDirs are the checked folders of one create.
type skillDirs []*skillDir

// check checks every folder (see skillDir.check).
func (ds skillDirs) check() error {
	for _, d := range ds {
		if err := d.check(); err != nil {
			return err
		}
	}
	return nil
}

func (ds skillDirs) close() {
	for _, d := range ds {
		d.close()
	}
}
