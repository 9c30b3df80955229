package bash

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// envOf is a lookup in a fixed environment.
func envOf(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}
}

// TestImageInitFiles: which files shell_init: image reads, from what the
// runtime says of the image (its HOME, its USER and that user's passwd
// entry) and the image's BASH_ENV / ENV. (Not parallel: it sets
// passwdFile.)
func TestImageInitFiles(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/bash\nbroken line\n"+
		"app:x:1200:1200::/home/app:/bin/sh\nrel:x:1300:1300::relative:/bin/sh\n"), 0o644))
	saved := passwdFile
	passwdFile = passwd
	t.Cleanup(func() { passwdFile = saved })

	cases := []struct {
		name string
		bash bool
		env  map[string]string
		want []string
	}{
		{"image HOME wins", true, map[string]string{EnvImageHome: "/root", EnvImageUser: "app", "HOME": "/home/sandboxd"}, []string{"/root/.bashrc"}},
		{"no HOME: root by passwd", true, map[string]string{EnvImageUser: "", "HOME": "/home/sandboxd"}, []string{"/root/.bashrc"}},
		{"no HOME: a named user", true, map[string]string{EnvImageUser: "app:app"}, []string{"/home/app/.bashrc"}},
		{"no HOME: a numeric user", true, map[string]string{EnvImageUser: "1200"}, []string{"/home/app/.bashrc"}},
		{"a user not in passwd", true, map[string]string{EnvImageUser: "ghost"}, nil},
		{"a relative home is none", true, map[string]string{EnvImageUser: "rel"}, nil},
		{"root by number, passwd or not", true, map[string]string{EnvImageUser: "0:0"}, []string{"/root/.bashrc"}},
		{"no runtime facts: the shell's HOME", true, map[string]string{"HOME": "/home/x/"}, []string{"/home/x/.bashrc"}},
		{"BASH_ENV first, ~ is the image user's", true, map[string]string{EnvImageHome: "/root", "BASH_ENV": "~/.env.sh"}, []string{"/root/.env.sh", "/root/.bashrc"}},
		{"BASH_ENV naming .bashrc: read once", true, map[string]string{EnvImageHome: "/root", "BASH_ENV": "/root/.bashrc"}, []string{"/root/.bashrc"}},
		{"a relative BASH_ENV is ignored", true, map[string]string{EnvImageHome: "/root", "BASH_ENV": "env.sh"}, []string{"/root/.bashrc"}},
		{"sh reads ENV only", false, map[string]string{EnvImageHome: "/root", "ENV": "/etc/shinit", "BASH_ENV": "/x"}, []string{"/etc/shinit"}},
		{"sh without ENV reads nothing", false, map[string]string{EnvImageHome: "/root"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, ImageInitFiles(c.bash, envOf(c.env)))
		})
	}
}

// venvHome makes an image user's home whose .bashrc activates a venv the
// way SWE-bench images do, plus much that would break the terminal's
// plumbing if it were left in place; it returns the home and the venv.
func venvHome(t *testing.T) (home, venv string) {
	t.Helper()
	home = t.TempDir()
	venv = filepath.Join(t.TempDir(), "venv")
	require.NoError(t, os.MkdirAll(filepath.Join(venv, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(venv, "bin", "python"), []byte("#!/bin/sh\necho venv-python\n"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(venv, "bin", "activate"), []byte(`
deactivate() { PATH=$_OLD_PATH; unset VIRTUAL_ENV; unset -f deactivate; }
_OLD_PATH=$PATH
VIRTUAL_ENV=`+shellQuote(venv)+`
export VIRTUAL_ENV
PATH="$VIRTUAL_ENV/bin:$PATH"
export PATH
PS1="(venv) ${PS1:-}"
`), 0o644))
	rc := `
case $- in *i*) ;; *) return;; esac
. ` + shellQuote(filepath.Join(venv, "bin", "activate")) + `
read -r first_line
echo "rc read: [$first_line]"
alias ll='echo aliased-ll'
alias read='echo hijacked'
printf() { echo hijacked; }
PROMPT_COMMAND=('echo pc0' 'echo pc1')
PS0='ps0 '
trap 'echo debug-trap' DEBUG
cd /
set -eu
`
	require.NoError(t, os.WriteFile(filepath.Join(home, ".bashrc"), []byte(rc), 0o644))
	return home, venv
}

// TestShellInitImageVenv: the image user's .bashrc activates a venv, and
// what else it does cannot break the prompt protocol: its read gets no
// terminal input, its PROMPT_COMMAND, PS0, DEBUG trap, `cd`, errexit and
// nounset are undone, its aliases and functions do not reach the
// plumbing, while its variables, PATH, functions and aliases are the
// shell's. A reset reads it again.
func TestShellInitImageVenv(t *testing.T) {
	t.Parallel()
	home, venv := venvHome(t)
	opts := testOptions(t, "bash")
	opts.ShellInit = ShellInitImage
	opts.lookupEnv = envOf(map[string]string{EnvImageHome: home, EnvImageUser: "", "BASH_ENV": "/nonexistent/env"})
	e := newExec(t, opts)

	text, out, obs := do(t, e, cmd(`echo "$VIRTUAL_ENV"; python; type -t deactivate; pwd`))
	require.False(t, obs.IsError, text)
	dir, _ := filepath.Abs(opts.Dir)
	assert.Equal(t, venv+"\nvenv-python\nfunction\n"+dir, strings.TrimSpace(body(text)))
	assert.Equal(t, filepath.Join(venv, "bin", "python"), out.Metadata.PyInterpreterPath)
	assert.Equal(t, dir, out.Metadata.WorkingDir, "the terminal starts in its own directory")
	for _, bad := range []string{"pc0", "pc1", "ps0", "debug-trap", "hijacked", "(venv)", "rc read"} {
		assert.NotContains(t, text, bad)
	}

	text, _, _ = do(t, e, cmd("ll; false; echo $UNSET_VAR_X; echo still-here"))
	assert.Equal(t, "aliased-ll\n\nstill-here", strings.TrimSpace(body(text)), "aliases stay; errexit and nounset do not")
	assert.NotContains(t, text, "debug-trap")

	text, _, obs = do(t, e, Action{Reset: true, Command: `echo "$VIRTUAL_ENV"`})
	require.False(t, obs.IsError, text)
	assert.Contains(t, text, venv, "a reset reads the rc file again")
}

// TestShellInitCondaStyle: a conda-style activate script (a function that
// exports PATH and CONDA_PREFIX), sourced from the image's BASH_ENV and
// called from its .bashrc.
func TestShellInitCondaStyle(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	prefix := filepath.Join(t.TempDir(), "envs", "testbed")
	require.NoError(t, os.MkdirAll(filepath.Join(prefix, "bin"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(prefix, "bin", "python"), []byte("#!/bin/sh\necho conda-python\n"), 0o755))
	condaSh := filepath.Join(t.TempDir(), "conda.sh")
	require.NoError(t, os.WriteFile(condaSh, []byte(`
conda() {
  case "$1" in
    activate) CONDA_PREFIX=`+shellQuote(filepath.Dir(filepath.Dir(prefix)))+`/envs/$2; CONDA_DEFAULT_ENV=$2
              export CONDA_PREFIX CONDA_DEFAULT_ENV; PATH=$CONDA_PREFIX/bin:$PATH; export PATH; PS1="($2) $PS1";;
    *) echo "conda: $1: not handled here" >&2; return 1;;
  esac
}
`), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(home, ".bashrc"), []byte("conda activate testbed\n"), 0o644))
	opts := testOptions(t, "bash")
	opts.ShellInit = ShellInitImage
	opts.lookupEnv = envOf(map[string]string{EnvImageHome: home, "BASH_ENV": condaSh})
	e := newExec(t, opts)
	text, out, obs := do(t, e, cmd(`python; echo "$CONDA_DEFAULT_ENV"; type -t conda`))
	require.False(t, obs.IsError, text)
	assert.Equal(t, "conda-python\ntestbed\nfunction", strings.TrimSpace(body(text)))
	assert.Equal(t, filepath.Join(prefix, "bin", "python"), out.Metadata.PyInterpreterPath)
}

// TestShellInitSh: a POSIX sh reads the image's ENV.
func TestShellInitSh(t *testing.T) {
	t.Parallel()
	envFile := filepath.Join(t.TempDir(), "shinit")
	require.NoError(t, os.WriteFile(envFile, []byte("FROM_ENV=yes; export FROM_ENV; cd /; set -u\n"), 0o644))
	opts := testOptions(t, "sh")
	opts.ShellInit = ShellInitImage
	opts.lookupEnv = envOf(map[string]string{EnvImageHome: t.TempDir(), "ENV": envFile})
	e := newExec(t, opts)
	text, out, obs := do(t, e, cmd(`echo "$FROM_ENV" $UNSET_X`))
	require.False(t, obs.IsError, text)
	assert.Equal(t, "yes", strings.TrimSpace(body(text)))
	dir, _ := filepath.Abs(opts.Dir)
	assert.Equal(t, dir, out.Metadata.WorkingDir)
}

// TestShellInitFailures: an rc file that never finishes, exits the shell,
// is not a regular file, or cannot be read fails the terminal's start
// with an error naming shell_init, told by the first call (the agent
// lives on); the next call tries again, with the file again. A missing rc
// file is no error.
func TestShellInitFailures(t *testing.T) {
	t.Parallel()
	hang := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(hang, ".bashrc"), []byte("echo waiting; sleep 600\n"), 0o644))
	exits := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(exits, ".bashrc"), []byte("exit 3\n"), 0o644))
	fifo := t.TempDir()
	require.NoError(t, os.Mkdir(filepath.Join(fifo, ".bashrc"), 0o755))
	cases := []struct {
		name, home string
		want       []string
	}{
		{"hangs", hang, []string{"shell_init: image", hang + "/.bashrc", "no prompt within 1s"}},
		{"exits", exits, []string{"shell_init: image", "exited with code 3"}},
		{"not a file", fifo, []string{"shell_init: image", "not a regular file"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			opts := testOptions(t, "bash")
			opts.ShellInit = ShellInitImage
			opts.StartTimeout = time.Second
			opts.lookupEnv = envOf(map[string]string{EnvImageHome: c.home})
			e := newExec(t, opts)
			text, _, obs := do(t, e, cmd("echo hi"))
			assert.True(t, obs.IsError, text)
			assert.Contains(t, text, "The terminal could not start")
			for _, w := range c.want {
				assert.Contains(t, text, w)
			}
			if c.name != "not a file" {
				return
			}
			// The next call tries again and fails alike: never a shell
			// without the file (the system's python after one error).
			text, _, obs = do(t, e, cmd("echo hi"))
			assert.True(t, obs.IsError, text)
			assert.Contains(t, text, "Starting a new shell failed: shell_init: image")
			assert.Contains(t, text, "not a regular file")
		})
	}

	t.Run("missing", func(t *testing.T) {
		t.Parallel()
		opts := testOptions(t, "bash")
		opts.ShellInit = ShellInitImage
		opts.lookupEnv = envOf(map[string]string{EnvImageHome: t.TempDir()})
		e := newExec(t, opts)
		text, _, obs := do(t, e, cmd("echo hi"))
		assert.False(t, obs.IsError, text)
		assert.Equal(t, "hi", strings.TrimSpace(body(text)))
	})
}

// TestShellInitUnreadable: an rc file the session user may not read (a
// hardened session and a root-only home) is an error that says what to
// set. As root every file is readable: skipped.
func TestShellInitUnreadable(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("root reads every file")
	}
	home := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, ".bashrc"), []byte("true\n"), 0o000))
	opts := testOptions(t, "bash")
	opts.ShellInit = ShellInitImage
	opts.lookupEnv = envOf(map[string]string{EnvImageHome: home})
	e := newExec(t, opts)
	text, _, obs := do(t, e, cmd("echo hi"))
	assert.True(t, obs.IsError, text)
	assert.Contains(t, text, "cannot be read by the session user")
	assert.Contains(t, text, "HOME: "+home)
}

// TestShellInitOff: without shell_init the image's rc files are not read,
// and the runtime's SANDBOXD_IMAGE_* variables never reach the shell.
func TestShellInitOff(t *testing.T) {
	t.Parallel()
	env := shellEnv([]string{"HOME=/root", EnvImageHome + "=/root", EnvImageUser + "=", ImageVarPrefix + "ENTRYPOINT=[]", "BASH_ENV=/x"}, nil)
	for _, kv := range env {
		assert.False(t, strings.HasPrefix(kv, "SANDBOXD_IMAGE_") || strings.HasPrefix(kv, "BASH_ENV="), kv)
	}
	assert.Contains(t, env, "HOME=/root")
	_, err := NewExecutor(Options{ShellInit: "bashrc"})
	assert.ErrorContains(t, err, `shell_init "bashrc" is not "none" or "image"`)
}
