package skill

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/sandboxd/sandboxd/skills"
	"github.com/sandboxd/sandboxd/tools"
	"github.com/sandboxd/sandboxd/tools/internal/output"
)

const (
	// maxLogBytes caps an installer's log: a longer one keeps its first and
	// last halves.
	maxLogBytes = 1 << 20
	// tailLines is how much of a failed installer's log its error shows.
	tailLines = 20
)

// install is one skill's installer in this session: done closes when it
// has run (or was found done, or failed before).
type install struct {
	done chan struct{}
	err  error
}

// InstallError is a skill's dependency installer that failed: the skill's
// calls fail with it for the rest of the session.
type InstallError struct {
	Skill     string // the skill's path
	Installer string // relative to the skill's folder
	// Status: "exited with code N", "timed out after D", "was killed by
	// signal S", or "could not start: ...".
	Status string
	Log    string // the log's path in the sandbox
	Tail   string // its last lines
}

func (e *InstallError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Skill %q cannot be used in this session: its dependency installer %s %s.", e.Skill, e.Installer, e.Status)
	b.WriteString(" An installer runs once per session and its failure stands until the session ends; the other skills and tools are not affected.")
	if e.Log != "" {
		fmt.Fprintf(&b, "\nThe installer's log is %s", e.Log)
		if e.Tail != "" {
			fmt.Fprintf(&b, "; its last lines:\n%s", e.Tail)
		} else {
			b.WriteString(" (empty).")
		}
	}
	return b.String()
}

// stateName is a skill's file name stem under the state directory: its
// path with '/' as "__" and other odd bytes as '_', plus a short hash of
// the path, so that two paths never share one.
func stateName(path string) string {
	b := []byte(path)
	for i, c := range b {
		if !nameByte(c) && c != '.' && c != '/' {
			b[i] = '_'
		}
	}
	s := strings.ReplaceAll(string(b), "/", "__")
	if len(s) > 100 {
		s = s[:100]
	}
	sum := sha256.Sum256([]byte(path))
	return s + "-" + hex.EncodeToString(sum[:4])
}

// ensureInstalled runs s's installer if it has not run in this session,
// once however many calls ask at once: the first starts it, all wait for
// it (each until its own ctx ends; the installer goes on for the others
// and is bounded by its own timeout, not by any caller). A marker under the
// state directory keeps a new executor of the same session from running it
// again; a failure is kept there too, and stands for the session.
func (x *Executor) ensureInstalled(ctx context.Context, s *skills.Skill) error {
	if s.Installer == "" {
		return nil
	}
	x.mu.Lock()
	in, ok := x.installs[s.Path]
	if !ok {
		if x.closed {
			x.mu.Unlock()
			return tools.ErrClosed
		}
		in = &install{done: make(chan struct{})}
		x.installs[s.Path] = in
		x.wg.Go(func() {
			defer close(in.done)
			in.err = x.runInstaller(s)
		})
	}
	x.mu.Unlock()
	select {
	case <-in.done:
		return in.err
	default:
	}
	tools.StreamFrom(ctx)([]byte(fmt.Sprintf("[Installing the dependencies of skill %q (%s); this runs once per session.]\n", s.Path, s.Installer)))
	select {
	case <-in.done:
		return in.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (x *Executor) runInstaller(s *skills.Skill) error {
	stem := filepath.Join(x.stateDir, stateName(s.Path))
	marker, failed, logPath := stem+".done", stem+".failed", stem+".log"
	if _, err := os.Stat(marker); err == nil {
		return nil
	}
	if msg, err := os.ReadFile(failed); err == nil {
		return errors.New(string(msg))
	}
	fail := func(e *InstallError) error {
		x.log.Warn("skills: installer failed", "skill", s.Path, "installer", s.Installer, "status", e.Status, "log", e.Log)
		if x.base.Err() == nil { // not ended by Close
			_ = os.WriteFile(failed, []byte(e.Error()), 0o600)
		}
		return e
	}
	rel, err := cleanRel(s.Installer)
	if err != nil {
		return fail(&InstallError{Skill: s.Path, Installer: s.Installer, Status: "is not usable: " + err.Error()})
	}
	folder := x.folder(s)
	script := filepath.Join(folder, filepath.FromSlash(rel))
	if _, err := os.Stat(script); err != nil {
		return fail(&InstallError{Skill: s.Path, Installer: s.Installer, Status: "could not start: " + err.Error()})
	}
	log, err := output.NewFile(logPath, maxLogBytes, 4000)
	if err != nil {
		return fail(&InstallError{Skill: s.Path, Installer: s.Installer, Status: "could not start: its log: " + err.Error()})
	}
	timeout := installTimeoutOf(s)
	start := time.Now()
	x.log.Info("skills: running an installer", "skill", s.Path, "installer", s.Installer, "timeout", timeout)
	res := run(x.base, procSpec{
		argv:    []string{"bash", script},
		dir:     folder,
		env:     x.envFor(s),
		timeout: timeout,
		out:     func(_ bool, p []byte) { log.Add(p) },
	})
	log.Finish()
	var status string
	switch {
	case res.startErr != nil:
		status = "could not start: " + res.startErr.Error()
	case res.timedOut:
		status = "timed out after " + timeout.String() + " and was killed"
	case res.cancelled:
		status = "was stopped: the session is ending"
	case res.signal != 0:
		status = fmt.Sprintf("was killed by signal %d (%s)", int(res.signal), res.signal)
	case res.exit != 0:
		status = fmt.Sprintf("exited with code %d", res.exit)
	default:
		if err := writeMarker(marker); err != nil {
			x.log.Warn("skills: installer marker not written; a new agent would run it again", "skill", s.Path, "err", err)
		}
		x.log.Info("skills: installer done", "skill", s.Path, "took", time.Since(start).Round(time.Millisecond))
		return nil
	}
	return fail(&InstallError{Skill: s.Path, Installer: s.Installer, Status: status, Log: logPath, Tail: logTail(logPath, tailLines)})
}

// writeMarker creates path atomically (a temporary file renamed).
func writeMarker(path string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// logTail is the last n lines of the log at path (from its last 16 KiB).
func logTail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	const window = 16 << 10
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	off := max(st.Size()-window, 0)
	buf, err := io.ReadAll(io.NewSectionReader(f, off, window))
	if err != nil {
		return ""
	}
	buf = bytes.TrimRight(buf, "\n")
	lines := strings.Split(strings.ToValidUTF8(string(buf), "\uFFFD"), "\n")
	if off > 0 && len(lines) > 1 {
		lines = lines[1:] // the first is likely cut
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// InstallAll runs the installer of every skill of the session that has one
// and has not run it yet, one after the other by ## Priority (lower first),
// then path: what `skills_install: eager` runs before a session is handed
// out. Each failure is kept for its skill (its calls fail with it); the
// error joins them, each naming its skill. It returns early when ctx ends.
func (x *Executor) InstallAll(ctx context.Context) error {
	ctx, done, err := x.begin(ctx)
	if err != nil {
		return err
	}
	defer done()
	ss := slices.Clone(x.opts.Skills)
	ss = slices.DeleteFunc(ss, func(s *skills.Skill) bool { return s == nil || s.Installer == "" })
	slices.SortStableFunc(ss, func(a, b *skills.Skill) int {
		return cmp.Or(cmp.Compare(a.Priority, b.Priority), cmp.Compare(a.Path, b.Path))
	})
	var errs []error
	for _, s := range ss {
		if err := x.ensureInstalled(ctx, s); err != nil {
			if ctx.Err() != nil {
				return errors.Join(append(errs, ctx.Err())...)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
