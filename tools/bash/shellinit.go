package bash

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Values of Options.ShellInit (the "shell_init" param).
const (
	// ShellInitNone (also ""): the shell reads no rc file: it starts the
	// same way in every image.
	ShellInitNone = "none"
	// ShellInitImage: the shell reads the image's environment before its
	// first prompt (ImageInitFiles), so that a venv or conda activation of
	// the image's user applies.
	ShellInitImage = "image"
)

// Variables the runtime sets in the agent's environment for ShellInitImage:
// what the image's config says of its user, which the container's own
// environment no longer shows (the session runs as another user, and its
// HOME may be another folder). Neither reaches the shell.
const (
	// ImageVarPrefix starts every such variable (the entrypoint's too);
	// the shell's environment has none of them.
	ImageVarPrefix = "SANDBOXD_IMAGE_"
	// EnvImageUser is the image's USER as written ("" is root).
	EnvImageUser = "SANDBOXD_IMAGE_USER"
	// EnvImageHome is the HOME of the image's environment; unset when the
	// image sets none.
	EnvImageHome = "SANDBOXD_IMAGE_HOME"
)

// DefaultInitStartTimeout is the start timeout of a shell that reads init
// files (Options.InitFiles) when Options.StartTimeout is not set: a
// `conda activate` starts a Python, which takes seconds on a loaded
// machine.
const DefaultInitStartTimeout = 30 * time.Second

// passwdFile is the user database ImageInitFiles reads (a variable for
// tests).
var passwdFile = "/etc/passwd"

// maxPasswdBytes bounds the read of passwdFile.
const maxPasswdBytes = 1 << 20

// ImageInitFiles are the files a shell reads for ShellInitImage, in order:
// the image's BASH_ENV (for bash; ENV for a POSIX sh), as a non-interactive
// `docker exec IMAGE bash -c` reads it, then (bash) the .bashrc in the home
// folder of the image's user, as `docker run -it IMAGE bash` reads it. That
// home is the image's HOME (EnvImageHome) if it sets one, else the home of
// its USER (EnvImageUser; root when empty) in the image's /etc/passwd,
// else /root for root; without those variables (an agent started by hand)
// the shell's own HOME. A file may be named twice; it is read once.
// getenv looks up the agent's environment.
func ImageInitFiles(isBash bool, getenv func(string) (string, bool)) []string {
	var files []string
	add := func(f string) {
		for _, g := range files {
			if g == f {
				return
			}
		}
		files = append(files, f)
	}
	home := imageHome(getenv)
	envVar := "ENV"
	if isBash {
		envVar = "BASH_ENV"
	}
	if v, _ := getenv(envVar); v != "" {
		if rest, ok := strings.CutPrefix(v, "~/"); ok && home != "" {
			v = filepath.Join(home, rest)
		}
		if filepath.IsAbs(v) {
			add(filepath.Clean(v))
		}
	}
	if isBash && home != "" {
		add(filepath.Join(home, ".bashrc"))
	}
	return files
}

// imageHome is the home folder of the image's user (see ImageInitFiles).
func imageHome(getenv func(string) (string, bool)) string {
	if h, ok := getenv(EnvImageHome); ok && filepath.IsAbs(h) {
		return filepath.Clean(h)
	}
	user, ok := getenv(EnvImageUser)
	if !ok {
		if h, _ := getenv("HOME"); filepath.IsAbs(h) {
			return filepath.Clean(h)
		}
		return ""
	}
	name, _, _ := strings.Cut(user, ":")
	if name == "" {
		name = "0"
	}
	if h := passwdHome(name); h != "" {
		return h
	}
	if name == "0" || name == "root" {
		return "/root"
	}
	return ""
}

// passwdHome is the home folder of user (a name or a numeric uid) in
// passwdFile, "" if it is not there.
func passwdHome(user string) string {
	f, err := os.Open(passwdFile)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(&limitedReader{r: f, n: maxPasswdBytes})
	_, numeric := strconv.Atoi(user)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 7 {
			continue
		}
		if (numeric == nil && fields[2] == user) || (numeric != nil && fields[0] == user) {
			if filepath.IsAbs(fields[5]) {
				return filepath.Clean(fields[5])
			}
			return ""
		}
	}
	return ""
}

type limitedReader struct {
	r interface{ Read([]byte) (int, error) }
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("too long")
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= int64(n)
	return n, err
}

// readableInitFiles keeps the files a shell can read: a missing one is
// left out (an image without a .bashrc), one the session user may not read
// or that is not a regular file (a FIFO would block the shell) is an
// error saying what to do.
func readableInitFiles(files []string) ([]string, error) {
	var out []string
	for _, f := range files {
		st, err := os.Stat(f)
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR):
			continue
		case errors.Is(err, fs.ErrPermission):
			return nil, unreadableInitFile(f, err)
		case err != nil:
			return nil, fmt.Errorf("%s: %w", f, err)
		case !st.Mode().IsRegular():
			return nil, fmt.Errorf("%s is not a regular file (%s)", f, st.Mode().Type())
		}
		fh, err := os.OpenFile(f, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return nil, unreadableInitFile(f, err)
		}
		_ = fh.Close()
		out = append(out, f)
	}
	return out, nil
}

func unreadableInitFile(f string, err error) error {
	return fmt.Errorf("%s cannot be read by the session user (uid %d): %w. "+
		"In a hardened session (user 1000) the image user's home is readable when it is the session's HOME: "+
		"set env HOME to that folder (e.g. HOME: %s) so that the session's home volume is seeded from it, owned by the session user; "+
		"or run as the image's user (user: image)", f, os.Getuid(), errors.Unwrap(err), filepath.Dir(f))
}

// initPrelude is the part of the init script that reads the init files
// and then undoes what in them would break the terminal's plumbing: errexit
// and nounset (the marker functions would end the shell or fail), xtrace
// and verbose (noise), the DEBUG, ERR and RETURN traps, line editing, a
// PROMPT_COMMAND array's other elements, PS0, functions that shadow the
// builtins the plumbing calls, and a `cd` (the terminal starts in its own
// directory). Every file reads /dev/null as its input, so a `read` in it
// does not take the terminal's. What the files export, their functions
// and aliases, and their other options stay, as in the image's own shell.
func initPrelude(files []string, dir string, isBash bool) string {
	if len(files) == 0 {
		return ""
	}
	var b strings.Builder
	for _, f := range files {
		q := shellQuote(f)
		fmt.Fprintf(&b, "if [ -r %s ]; then . %s </dev/null; fi\n", q, q)
	}
	if isBash {
		b.WriteString("unset -f builtin command read printf jobs eval set trap shopt cd unset return 2>/dev/null\n")
		b.WriteString("set +o errexit +o nounset +o xtrace +o verbose +o vi +o emacs +o functrace +o errtrace 2>/dev/null\n")
		b.WriteString("shopt -u extdebug 2>/dev/null\n")
		b.WriteString("trap - DEBUG ERR RETURN\n")
		b.WriteString("unset PROMPT_COMMAND PS0 2>/dev/null\n")
		// The plumbing's functions come next: parsed without the files'
		// aliases, which are restored for the commands afterwards.
		b.WriteString("if shopt -q expand_aliases; then __sbx_ea=1; else __sbx_ea=; fi; shopt -u expand_aliases\n")
	} else {
		b.WriteString("set +e +u +x +v 2>/dev/null\n")
	}
	if dir != "" {
		fmt.Fprintf(&b, "cd -- %s 2>/dev/null\n", shellQuote(dir))
	}
	return b.String()
}

// initEpilogue restores alias expansion after the plumbing is defined.
func initEpilogue(files []string, isBash bool) string {
	if len(files) == 0 || !isBash {
		return ""
	}
	return "if [ -n \"$__sbx_ea\" ]; then shopt -s expand_aliases; fi; unset __sbx_ea\n"
}

// initError names shell_init in a start failure of a shell that read init
// files, so the operator knows which setting to look at.
func initError(files []string, err error) error {
	if len(files) == 0 || err == nil {
		return err
	}
	return fmt.Errorf("shell_init: image: while reading %s: %w", strings.Join(files, ", "), err)
}
